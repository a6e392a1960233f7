#!/usr/bin/env bash
# Issue 25: backward-filter timed with beta 1 in both families and in bench_engines, legacy
# algorithms re-timed with their own workspace, random half-precision data. probe.py (beta and
# workspace size on short kernels), the core's GPU tests, ResNet-50 half precision and
# ResNet-18 legacy half precision again, then DeepBench db1-db7 half at 128 MiB (cut by time).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/v; mkdir -p $R
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 90 python3 -P results/h200/timing/commands/probe.py > $R/probe.json 2> $R/probe.log; el "probe rc=$?"
grep -v Warning $R/probe.log | cut -c1-400
timeout 100 python3 -P -X faulthandler -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py tests/gpu/test_core_gpu.py tests/cython/test_embed.py > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | cut -c1-300 | tail -6
left=$(( 390 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet50 --dtypes float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/resnet50_half > $R/resnet50_half_summary.txt 2> $R/resnet50_half_benchmark.log; el "r50 half rc=$?"
grep -c . $R/resnet50_half/points.csv
left=$(( 500 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet18 --families legacy --dtypes float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/resnet18_half_legacy > $R/resnet18_half_legacy_summary.txt 2> $R/resnet18_half_legacy_benchmark.log; el "r18 half legacy rc=$?"
grep -c . $R/resnet18_half_legacy/points.csv
left=$(( 570 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --deepbench-layers 7 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
grep -c . $R/deepbench_half/points.csv
tar czf $OUT/v.tgz -C $OUT v && rm -rf $R; el done
