#!/usr/bin/env bash
# Device call: set up the redesigned tree, the plan records against the before-run's, the GPU tier.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export UCUDNN_CACHE=/tmp/cache/bench.sqlite; mkdir -p /tmp/cache; cp .device/seed_after.sqlite $UCUDNN_CACHE
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $OUT/setup.log 2>&1; el "setup rc=$?"
grep -E "error|Error" $OUT/setup.log | head -5; tail -3 $OUT/setup.log
NETS_DIR=prototxt .device/records.sh /tmp/rec > $OUT/records.txt 2>&1; el "records"; cat $OUT/records.txt
for f in /tmp/rec/*.jsonl; do python3 scripts/compare_plan_records.py .device/before/rec/$(basename $f) $f | tail -1; done | tee $OUT/compare.txt
tar -C /tmp -cJf $OUT/records_after.tar.xz rec
unset UCUDNN_CACHE
timeout 340 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider --durations=30 -rfEs tests > $OUT/gpu_tier.log 2>&1; el "gpu tier rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tier.log | tail -25
