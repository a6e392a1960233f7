#!/usr/bin/env bash
# Issue 26: share_diffs (caffe_patch/0007) on the GPU. Caffe built on the node, then the shared
# arena at 64 MiB with FUSED BatchNorm and both families, ResNet-18 (256) and ResNet-50 (128),
# 3 processes per point, without and then with share_diffs (one benchmark cache for both).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/j; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
tail -2 $R/setup.log | cut -c1-200
for mode in off on; do
  flag=""; [ $mode = on ] && flag="--share-diffs"
  [ $mode = on ] && left=$(( 575 - ($(date +%s)-t0) ))
  [ $mode = off ] && left=$(( 420 - ($(date +%s)-t0) ))
  timeout $left python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid_$mode --nets resnet18,resnet50 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines both --repeats 3 --no-pytorch --cache $R/bench.sqlite $flag > $R/grid_$mode.log 2>&1; el "grid share_diffs=$mode rc=$?"
  grep -E "^resnet|peak" $R/grid_$mode.log | cut -c1-220 | tail -6
done
rm -f $R/bench.sqlite*
tar czf $OUT/j.tgz -C $OUT j --exclude='*.sqlite*' && rm -rf $R; el done
