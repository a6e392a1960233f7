#!/usr/bin/env bash
# AlexNet (256, NCHW: its LRN layers) on a fresh machine: Caffe with caffe_patch/0012, the
# undivided plan and the shared arena at 512 MiB, legacy algorithms alone and both families,
# 3 processes each; then torch.compile (PyTorch's fastest mode for AlexNet in call P), 3
# processes, in the same call.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/q; mkdir -p $R
[ -x third_party/caffe/build/tools/caffe ] || { timeout 380 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"; }
timeout 170 python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid --nets alexnet --limits 512MiB --policies undivided --no-ilp --no-unlimited --no-stock --engines legacy,both --layouts NCHW --repeats 3 --no-pytorch --share-diffs --cache third_party/grid_bench.sqlite > $R/grid.log 2>&1; el "grid rc=$?"
grep -E "^alexnet|rror" $R/grid.log | cut -c1-160 | tail -6
rm -rf $R/grid/prototxt
left=$(( ${BUDGET:-580} - ($(date +%s)-t0) ))
timeout $left python3 scripts/time_pytorch.py --net alexnet --mode compile --processes 3 --json $R/pytorch.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
grep -E "median" $R/pytorch.log | cut -c1-200
tar czf $OUT/q.tgz -C $OUT q && rm -rf $R; el done
