#!/usr/bin/env bash
# Issue 25: the refusal reaching back (Note [Refused engines]) and the check's float32 reference
# for half precision, on the GPU: the engine GPU tests, ResNet-18's half-precision study with the
# graph family (both layouts), cold planning with the graph family, then the legacy family in
# half precision with tensor-op math.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/h; mkdir -p $R
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 75 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py > $R/engine_tests.log 2>&1; el "engine tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/engine_tests.log | cut -c1-300 | tail -5
timeout 190 python3 -P scripts/bench_engines.py --suites resnet18 --families graph --dtypes float16 bfloat16 --limits 8MiB 64MiB 512MiB --out $R/resnet18_half_graph > $R/resnet18_half_graph_summary.txt 2> $R/resnet18_half_graph_benchmark.log; el "r18 half graph rc=$?"
grep -E "graph" $R/resnet18_half_graph_summary.txt | head -12; grep -c "no plan\|nothing fits" $R/resnet18_half_graph_benchmark.log
timeout 100 python3 -P scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB --engines graph --csv $R/cold_planning.csv > $R/cold_planning.log 2>&1; el "cold planning rc=$?"
tail -3 $R/cold_planning.log | cut -c1-300
left=$(( 570 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet18 --families legacy --dtypes float16 bfloat16 --math tensor_op --limits 8MiB 64MiB 512MiB --out $R/resnet18_half_legacy_tensor_op > $R/resnet18_half_legacy_tensor_op_summary.txt 2> $R/resnet18_half_legacy_tensor_op_benchmark.log; el "r18 half legacy tensor_op rc=$?"
grep -E "legacy" $R/resnet18_half_legacy_tensor_op_summary.txt | head -12
tar czf $OUT/h.tgz -C $OUT h && rm -rf $R; el done
