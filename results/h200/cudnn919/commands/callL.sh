#!/usr/bin/env bash
# Right after call K on the same machine (the core it installed kept): DeepBench half at
# 128 MiB, db56 and db57 again (cut in K; measured before the DP's margin in call F).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/l; mkdir -p $R
if ! python3 -c "import ucudnn._core" 2> /dev/null; then
  CR=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
  python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
  CUDNN_ROOT=$CR python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1
fi; el "core ready rc=$?"
left=$(( ${BUDGET:-510} - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --kernels db56 db57 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
cat $R/deepbench_half_summary.txt | grep "side by side"; wc -l $R/deepbench_half/*.csv
tar czf $OUT/l.tgz -C $OUT l && rm -rf $R; el done
