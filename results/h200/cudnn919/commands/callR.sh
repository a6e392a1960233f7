#!/usr/bin/env bash
# On call Q's machine (the core as gpu_node.sh installed it, GRAPH_CONFIGS_DEFAULT 8):
# DeepBench half at 128 MiB again for layers last measured before the DP's margin.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/r; mkdir -p $R
python3 -c "import ucudnn._core as c; print('GRAPH_CONFIGS_DEFAULT', c.GRAPH_CONFIGS_DEFAULT)"
timeout ${BUDGET:-370} python3 -P scripts/bench_engines.py --suites deepbench --kernels db8 db9 db10 db11 db13 db14 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
wc -l $R/deepbench_half/*.csv
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R; el done
