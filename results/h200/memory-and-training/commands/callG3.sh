#!/usr/bin/env bash
# Call G3 (G1's node): the rest of the GPU tier as time allows: pycaffe, training, the rest of test_caffe_gpu.py.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-560} - ($(date +%s)-t0) )); }
R=$OUT/g3; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > /dev/null 2>&1; el "setup rc=$?"
timeout $(( $(left) - 10 )) python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs --durations=12 tests/gpu/test_pycaffe_gpu.py tests/gpu/test_training_gpu.py tests/gpu/test_caffe_gpu.py -k "not results_equal_stock and not train_and_test and not caffe_time_with_and_without and not bad_ucudnn_param and not shared_arena_budget" > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "passed|failed|FAILED|ERROR" $R/gpu_tests.log | tail -8 | cut -c1-200
xz -9 $R/gpu_tests.log; tar cJf $OUT/g3.tar.xz -C $OUT g3 && rm -rf $R; el done
