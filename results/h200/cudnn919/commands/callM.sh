#!/usr/bin/env bash
# cuDNN 9.19 core with one open cache per net (Note [One open cache per net]): where the
# graph winners stand in the heuristics' order (graph_ranks.py), cold planning of ResNet-18
# (graph, pruned, 64 MiB) with 16 engine configs per size and with 8 (graph_configs_probe.py),
# three warm passes each, then ResNet-18 fp32 graph NHWC at 64 MiB with 16 and 8 configs
# beside PyTorch channels_last.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/m; mkdir -p $R
CR=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
CUDNN_ROOT=$CR python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
C="--net resnet18 --policy all --search pruned --limit 64MiB --engines graph --warm-passes 3 --csv $R/cold_planning.csv"
timeout 120 python3 -P scripts/cold_planning.py $C > $R/cold_planning.txt 2> $R/cold_planning.log; el "cold planning (16 configs) rc=$?"
UCUDNN_PROBE_GRAPH_CONFIGS=8 timeout 110 python3 -P results/h200/cudnn919/commands/graph_configs_probe.py $C >> $R/cold_planning.txt 2>> $R/cold_planning.log; el "cold planning (8 configs) rc=$?"
cat $R/cold_planning.txt; grep -v Warning $R/cold_planning.log | tail -3 | cut -c1-200
for k in 16 8; do
timeout 70 python3 -P scripts/bench_engines.py --suites resnet18 --families graph --layouts NHWC --dtypes float32 --limits 64MiB --max-configs $k --out $R/resnet18_k$k > $R/resnet18_k${k}_summary.txt 2> $R/resnet18_k${k}_benchmark.log; el "r18 fp32 graph NHWC $k configs rc=$?"
grep -E "64MiB|67108864" $R/resnet18_k${k}_summary.txt | grep -v unlimited
done
timeout 80 python3 scripts/time_pytorch.py --net resnet18 --mode channels_last --processes 1 --profile --json $R/pytorch_resnet18.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
grep -iE "conv|iteration|peak" $R/pytorch.log | head -8 | cut -c1-200
left=$(( ${BUDGET:-570} - ($(date +%s)-t0) ))
timeout $left python3 -P results/h200/cudnn919/commands/graph_ranks.py > $R/graph_ranks.jsonl 2> $R/graph_ranks.log; el "graph ranks rc=$?"
wc -l $R/graph_ranks.jsonl
tar czf $OUT/m.tgz -C $OUT m && rm -rf $R; el done
