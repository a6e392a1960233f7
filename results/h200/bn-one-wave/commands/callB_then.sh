#!/usr/bin/env bash
# The command of call B: callB.sh, then torch.compile of ResNet-50 at 128 on the same node
# (call A's Caffe point had no time left for it).
BUDGET=400 bash results/h200/bn-one-wave/commands/callB.sh; timeout 150 python3 scripts/time_pytorch.py --net resnet50 --mode compile --processes 1 --json $OUT/pytorch_resnet50.json > $OUT/pytorch_resnet50.log 2>&1; echo "pytorch resnet50 rc=$?"; grep -E "process" $OUT/pytorch_resnet50.log | cut -c1-200; xz -9 $OUT/pytorch_resnet50.log
