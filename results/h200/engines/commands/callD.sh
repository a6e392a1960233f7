#!/usr/bin/env bash
# Issue 25: AlexNet conv2's backward-filter with graph engines against float64 (Caffe's strided
# group views, beta 1, groups at once or one after the other), the GPU tests after the review's
# refactors, cold/warm planning with the graph family, the AlexNet study in three dtypes.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/d; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
for v in "--beta 1 --concurrent" "--beta 1" "--beta 0" "--beta 1 --groups 1"; do
  f=$R/acc_$(echo $v | tr -d ' -').log
  timeout 60 python3 -P scripts/graph_accuracy.py --max-configs 16 $v > $f 2>&1; el "accuracy $v rc=$?"
  grep -E "OFF|failed|off by|Error" $f | head -12
done
timeout 120 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py tests/gpu/test_core_gpu.py tests/cython/test_embed.py > $R/gpu_tests.log 2>&1; el "engine+core+embed tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | cut -c1-300 | tail -8
timeout 110 python3 -P scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB --engines graph --csv $R/cold_planning.csv > $R/cold_planning.log 2>&1; el "cold graph all rc=$?"
tail -2 $R/cold_planning.log
left=$(( 560 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites alexnet --dtypes float32 float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/alexnet > $R/alexnet_summary.txt 2> $R/alexnet_benchmark.log; el "alexnet study rc=$?"
grep -c . $R/alexnet/points.csv
tar czf $OUT/d.tgz -C $OUT d && rm -rf $R; el done
