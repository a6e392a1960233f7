#!/usr/bin/env bash
# Ran on the reverted experiment (commands/batched_heater_experiment.diff applied to the core, and a
# bench_engines --heat-bytes option since removed); kept as run. See ../README.md, section 1.
# Issue 25: Note [Timing at full clocks] on the H200. The clock probe (ramp.py), the core's
# GPU tests, the worst short kernels of ResNet-50 graph fp16 with and without the heater, then
# ResNet-50 half precision (both families) and ResNet-18 legacy half precision again.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/u; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv > $R/gpu.txt 2>&1
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 60 python3 -P results/h200/timing/commands/ramp.py > $R/ramp.json 2> $R/ramp.log; el "ramp rc=$?"
cut -c1-330 $R/ramp.log | grep -v Warning
timeout 110 python3 -P -X faulthandler -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py tests/gpu/test_core_gpu.py tests/cython/test_embed.py > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | cut -c1-300 | tail -6
K="res5a_branch2c/bwd_filter res5b_branch2a/bwd_filter res5a_branch1/bwd_filter res2a_branch2b/bwd_filter res3a_branch2b/bwd_filter"
for heat in 0 2GiB; do
  timeout 60 python3 -P scripts/bench_engines.py --suites resnet50 --families graph --layouts NCHW --dtypes float16 --limits 64MiB --kernels $K --heat-bytes $heat --out $R/r50_fp16_graph_heat$heat > $R/heat${heat}_summary.txt 2> $R/heat${heat}.log; el "heat $heat rc=$?"
  cut -d, -f2,3,7-12 $R/r50_fp16_graph_heat$heat/points.csv | grep -v unlimited
done
left=$(( 445 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet50 --dtypes float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/resnet50_half > $R/resnet50_half_summary.txt 2> $R/resnet50_half_benchmark.log; el "r50 half rc=$?"
grep -c . $R/resnet50_half/points.csv
left=$(( 565 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet18 --families legacy --dtypes float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/resnet18_half_legacy > $R/resnet18_half_legacy_summary.txt 2> $R/resnet18_half_legacy_benchmark.log; el "r18 half legacy rc=$?"
grep -c . $R/resnet18_half_legacy/points.csv
tar czf $OUT/u.tgz -C $OUT u && rm -rf $R; el done
