#!/usr/bin/env bash
# The core's part of the GPU tier on the final tree, in the device time left (no Caffe build):
# install the wheels and ucudnn (compiles the core), then tests/gpu/test_core_gpu.py and
# tests/gpu/test_engines_gpu.py.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/e; mkdir -p $R
{ python3 -m pip install -q --no-index --no-deps .wheels/*.whl
  python3 -m pip install -q --no-index --no-deps --no-build-isolation .
  python3 -P -m ucudnn info; } > $R/install.log 2>&1; el "install rc=$?"
grep -iE "cudnn|gpu" $R/install.log | head -3 | cut -c1-200
left=$(( ${BUDGET:-380} - ($(date +%s)-t0) ))
timeout $left python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs --durations=5 tests/gpu/test_core_gpu.py tests/gpu/test_engines_gpu.py > $R/gpu_core_tests.log 2>&1; el "gpu core tests rc=$?"
grep -E "passed|failed|FAILED|ERROR" $R/gpu_core_tests.log | cut -c1-220 | tail -8
tar cJf $OUT/e.tar.xz -C $OUT e && rm -rf $R; el done
