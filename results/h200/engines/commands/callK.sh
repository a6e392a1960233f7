#!/usr/bin/env bash
# Issue 26: share_diffs on the GPU through pycaffe (results equal without it); issue 25: the
# ResNet-50 study in half precision (tensor-op math for the legacy family), with the time left.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/k; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
timeout 150 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s "tests/gpu/test_pycaffe_gpu.py::test_import_caffe_on_gpu" "tests/gpu/test_pycaffe_gpu.py::test_shared_activation_gradients_give_the_same_results_on_the_gpu" > $R/pycaffe_share.log 2>&1; el "pycaffe share_diffs rc=$?"
grep -E "share_diffs true vs false|^(FAILED|ERROR)|passed|failed" $R/pycaffe_share.log | cut -c1-300 | tail -5
left=$(( 560 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet50 --dtypes float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/resnet50_half > $R/resnet50_half_summary.txt 2> $R/resnet50_half_benchmark.log; el "r50 half rc=$?"
grep -c . $R/resnet50_half/points.csv
tar czf $OUT/k.tgz -C $OUT k && rm -rf $R; el done
