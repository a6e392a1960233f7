#!/usr/bin/env bash
# On the warm node of call N: the strict comparison with stock Caffe and the core's GPU tests.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/o; mkdir -p $R
[ -x third_party/caffe/build/tools/caffe ] || { scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"; }
timeout 200 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs "tests/gpu/test_caffe_gpu.py::test_results_equal_stock_caffe" > $R/caffe_compare.log 2>&1; el "compare rc=$?"
grep -E "ucudnn_compare:|passed|failed" $R/caffe_compare.log | cut -c1-220 | tail -8
timeout 250 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_core_gpu.py > $R/core_gpu.log 2>&1; el "core gpu rc=$?"
tail -4 $R/core_gpu.log | cut -c1-250
tar czf $OUT/o.tgz -C $OUT o && rm -rf $R; el done
