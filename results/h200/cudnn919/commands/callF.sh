#!/usr/bin/env bash
# cuDNN 9.19 core: the legacy half re-timing probe, cold planning of ResNet-18 (graph,
# pruned, 64 MiB) with three warm passes and their split, then DeepBench half at 128 MiB
# from db55 on (the layers no earlier call reached).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/f; mkdir -p $R
CR=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
CUDNN_ROOT=$CR python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 120 python3 -P results/h200/cudnn919/commands/retime_probe.py > $R/retime_probe.json 2> $R/retime_probe.log; el "retime probe rc=$?"
grep -v Warning $R/retime_probe.log | python3 -c "
import sys, json, statistics as s
for l in sys.stdin:
    r = json.loads(l); print(r['kernel'], r['dtype'], [ {k: v for k, v in e.items()} for e in r['benchmarks']])
    for b, p in r['plans'].items(): print('  ', b, 'bench-like', s.median(p['like_benchmark']), 'plan-like', s.median(p['like_plans']), 'host', s.median(p['host_ms_per_chunk']), 'threads', p['threads'])"
timeout 170 python3 -P scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB --engines graph --warm-passes 3 --csv $R/cold_planning.csv > $R/cold_planning.txt 2> $R/cold_planning.log; el "cold planning rc=$?"
cat $R/cold_planning.txt; tail -3 $R/cold_planning.log | cut -c1-200
left=$(( ${BUDGET:-560} - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --kernels db55 db56 db57 db58 db59 db60 db61 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
tail -2 $R/deepbench_half_benchmark.log | cut -c1-100; wc -l $R/deepbench_half/*.csv
tar czf $OUT/f.tgz -C $OUT f && rm -rf $R; el done
