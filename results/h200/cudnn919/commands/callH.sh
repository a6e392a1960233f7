#!/usr/bin/env bash
# Caffe built against the core's cuDNN 9.19 (CUDNN_ROOT), then the two Caffe GPU tests that
# failed there in call C, with parameter gradients compared within 1e-4.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/h; mkdir -p $R
export CUDNN_ROOT=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])")
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN" $R/setup.log | head -2 | cut -c1-200
left=$(( ${BUDGET:-560} - ($(date +%s)-t0) ))
timeout $left python3 -P -m pytest -m gpu --require-gpu -p no:cacheprovider -rfEs -v --tb=short "tests/gpu/test_caffe_gpu.py::test_layer_gtests" "tests/gpu/test_pycaffe_gpu.py::test_ucudnn_net_equals_stock_and_caffe_tool" > $R/gpu_tests.log 2>&1; el "tests rc=$?"
grep -E "FAILED|PASSED|passed|failed|Failure|Expected|Which is|worst" $R/gpu_tests.log | cut -c1-300 | head -40
tar czf $OUT/h.tgz -C $OUT h && rm -rf $R; el done
