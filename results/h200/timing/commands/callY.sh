#!/usr/bin/env bash
# Issue 25: DeepBench layers after db20 in half precision at 128 MiB (cut by the call's time).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/y; mkdir -p $R
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
left=$(( 270 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --kernels db21 db22 db30 db32 db35 db36 db38 db41 db54 db55 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
grep -c . $R/deepbench_half/points.csv
tar czf $OUT/y.tgz -C $OUT y && rm -rf $R; el done
