#!/usr/bin/env bash
# Issue 25 on the H200: the GPU tests of both families (and the C API's graph kernel), the
# ResNet-18 study with PyTorch channels_last in the same run, cold/warm planning with the
# graph family, DeepBench fp16/bf16, then ResNet-50 with the time left.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/a; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 150 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py tests/gpu/test_core_gpu.py tests/cython/test_embed.py > $R/gpu_tests.log 2>&1; el "engine+core+embed tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | cut -c1-300 | tail -8
timeout 160 python3 -P scripts/bench_engines.py --suites resnet18 --limits 8MiB 64MiB 512MiB --out $R/resnet18 > $R/resnet18_summary.txt 2> $R/resnet18_benchmark.log; el "resnet18 study rc=$?"
grep -v incomplete $R/resnet18_summary.txt | grep -E "67108864|unlimited" | head -12
timeout 90 python3 scripts/time_pytorch.py --net resnet18 --mode channels_last --processes 1 --profile --json $R/pytorch_resnet18.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
tail -2 $R/pytorch.log
timeout 110 python3 -P scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB --engines graph --csv $R/cold_planning.csv > $R/cold_planning.log 2>&1; el "cold graph rc=$?"
tail -2 $R/cold_planning.log
timeout 100 python3 -P scripts/bench_engines.py --suites deepbench --deepbench-layers 8 --dtypes float16 bfloat16 --limits 8MiB 64MiB 128MiB 512MiB --out $R/deepbench > $R/deepbench_summary.txt 2> $R/deepbench_benchmark.log; el "deepbench rc=$?"
grep -c . $R/deepbench/points.csv
left=$(( 555 - ($(date +%s)-t0) ))
[ $left -gt 20 ] && timeout $left python3 -P scripts/bench_engines.py --suites resnet50 --limits 8MiB 64MiB 512MiB --out $R/resnet50 > $R/resnet50_summary.txt 2> $R/resnet50_benchmark.log; el "resnet50 rc=$?"
grep -c . $R/resnet50/points.csv
tar czf $OUT/a.tgz -C $OUT a && rm -rf $R; el "done"
