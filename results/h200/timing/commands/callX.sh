#!/usr/bin/env bash
# Issue 25: how stable short legacy half-precision kernels time (noise.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/x; mkdir -p $R
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 150 python3 -P results/h200/timing/commands/noise.py > $R/noise.json 2> $R/noise.log; el "noise rc=$?"
grep -v Warning $R/noise.log | cut -c1-600
tar czf $OUT/x.tgz -C $OUT x && rm -rf $R; el done
