#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $OUT/setup.log 2>&1; el "setup rc=$?"
timeout 220 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider --durations=40 -rfEs tests > $OUT/gpu_tier.log 2>&1; el "gpu tier rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tier.log | tail -15
