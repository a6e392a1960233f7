#!/usr/bin/env bash
# Device call: set up, the whole GPU tier, the 64 MiB grid points of ResNet-18 (fused BN) as the
# committed run measured them, every net of Caffe's tarball through ucudnn plan --prototxt.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $OUT/setup.log 2>&1; el "setup rc=$?"
timeout 195 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider --durations=30 -rfEs tests > $OUT/gpu_tier.log 2>&1; el "gpu tier rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tier.log | tail -15
export UCUDNN_CACHE=/tmp/gridcache/bench.sqlite; mkdir -p /tmp/gridcache; cp .device/seed_after.sqlite $UCUDNN_CACHE
UCUDNN_CAFFE=$PWD/third_party/caffe/build/tools/caffe timeout 165 python3 -P -m ucudnn reproduce --out /tmp/grid --nets resnet18 --limits 64MiB --policies undivided,all --bn-engines fused --no-unlimited --no-stock --repeats 3 --iterations 10 --no-pytorch > $OUT/grid.log 2>&1; el "grid rc=$?"
tail -12 $OUT/grid.log; cp /tmp/grid/points.csv $OUT/ 2>/dev/null; xz -c /tmp/grid/reproduce.json > $OUT/reproduce.json.xz 2>/dev/null
timeout 55 python3 -P scripts/plan_caffe_nets.py third_party/caffe/pristine --csv $OUT/caffe_nets.csv > $OUT/caffe_nets.log 2>&1; el "caffe nets rc=$?"
tail -4 $OUT/caffe_nets.log
