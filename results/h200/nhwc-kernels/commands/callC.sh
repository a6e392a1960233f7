#!/usr/bin/env bash
# The final tree's Caffe GPU checks that calls A and B left out, in the device time left: the
# NHWC-against-NCHW net check (ResNet-18, with and without share_diffs) with 0011's new pooling
# and conversion kernels, and the Eltwise + ReLU and BatchNorm + ReLU fusion checks with 0014
# in (every fusion on against off).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/c; mkdir -p $R
timeout 250 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
left=$(( ${BUDGET:-320} - ($(date +%s)-t0) ))
timeout $left python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py -k "nhwc_net or eltwise_relu_fusion or batch_norm_relu_fusion" > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "ReLU layer|IDENTICAL|DIFFERENT|WITHIN|BEYOND|passed|failed|Error" $R/gpu_tests.log | cut -c1-220 | head -14
xz -9 $R/setup.log; el done
