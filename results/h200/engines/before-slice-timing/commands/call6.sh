#!/usr/bin/env bash
# Graph-API family, NHWC and half precision on the H200: the core only (no Caffe build), its
# GPU tests, then the ResNet-18 study and PyTorch's channels_last convolution time.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $OUT/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $OUT/setup.log 2>&1; el "core installed rc=$?"
python3 -P -m ucudnn info 2>&1 | head -12
timeout 240 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs --durations=10 tests/gpu/test_engines_gpu.py tests/gpu/test_core_gpu.py > $OUT/gpu_engines.log 2>&1; el "engine+core tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_engines.log | cut -c1-400 | tail -30
left=$(( 560 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet18 --limits 64MiB --max-configs 8 --out $OUT/engines > $OUT/engines.log 2> $OUT/engines.err; el "study rc=$?"
tail -20 $OUT/engines.log; tail -5 $OUT/engines.err
