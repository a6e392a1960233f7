#!/usr/bin/env bash
# The newest cuDNN on the GPU host: the core built against the nvidia-cudnn-cu13 wheel that
# PyTorch 2.11 brings (9.19) instead of the system's 9.14. Legacy half-precision host cost
# (noise.py), the core's GPU tests, ResNet-18 fp32 at 64 MiB beside PyTorch channels_last.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/a; mkdir -p $R
CR=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
ls $CR $CR/include | head -30 > $R/wheel_layout.txt; grep -E "define CUDNN_(MAJOR|MINOR|PATCHLEVEL)" $CR/include/cudnn_version.h
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
CUDNN_ROOT=$CR UCUDNN_VERBOSE_BUILD=1 python3 -m pip install -v --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
grep "ucudnn build:" $R/setup.log | head -2
python3 -P -m ucudnn info 2>&1 | head -20
timeout 150 python3 -P results/h200/timing/commands/noise.py > $R/noise.json 2> $R/noise.log; el "noise rc=$?"
grep -v Warning $R/noise.log | cut -c1-600
timeout 110 python3 -P -X faulthandler -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_engines_gpu.py tests/gpu/test_core_gpu.py tests/cython/test_embed.py > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | cut -c1-300 | tail -8
timeout 100 python3 -P scripts/bench_engines.py --suites resnet18 --limits 64MiB --out $R/resnet18 > $R/resnet18_summary.txt 2> $R/resnet18_benchmark.log; el "r18 fp32 rc=$?"
grep -E "67108864|unlimited" $R/resnet18_summary.txt
left=$(( 580 - ($(date +%s)-t0) ))
timeout $left python3 scripts/time_pytorch.py --net resnet18 --mode channels_last --processes 1 --profile --json $R/pytorch_resnet18.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
tail -4 $R/pytorch.log | cut -c1-300
tar czf $OUT/a.tgz -C $OUT a && rm -rf $R; el done
