#!/usr/bin/env bash
# Caffe with both families as the default (strict comparison with stock, transform engines
# excluded), cold/warm planning with the graph family, DeepBench fp16/bf16 at 128 MiB.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/c; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
timeout 200 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs "tests/gpu/test_caffe_gpu.py::test_results_equal_stock_caffe" > $R/caffe_compare.log 2>&1; el "compare rc=$?"
grep -E "ucudnn_compare: variant|passed|failed" $R/caffe_compare.log | grep -oE "variant [0-9]+ \{policy: [A-Z_]+( optimizer: [A-Z]+)?( engines: [A-Z]+)?|: (OK|FAILED)$|[0-9]+ (passed|failed).*" | paste -sd' ' | fold -w 300
timeout 45 python3 -P scripts/cold_planning.py --net resnet18 --policy powerOfTwo --limit 64MiB --engines graph --csv $R/cold_planning.csv > $R/cold_planning_pow2.log 2>&1; el "cold graph pow2 rc=$?"
tail -1 $R/cold_planning_pow2.log
left=$(( 520 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB --engines graph --csv $R/cold_planning.csv > $R/cold_planning.log 2>&1; el "cold graph all rc=$?"
tail -1 $R/cold_planning.log
tar czf $OUT/c.tgz -C $OUT c && rm -rf $R; el done
