#!/usr/bin/env bash
# Issue 25: DeepBench in half precision at 128 MiB with the check of graph results, the float32
# reference and tensor-op math for the legacy family (bench_engines.py --math auto), first
# 15 distinct layers, cut by the call's time (points.csv keeps what was measured).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/m; mkdir -p $R
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
left=$(( 440 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --deepbench-layers 15 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
grep -c . $R/deepbench_half/points.csv; tail -2 $R/deepbench_half_benchmark.log | cut -c1-200
tar czf $OUT/m.tgz -C $OUT m && rm -rf $R; el done
