#!/usr/bin/env bash
# Issue 25, BOTH as the default with the benchmark's check (engine-level refusal): the core's
# GPU tests, Caffe's strict comparison with stock, AlexNet conv2 against float64, then the
# ResNet-18 study in float16 and bfloat16 with the time left.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/f; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
timeout 25 python3 -P scripts/graph_accuracy.py --max-configs 16 --beta 1 --concurrent > $R/accuracy.log 2>&1; el "accuracy rc=$?"
grep -E "OFF|off by" $R/accuracy.log | head -6
timeout 90 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py tests/gpu/test_core_gpu.py tests/cython/test_embed.py > $R/gpu_tests.log 2>&1; el "engine+core+embed tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | cut -c1-400 | tail -6
timeout 200 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs "tests/gpu/test_caffe_gpu.py::test_results_equal_stock_caffe" > $R/caffe_compare.log 2>&1; el "compare rc=$?"
grep -E "^E  .*(Error|assert)|[0-9]+ (passed|failed)" $R/caffe_compare.log | cut -c1-300 | head -8
left=$(( 585 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet18 --dtypes float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/resnet18_half > $R/resnet18_half_summary.txt 2> $R/resnet18_half_benchmark.log; el "resnet18 half study rc=$?"
grep -c . $R/resnet18_half/points.csv
tar czf $OUT/f.tgz -C $OUT f && rm -rf $R; el done
