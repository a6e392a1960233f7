#!/usr/bin/env bash
# The two Caffe GPU tests that failed in call B (cuDNN 9.19), again with their messages.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/c; mkdir -p $R
timeout 380 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
left=$(( 560 - ($(date +%s)-t0) ))
timeout $left python3 -P -m pytest -m gpu --require-gpu -p no:cacheprovider -rfEs -v --tb=short "tests/gpu/test_caffe_gpu.py::test_layer_gtests" "tests/gpu/test_pycaffe_gpu.py::test_ucudnn_net_equals_stock_and_caffe_tool" > $R/gpu_tests.log 2>&1; el "tests rc=$?"
grep -E "FAILED|PASSED|passed|failed|Error|error|assert|Failure|Expected|Which is|actual" $R/gpu_tests.log | cut -c1-300 | head -60
tar czf $OUT/c.tgz -C $OUT c && rm -rf $R; el done
