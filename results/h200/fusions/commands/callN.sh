#!/usr/bin/env bash
# Issue 26: caffe_patch/0008 (Eltwise SUM + ReLU fusion) on the GPU: Caffe built on the node,
# net_fusion_check --gpu (the pytest), then the fastest Caffe setting (shared arena 64 MiB,
# FUSED BatchNorm, both families, share_diffs) without and with the fusion, ResNet-18 (256)
# and ResNet-50 (128), 3 processes per point, one benchmark cache for both.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/n; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
tail -2 $R/setup.log | cut -c1-200
timeout 120 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s "tests/gpu/test_caffe_gpu.py::test_eltwise_relu_fusion_gives_the_same_results_on_the_gpu" > $R/fusion_test.log 2>&1; rc=$?; el "fusion test rc=$rc"
grep -E "fused|IDENTICAL|DIFFERENT|passed|failed|Check failed" $R/fusion_test.log | cut -c1-300 | tail -6
for mode in off on; do
  flag=""; [ $mode = on ] && flag="--fusions eltwise_relu"
  [ $mode = on ] && left=$(( 585 - ($(date +%s)-t0) ))
  [ $mode = off ] && left=$(( 440 - ($(date +%s)-t0) ))
  timeout $left python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid_$mode --nets resnet18,resnet50 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines both --repeats 3 --no-pytorch --share-diffs --cache $R/bench.sqlite $flag > $R/grid_$mode.log 2>&1; el "grid fusion=$mode rc=$?"
  grep -E "^resnet|peak" $R/grid_$mode.log | cut -c1-220 | tail -6
done
rm -f $R/bench.sqlite*
tar czf $OUT/n.tgz -C $OUT n --exclude='*.sqlite*' && rm -rf $R; el done
