#!/usr/bin/env bash
# Issue 25: ResNet-18 fp32 at 64 MiB on this tree (backward-filter measured with beta 1),
# PyTorch channels_last's convolutions in the same call, then the graph family with every
# engine config the heuristics propose (--max-configs 0) against the default 16: its cost.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/w; mkdir -p $R
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
timeout 100 python3 -P scripts/bench_engines.py --suites resnet18 --limits 64MiB --out $R/resnet18 > $R/resnet18_summary.txt 2> $R/resnet18_benchmark.log; el "r18 fp32 rc=$?"
grep -E "64MiB|67108864" $R/resnet18_summary.txt
timeout 100 python3 scripts/time_pytorch.py --net resnet18 --mode channels_last --processes 1 --profile --json $R/pytorch_resnet18.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
tail -4 $R/pytorch.log | cut -c1-300
left=$(( 330 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites resnet18 --families graph --layouts NHWC --limits 64MiB --max-configs 0 --out $R/resnet18_all_configs > $R/resnet18_all_configs_summary.txt 2> $R/resnet18_all_configs_benchmark.log; el "r18 all configs rc=$?"
grep -c . $R/resnet18_all_configs/points.csv; cat $R/resnet18_all_configs_summary.txt
tar czf $OUT/w.tgz -C $OUT w && rm -rf $R; el done
