#!/usr/bin/env bash
# Issue 26: share_diffs on the GPU through pycaffe (results equal without it).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/l; mkdir -p $R
if [ -x third_party/caffe/build/tools/caffe ] && python3 -c "import ucudnn._core" 2>/dev/null; then el "warm: Caffe and the core already built"; else
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"; fi
timeout 150 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s "tests/gpu/test_pycaffe_gpu.py::test_import_caffe_on_gpu" "tests/gpu/test_pycaffe_gpu.py::test_shared_activation_gradients_give_the_same_results_on_the_gpu" > $R/pycaffe_share.log 2>&1; el "pycaffe share_diffs rc=$?"
grep -E "share_diffs true vs false|^(FAILED|ERROR)|passed|failed|Check failed|F1201" $R/pycaffe_share.log | cut -c1-300 | tail -6
tar czf $OUT/l.tgz -C $OUT l && rm -rf $R; el done
