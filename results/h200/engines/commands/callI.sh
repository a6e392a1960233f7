#!/usr/bin/env bash
# Issue 25, with the float32 copies' pointer arithmetic fixed: the engine GPU tests, ResNet-18's
# half-precision study with the graph family (both layouts), and cold planning again.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/i; mkdir -p $R
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 80 python3 -P -X faulthandler -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py > $R/engine_tests.log 2>&1; el "engine tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed|Fatal" $R/engine_tests.log | cut -c1-300 | tail -6
timeout 200 python3 -P -X faulthandler scripts/bench_engines.py --suites resnet18 --families graph --dtypes float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/resnet18_half_graph > $R/resnet18_half_graph_summary.txt 2> $R/resnet18_half_graph_benchmark.log; el "r18 half graph rc=$?"
cat $R/resnet18_half_graph_summary.txt | cut -c1-110; grep -c "inaccurate': [1-9]" $R/resnet18_half_graph_benchmark.log; grep -E "Fatal|Error" $R/resnet18_half_graph_benchmark.log | head -3
left=$(( 420 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB --engines graph --csv $R/cold_planning.csv > $R/cold_planning.log 2>&1; el "cold planning rc=$?"
tail -2 $R/cold_planning.log | cut -c1-300
tar czf $OUT/i.tgz -C $OUT i && rm -rf $R; el done
