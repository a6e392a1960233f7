#!/usr/bin/env bash
# The engine study on the H200, with PyTorch's channels_last convolution time in the same run.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $OUT/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $OUT/setup.log 2>&1; el "core installed rc=$?"
timeout 90 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py tests/gpu/test_core_gpu.py > $OUT/gpu_engines.log 2>&1; el "engine+core tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_engines.log | cut -c1-300 | tail -8
timeout 150 python3 -P scripts/bench_engines.py --suites resnet18 --limits 8MiB 64MiB 512MiB --max-configs 16 --out $OUT/resnet18 > $OUT/resnet18.log 2> $OUT/resnet18.err; el "resnet18 study rc=$?"
grep -v incomplete $OUT/resnet18.log | grep -E "64MiB|67108864|unlimited" | head -20
timeout 100 python3 scripts/time_pytorch.py --net resnet18 --mode channels_last --processes 1 --profile --json $OUT/pytorch_resnet18.json > $OUT/pytorch.log 2>&1; el "pytorch rc=$?"
tail -3 $OUT/pytorch.log
left=$(( 440 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --deepbench-layers 8 --layouts NHWC --dtypes float16 bfloat16 --limits 128MiB --max-configs 16 --out $OUT/deepbench > $OUT/deepbench.log 2> $OUT/deepbench.err; el "deepbench rc=$?"
grep -c . $OUT/deepbench/points.csv
