#!/usr/bin/env bash
# Caffe and the core on the newest cuDNN of the node (setup.py takes the newest it finds: the
# nvidia-cudnn-cu13 wheel's 9.19 over the system's 9.14; build_caffe.sh builds Caffe against
# the same), then the Caffe GPU tests.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/b; mkdir -p $R
UCUDNN_VERBOSE_BUILD=1 timeout 380 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "ucudnn build|cuDNN: |cudnn_version|\] done" $R/setup.log | cut -c1-250
python3 -c "import json,ucudnn.config as c; b=c.build_config(); print(b['cudnn_version'], b['cudnn_library'])"
ldd third_party/caffe/build/tools/caffe | grep -E "cudnn|ucudnn" | cut -c1-200
left=$(( 585 - ($(date +%s)-t0) ))
timeout $left python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs --durations=8 tests/gpu/test_caffe_gpu.py tests/gpu/test_pycaffe_gpu.py tests/gpu/test_batchnorm_gpu.py > $R/gpu_tests.log 2>&1; el "caffe gpu tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed|^[0-9.]+s " $R/gpu_tests.log | cut -c1-250 | tail -16
tar czf $OUT/b.tgz -C $OUT b && rm -rf $R; el done
