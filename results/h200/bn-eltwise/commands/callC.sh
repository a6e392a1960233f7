#!/usr/bin/env bash
# On a fresh node: ResNet-50 v1 at batch 256 in the fastest setting (NHWC, shared arena 64 MiB,
# FUSED BatchNorm, both families, share_diffs, every fusion: caffe_patch/0015's among them),
# 3 `caffe time` processes from an empty benchmark cache; torch.compile at the same batch in
# the same call while the time left allows.
# (.wheels_gpu: .wheels without PuLP, whose 16 MB wheel would take the carried tree over
# 64 MiB; this call runs no ILP.)
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/c; mkdir -p $R
finish() { xz -9 $R/setup.log 2>/dev/null; tar cJf $OUT/c.tar.xz -C $OUT c && rm -rf $R; el done; }
trap finish EXIT
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/r50.sqlite"
timeout 110 $C --out $R/grid_resnet50_256 --nets resnet50@256 --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC > $R/grid_resnet50_256.log 2>&1; el "grid resnet50@256 rc=$?"
grep -E "^resnet50|rror" $R/grid_resnet50_256.log | cut -c1-220 | tail -2
rm -rf $R/grid_*/prototxt
(cd $R/grid_resnet50_256 && tar cJf logs.tar.xz logs && rm -rf logs)
left=$(( ${BUDGET:-440} - ($(date +%s)-t0) ))
if [ $left -gt 100 ]; then
  timeout $left python3 scripts/time_pytorch.py --net resnet50 --batch 256 --mode compile --processes 1 --json $R/pytorch_resnet50_256.json > $R/pytorch_resnet50_256.log 2>&1; el "pytorch resnet50@256 rc=$?"
  grep -E "process" $R/pytorch_resnet50_256.log | cut -c1-200
else el "pytorch skipped: $left s left"; fi
