#!/usr/bin/env bash
# On a fresh node: while Caffe builds, scripts/probe_conv_fusions.cu again (every distinct
# engine config the heuristics propose for the fused graphs, up to 8 per graph; call C built
# one per engine); then the Caffe GPU checks call C had no time for (the NHWC-against-NCHW
# net check with and without share_diffs, the Eltwise + ReLU, Split-sum and BatchNorm + ReLU
# fusion checks); then ResNet-50 v1 at batch 256 in the fastest setting (NHWC, shared arena
# 64 MiB, FUSED BatchNorm, both families, share_diffs, the fusions; empty benchmark cache,
# 3 `caffe time` processes) and torch.compile at the same batch in the same call.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/d; mkdir -p $R
CR=$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])')
PATH=$PATH:/usr/local/cuda/bin nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/probe scripts/probe_conv_fusions.cu -I$CR/include -L$CR/lib \
  -l:libcudnn.so.9 -Xlinker -rpath=$CR/lib > $R/probe_build.log 2>&1; el "probe build rc=$?"
( timeout 200 /tmp/probe --builds 8 --seconds 170 > $R/probe_float.jsonl 2> $R/probe_float.txt
  timeout 60 /tmp/probe --dtype half --builds 8 --seconds 40 128,64,56,56,64,3,1 128,64,56,56,256,1,1 \
    > $R/probe_half.jsonl 2> $R/probe_half.txt ) &
probe=$!
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
wait $probe; el "probe done"; cat $R/probe_float.txt $R/probe_half.txt | cut -c1-240
timeout 140 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s --durations=8 tests/gpu/test_caffe_gpu.py -k "nhwc_net or eltwise_relu_fusion or batch_norm_relu_fusion or split_sum" > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "ReLU layer|Split layer|IDENTICAL|DIFFERENT|WITHIN|BEYOND|passed|failed|Error" $R/gpu_tests.log | cut -c1-200 | head -16
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/r50.sqlite"
timeout 110 $C --out $R/grid_resnet50_256 --nets resnet50@256 --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC > $R/grid_resnet50_256.log 2>&1; el "grid resnet50@256 rc=$?"
grep -E "^resnet50|rror" $R/grid_resnet50_256.log | cut -c1-220 | tail -2
rm -rf $R/grid_*/prototxt
left=$(( ${BUDGET:-585} - ($(date +%s)-t0) ))
timeout $left python3 scripts/time_pytorch.py --net resnet50 --batch 256 --mode compile --processes 1 --json $R/pytorch_resnet50_256.json > $R/pytorch_resnet50_256.log 2>&1; el "pytorch compile rc=$?"
grep -E "process" $R/pytorch_resnet50_256.log | cut -c1-200
xz -9 $R/setup.log; el done
