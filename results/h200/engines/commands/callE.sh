#!/usr/bin/env bash
# Issue 25 with the benchmark's check of graph results and BOTH as the default: the engine GPU
# tests, AlexNet conv2's backward-filter against float64, Caffe's strict comparison with stock,
# cold/warm planning with the graph family (front-config focus).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/e; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
tail -3 $R/setup.log
timeout 25 python3 -P scripts/graph_accuracy.py --max-configs 16 --beta 1 --concurrent > $R/accuracy.log 2>&1; el "accuracy rc=$?"
grep -E "OFF|refused|off by" $R/accuracy.log | head -12
timeout 60 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py > $R/engine_tests.log 2>&1; el "engine tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/engine_tests.log | cut -c1-400 | tail -6
timeout 260 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs "tests/gpu/test_caffe_gpu.py::test_results_equal_stock_caffe" > $R/caffe_compare.log 2>&1; el "compare rc=$?"
grep -E "ucudnn_compare: variant|passed|failed" $R/caffe_compare.log | grep -oE "variant [0-9]+ \{policy: [A-Z_]+( optimizer: [A-Z]+)?( engines: [A-Z]+)?|param diff [0-9.e-]+ \(conv[^)]*\)|: (OK|FAILED)$|[0-9]+ (passed|failed).*" | paste -sd' ' | fold -w 300
left=$(( 545 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB --engines graph --csv $R/cold_planning.csv > $R/cold_planning.log 2>&1; el "cold graph all rc=$?"
tail -1 $R/cold_planning.log
tar czf $OUT/e.tgz -C $OUT e && rm -rf $R; el done
