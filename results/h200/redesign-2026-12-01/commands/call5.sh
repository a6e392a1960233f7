#!/usr/bin/env bash
# GPU verification of the planner redesign: set up, the tests that never ran on the fixed tree
# first, then the rest of the GPU tier.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $OUT/setup.log 2>&1; el "setup rc=$?"
tail -3 $OUT/setup.log
FIRST="tests/gpu/test_pycaffe_gpu.py::test_ucudnn_net_equals_stock_and_caffe_tool tests/gpu/test_pycaffe_gpu.py::test_python_layer_between_ucudnn_layers tests/gpu/test_pycaffe_gpu.py::test_pycaffes_own_suite_passes tests/gpu/test_training_gpu.py"
timeout 200 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider --durations=20 -rfEs $FIRST > $OUT/gpu_first.log 2>&1; el "first part rc=$?"
tail -25 $OUT/gpu_first.log
DESEL=""; for t in $FIRST; do DESEL="$DESEL --deselect $t"; done
left=$(( 590 - ($(date +%s)-t0) ))
timeout $left python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider --durations=15 -rfEs $DESEL tests > $OUT/gpu_rest.log 2>&1; el "rest rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed|skipped" $OUT/gpu_rest.log | tail -12
