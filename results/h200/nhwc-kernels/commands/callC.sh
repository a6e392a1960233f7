#!/usr/bin/env bash
# The final tree's GPU checks on a fresh node: the layout and pooling gtests (0011's NHWC
# max pooling and layout transposes), then the whole GPU tier (`pytest -m gpu --require-gpu`):
# among it the NHWC-against-NCHW net check (ResNet-18, with and without share_diffs) and the
# Eltwise + ReLU, Split-sum and BatchNorm + ReLU fusion checks with 0014 in. While Caffe builds,
# scripts/probe_conv_fusions.cu asks cuDNN which convolution + BatchNorm fusions it offers in
# float32 and float16 (its outputs go to ../../conv-fusions/).
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/c; mkdir -p $R
CR=$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])')
PATH=$PATH:/usr/local/cuda/bin nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/probe scripts/probe_conv_fusions.cu -I$CR/include -L$CR/lib \
  -l:libcudnn.so.9 -Xlinker -rpath=$CR/lib > $R/probe_build.log 2>&1; el "probe build rc=$?"
( timeout 150 /tmp/probe --seconds 120 > $R/probe_float.jsonl 2> $R/probe_float.txt
  timeout 50 /tmp/probe --dtype half --seconds 30 128,64,56,56,64,3,1 128,64,56,56,256,1,1 \
    > $R/probe_half.jsonl 2> $R/probe_half.txt ) &
probe=$!
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
wait $probe; el "probe done"; cat $R/probe_float.txt $R/probe_half.txt | cut -c1-240
timeout 90 third_party/caffe/build/test/test.testbin "--gtest_filter=Layout*:*PoolingLayerTest*" 0 > $R/gtests.log 2>&1; el "gtests rc=$?"
grep -E "FAILED|Failure|PASSED|tests ran" $R/gtests.log | cut -c1-200 | head -8
left=$(( ${BUDGET:-590} - ($(date +%s)-t0) ))
timeout $left python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs --durations=8 tests > $R/gpu_tier.log 2>&1; el "gpu tier rc=$?"
grep -E "passed|failed|FAILED|ERROR|SKIPPED|XFAIL" $R/gpu_tier.log | cut -c1-220 | tail -14
xz -9 $R/setup.log; el done
