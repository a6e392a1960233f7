#!/usr/bin/env bash
# Issue 26, on the warm node of call P: the fastest Caffe setting with every fusion on (Caffe's
# default now) and share_diffs, ResNet-18 (256) and ResNet-50 (128), 3 processes per point;
# then PyTorch's three modes, 3 processes each, in the same call (no profile: the call's time).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/q; mkdir -p $R
[ -x third_party/caffe/build/tools/caffe ] || { scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"; }
timeout 150 python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid_all --nets resnet18,resnet50 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines both --repeats 3 --no-pytorch --share-diffs --cache third_party/grid_bench.sqlite > $R/grid_all.log 2>&1; el "grid fusions=default(all) rc=$?"
grep -E "^resnet" $R/grid_all.log | cut -c1-150 | tail -2
rm -rf $R/grid_all/prototxt
left=$(( 585 - ($(date +%s)-t0) ))
timeout $left python3 scripts/time_pytorch.py --net resnet18 --net resnet50 --processes 3 --json $R/pytorch.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
grep -E "fastest" $R/pytorch.log | cut -c1-200
tar czf $OUT/q.tgz -C $OUT q && rm -rf $R; el done
