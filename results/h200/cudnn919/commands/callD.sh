#!/usr/bin/env bash
# The core on cuDNN 9.19 (the nvidia-cudnn-cu13 wheel of PyTorch 2.11): cold planning of
# ResNet-18 with the graph family, the legacy half-precision host cost against the
# workspace's address, DeepBench db8-db22 in half precision at 128 MiB with every divided
# plan timed beside its undivided plan (versus_undivided.csv).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/d; mkdir -p $R
CR=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
python3 -m pip install -q --no-index --no-deps .wheels/*.whl > $R/setup.log 2>&1
CUDNN_ROOT=$CR python3 -m pip install -q --no-index --no-deps --no-build-isolation . >> $R/setup.log 2>&1; el "core installed rc=$?"
python3 -P -m ucudnn info 2>&1 | grep -i -E "cudnn|gpu|driver" | head -6
timeout 120 python3 -P scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB --engines graph --csv $R/cold_planning.csv > $R/cold_planning.log 2>&1; el "cold planning rc=$?"
cut -d, -f1-10 $R/cold_planning.csv
timeout 60 python3 -P results/h200/cudnn919/commands/host_probe.py > $R/host_probe.json 2> $R/host_probe.log; el "host probe rc=$?"
grep -v Warning $R/host_probe.log | cut -c1-700
left=$(( 575 - ($(date +%s)-t0) ))
timeout $left python3 -P scripts/bench_engines.py --suites deepbench --kernels db8 db9 db10 db11 db12 db13 db14 db15 db16 db17 db18 db19 db20 db21 db22 --dtypes float16 bfloat16 --limits 128MiB --out $R/deepbench_half > $R/deepbench_half_summary.txt 2> $R/deepbench_half_benchmark.log; el "deepbench half rc=$?"
grep "side by side" $R/deepbench_half_summary.txt; wc -l $R/deepbench_half/*.csv
tar czf $OUT/d.tgz -C $OUT d && rm -rf $R; el done
