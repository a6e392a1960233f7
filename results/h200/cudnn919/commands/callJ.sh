#!/usr/bin/env bash
# cuDNN 9.19 core with the margin in the pruned search (Note [Pruned search]): cold planning
# of ResNet-18 (graph, pruned, 64 MiB) with it and without it (search_margin_probe.py), three
# warm passes each, then DeepBench half at 128 MiB: the layers never measured (db58-db61),
# then db55-db57 again (measured before the DP's margin).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/j; mkdir -p $R
CR=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
CUDNN_ROOT=$CR python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
C="--net resnet18 --policy all --search pruned --limit 64MiB --engines graph --warm-passes 3 --csv $R/cold_planning.csv"
timeout 130 python3 -P scripts/cold_planning.py $C > $R/cold_planning.txt 2> $R/cold_planning.log; el "cold planning (margin in the search) rc=$?"
timeout 130 python3 -P results/h200/cudnn919/commands/search_margin_probe.py $C >> $R/cold_planning.txt 2>> $R/cold_planning.log; el "cold planning (search margin 1) rc=$?"
cat $R/cold_planning.txt; grep -v Warning $R/cold_planning.log | tail -3 | cut -c1-200
left=$(( ${BUDGET:-560} - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --kernels db58 db59 db60 db61 db55 db56 db57 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
cat $R/deepbench_half_summary.txt | grep "side by side"; wc -l $R/deepbench_half/*.csv
tar czf $OUT/j.tgz -C $OUT j && rm -rf $R; el done
