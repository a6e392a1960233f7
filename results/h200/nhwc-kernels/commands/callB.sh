#!/usr/bin/env bash
# The final tree on a fresh node: caffe_patch/0014 (Split's backward sum in the Eltwise + ReLU)
# checked on the GPU (net_fusion_check, with and without share_diffs) with the core's sized
# benchmark workspace (Note [Benchmark workspace]), ResNet-18 (256) in the
# fastest setting with every fusion and with split_sum off, ResNet-50 (128) with every fusion,
# AlexNet (256) undivided and shared at 512 MiB with the core's benchmark workspace sized to
# the algorithms' needs (Note [Benchmark workspace]); each from an empty benchmark cache, 3
# processes per point; torch.compile in the same call while time is left.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/b; mkdir -p $R
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
timeout 100 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py tests/gpu/test_core_gpu.py -k "split_sum or benchmark_workspace or held_benchmark" > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "ReLU layer|IDENTICAL|DIFFERENT|passed|failed|skipped|Error" $R/gpu_tests.log | cut -c1-200 | head -8
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock"
N=(--limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC)
timeout 90 $C --out $R/grid_resnet18 --nets resnet18 "${N[@]}" --cache third_party/r18.sqlite > $R/grid_resnet18.log 2>&1; el "grid resnet18 rc=$?"
grep -E "^resnet18|rror" $R/grid_resnet18.log | cut -c1-200 | tail -2
timeout 60 $C --out $R/grid_resnet18_no_split_sum --nets resnet18 "${N[@]}" --fusions eltwise_relu,batch_norm_relu --cache third_party/r18.sqlite > $R/grid_resnet18_no_split_sum.log 2>&1; el "grid resnet18 split_sum off rc=$?"
grep -E "^resnet18|rror" $R/grid_resnet18_no_split_sum.log | cut -c1-200 | tail -2
timeout 90 $C --out $R/grid_resnet50 --nets resnet50 "${N[@]}" --cache third_party/r50.sqlite > $R/grid_resnet50.log 2>&1; el "grid resnet50 rc=$?"
grep -E "^resnet50|rror" $R/grid_resnet50.log | cut -c1-200 | tail -2
timeout 70 $C --out $R/grid_alexnet --nets alexnet --limits 512MiB --policies undivided --engines legacy --layouts NCHW --cache third_party/alexnet.sqlite > $R/grid_alexnet.log 2>&1; el "grid alexnet rc=$?"
grep -E "^alexnet|rror" $R/grid_alexnet.log | cut -c1-200 | tail -3
rm -rf $R/grid_*/prototxt
for net in resnet18 resnet50; do
  left=$(( 545 - ($(date +%s)-t0) ))
  [ $left -gt 95 ] || { el "pytorch $net skipped: ${left} s left"; continue; }
  timeout $left python3 scripts/time_pytorch.py --net $net --mode compile --processes 1 --json $R/pytorch_$net.json > $R/pytorch_$net.log 2>&1; el "pytorch $net rc=$?"
  grep -E "process" $R/pytorch_$net.log | cut -c1-200
done
xz -9 $R/setup.log
tar czf $OUT/b.tgz -C $OUT b && rm -rf $R; el done
