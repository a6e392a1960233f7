#!/usr/bin/env bash
# Issue 26, the last device seconds: caffe_patch/0011's net check with the rules of Note
# [Comparing nets] (tools/net_layout_check: forward values and each NHWC layer on the same
# inputs; whole-net gradients normwise for information), ResNet-18 with and without
# share_diffs; then ResNet-18 (256) NHWC in the fastest setting (3 processes) and PyTorch's
# two faster modes in the same call (one process each, as the time allows).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/t; mkdir -p $R
[ -x third_party/caffe/build/tools/caffe ] || { scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"; }
timeout 130 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py -k "nhwc_net" > $R/nhwc_net.log 2>&1; el "nhwc net rc=$?"
grep -E "^round|^NHWC layers|blob\(s\)|WITHIN|BEYOND|passed|failed" $R/nhwc_net.log | cut -c1-330
left=$(( 470 - ($(date +%s)-t0) ))
[ $left -gt 50 ] && { timeout $left python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid_NHWC --nets resnet18 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines both --repeats 3 --no-pytorch --share-diffs --layout NHWC --cache third_party/grid_bench.sqlite > $R/grid_NHWC.log 2>&1; el "grid NHWC rc=$?"; grep -E "^resnet|rror" $R/grid_NHWC.log | cut -c1-160 | tail -2; }
rm -rf $R/grid_*/prototxt $R/grid_*/logs
left=$(( 475 - ($(date +%s)-t0) ))
[ $left -gt 40 ] && { timeout $left python3 scripts/time_pytorch.py --net resnet18 --mode channels_last --mode compile --processes 1 --json $R/pytorch.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"; tail -4 $R/pytorch.log | cut -c1-200; }
tar czf $OUT/t.tgz -C $OUT t && rm -rf $R; el done
