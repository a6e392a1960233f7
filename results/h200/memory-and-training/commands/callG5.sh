#!/usr/bin/env bash
# Call G5 (fresh node, the session's last device seconds): the series with 0018;
# tests/gpu/test_batchnorm_gpu.py (the BatchNorm gtests, caffe time with every engine,
# ResNet-18 trained the same with every engine).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-330} - ($(date +%s)-t0) )); }
R=$OUT/g5; mkdir -p $R
timeout 260 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
timeout $(( $(left) - 5 )) python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs --durations=5 tests/gpu/test_batchnorm_gpu.py > $R/gpu_tests.log 2>&1; el "bn gpu tests rc=$?"
grep -E "passed|failed|FAILED|ERROR|^[0-9.]+s call" $R/gpu_tests.log | tail -8 | cut -c1-200
xz -9 $R/gpu_tests.log $R/setup.log; tar cJf $OUT/g5.tar.xz -C $OUT g5 && rm -rf $R; el done
