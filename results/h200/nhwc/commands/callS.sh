#!/usr/bin/env bash
# Issue 26: where NHWC parameter gradients differ from NCHW after the first round (call R):
# net_layout_check on ResNet-18 variants (engines legacy/graph, undivided, fusions off, the
# default with CUDA_LAUNCH_BLOCKING=1), then the fusion checks and the comparison with stock
# (caffe_patch/0010), then ResNet-50 (128) in the fastest setting, NCHW and NHWC.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/s; mkdir -p $R
[ -x third_party/caffe/build/tools/caffe ] || { scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"; }
export LD_LIBRARY_PATH=$PWD/third_party/caffe/build/lib:${LD_LIBRARY_PATH:-}
export UCUDNN_CACHE=$PWD/third_party/check_bench.sqlite GLOG_minloglevel=2
python3 -P .device/variants.py $R/nets
T=third_party/caffe/build/tools/net_layout_check
for v in default legacy graph undivided nofusion blocking; do
  n=$v; env=""; [ $v = blocking ] && { n=default; env="CUDA_LAUNCH_BLOCKING=1"; }
  env $env timeout 120 $T $R/nets/$n.prototxt > $R/check_$v.log 2>&1; el "check $v rc=$?"
  grep -E "^round|beyond" $R/check_$v.log | cut -c1-330
done
unset GLOG_minloglevel
timeout 200 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_caffe_gpu.py -k "fusion or results_equal_stock" > $R/tests.log 2>&1; el "fusion+stock tests rc=$?"
grep -E "passed|failed|FAILED" $R/tests.log | cut -c1-220 | tail -6
for lay in NCHW NHWC; do
  left=$(( 585 - ($(date +%s)-t0) ))
  [ $left -gt 60 ] || break
  timeout $left python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid_$lay --nets resnet50 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines both --repeats 3 --no-pytorch --share-diffs --layout $lay --cache third_party/grid_bench.sqlite > $R/grid_$lay.log 2>&1; el "grid layout=$lay rc=$?"
  grep -E "^resnet|rror" $R/grid_$lay.log | cut -c1-160 | tail -3
done
rm -rf $R/grid_*/prototxt
tar czf $OUT/s.tgz -C $OUT s && rm -rf $R; el done
