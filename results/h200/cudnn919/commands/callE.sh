#!/usr/bin/env bash
# cuDNN 9.19 core with time_run back to back (Note [Plans timed back to back]): the host
# probe again, the core's GPU tests, ResNet-18 legacy half precision at 64 MiB (the
# predictions of host-bound kernels), then DeepBench half from db20 on (after call D).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/e; mkdir -p $R
CR=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
CUDNN_ROOT=$CR python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 60 python3 -P results/h200/cudnn919/commands/host_probe.py > $R/host_probe.json 2> $R/host_probe.log; el "host probe rc=$?"
grep -v Warning $R/host_probe.log | python3 -c "
import sys, json, statistics as s
for l in sys.stdin:
    r = json.loads(l); print(r['kernel'], r['dtype'], r['predicted_ms'], *(s.median(r[m]['medians_ms']) for m in ('one_workspace', 'fresh_workspace')))"
timeout 70 python3 -P -X faulthandler -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_core_gpu.py > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | cut -c1-300 | tail -5
timeout 90 python3 -P scripts/bench_engines.py --suites resnet18 --families legacy --dtypes float16 bfloat16 --limits 64MiB --out $R/resnet18_half_legacy > $R/resnet18_half_legacy_summary.txt 2> $R/resnet18_half_legacy_benchmark.log; el "r18 half legacy rc=$?"
grep -v "side by side" $R/resnet18_half_legacy_summary.txt
left=$(( ${BUDGET:-578} - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --kernels db55 db56 db57 db58 db59 db60 db61 db20 db21 db22 db30 db32 db35 db36 db38 db41 db54 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
tail -2 $R/deepbench_half_benchmark.log | cut -c1-80; wc -l $R/deepbench_half/*.csv
tar czf $OUT/e.tgz -C $OUT e && rm -rf $R; el done
