#!/usr/bin/env bash
# cuDNN 9.19 core with Note [Re-timing after the Finds] and Note [Dividing must beat the
# noise]: the re-timing variants, ResNet-18 fp32 at 64 MiB (every family and layout) beside
# PyTorch channels_last, ResNet-18 legacy half at 64 MiB, then DeepBench half at 128 MiB.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/g; mkdir -p $R
CR=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
CUDNN_ROOT=$CR python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 90 python3 -P results/h200/cudnn919/commands/retime_variants.py > $R/retime_variants.json 2> $R/retime_variants.log; el "retime variants rc=$?"
grep -v Warning $R/retime_variants.log | python3 -c "
import sys, json, statistics as s
for l in sys.stdin:
    r = json.loads(l); print(r['kernel'], r['dtype'])
    for e in r['benchmarks']: print('   ', e)
    for b, p in r['plans'].items(): print('  ', b, 'plan-like', s.median(p['like_plans']), p['like_plans'])"
timeout 110 python3 -P scripts/bench_engines.py --suites resnet18 --dtypes float32 --limits 64MiB --out $R/resnet18 > $R/resnet18_summary.txt 2> $R/resnet18_benchmark.log; el "r18 fp32 rc=$?"
grep -E "64MiB|67108864" $R/resnet18_summary.txt | grep -v unlimited
timeout 90 python3 scripts/time_pytorch.py --net resnet18 --mode channels_last --processes 1 --profile --json $R/pytorch_resnet18.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
grep -iE "conv|iteration|peak" $R/pytorch.log | head -8 | cut -c1-200
timeout 100 python3 -P scripts/bench_engines.py --suites resnet18 --families legacy --dtypes float16 bfloat16 --limits 64MiB --out $R/resnet18_half_legacy > $R/resnet18_half_legacy_summary.txt 2> $R/resnet18_half_legacy_benchmark.log; el "r18 half legacy rc=$?"
left=$(( ${BUDGET:-560} - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --kernels db30 db19 db12 db17 db35 db22 db41 db38 db36 db32 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
wc -l $R/deepbench_half/*.csv
tar czf $OUT/g.tgz -C $OUT g && rm -rf $R; el done
