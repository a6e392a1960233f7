#!/usr/bin/env bash
# Call F1: caffe_patch/0017 (one-group ucudnn convolutions on the default stream, the planner
# giving each of their calls the whole arena) on a fresh node: ResNet-50 at 128 and ResNet-18
# at 256 in the fastest setting (NHWC, shared arena 64 MiB, FUSED BatchNorm, both families,
# share_diffs, every fusion), 3 `caffe time` processes each from an empty cache; then
# torch.compile, 3 processes per net, in the same call.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/f1; mkdir -p $R
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: .* from" $R/setup.log | head -1 | cut -c1-200
export PYTHONPATH=$PWD/third_party/caffe/src/python
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock"
for net in resnet50 resnet18; do
  timeout 150 $C --cache third_party/$net.sqlite --out $R/grid_$net --nets $net --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC > $R/grid_$net.log 2>&1; el "grid $net rc=$?"
  grep -E "^$net|rror" $R/grid_$net.log | cut -c1-220 | tail -2
done
unset PYTHONPATH
for net in resnet50 resnet18; do
  timeout 170 python3 scripts/time_pytorch.py --net $net --mode compile --processes 3 --json $R/pytorch_$net.json > $R/pytorch_$net.log 2>&1; el "pytorch $net rc=$?"
  grep -E "process|fastest" $R/pytorch_$net.log | cut -c1-200
done
xz -9 $R/setup.log
tar cJf $OUT/f1.tar.xz -C $OUT f1 && rm -rf $R; el done
