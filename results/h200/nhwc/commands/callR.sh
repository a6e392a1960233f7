#!/usr/bin/env bash
# Issue 26: caffe_patch/0010 (shared cuDNN handles) and 0011 (NHWC through the net) on the GPU:
# Caffe built on the node, the gtests of 0011 and of BatchNorm, the NHWC-against-NCHW net check
# (ResNet-18, math FMA), then the fastest setting (shared arena 64 MiB, FUSED BN, both
# families, share_diffs, both fusions) for ResNet-18 (256) in NCHW and in NHWC, 3 processes each.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/r; mkdir -p $R
[ -x third_party/caffe/build/tools/caffe ] || { scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"; }
tail -1 $R/setup.log 2>/dev/null | cut -c1-200
timeout 150 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py tests/gpu/test_batchnorm_gpu.py -k "layout_gtests or batchnorm_gtests" > $R/gtests.log 2>&1; el "gtests rc=$?"
grep -E "FAILED|Failure|Expected|passed|failed|error" $R/gtests.log | cut -c1-220 | head -12
timeout 200 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py -k "nhwc_net" > $R/nhwc_net.log 2>&1; el "nhwc net rc=$?"
grep -E "^round|NHWC|WITHIN|BEYOND|passed|failed|Check failed|F1202|error" $R/nhwc_net.log | cut -c1-250 | head -14
for lay in NCHW NHWC; do
  left=$(( 585 - ($(date +%s)-t0) ))
  [ $left -gt 40 ] || break
  timeout $left python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid_$lay --nets resnet18 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines both --repeats 3 --no-pytorch --share-diffs --layout $lay --cache third_party/grid_bench.sqlite > $R/grid_$lay.log 2>&1; el "grid layout=$lay rc=$?"
  grep -E "^resnet|rror" $R/grid_$lay.log | cut -c1-160 | tail -3
done
rm -rf $R/grid_*/prototxt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R; el done
