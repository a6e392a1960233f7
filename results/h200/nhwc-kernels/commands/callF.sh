#!/usr/bin/env bash
# PyTorch's ResNet-50 (batch 128) under torch.compile by kind of layer (torch.profiler's GPU
# kernel time), the table the README sets beside Caffe's; no Caffe on this node.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/f; mkdir -p $R
timeout ${BUDGET:-220} python3 scripts/time_pytorch.py --net resnet50 --mode compile --processes 1 --profile --json $R/pytorch_resnet50_profile.json > $R/pytorch_resnet50_profile.log 2>&1; el "pytorch rc=$?"
grep -vE "^\s*$" $R/pytorch_resnet50_profile.log | cut -c1-220 | tail -12
