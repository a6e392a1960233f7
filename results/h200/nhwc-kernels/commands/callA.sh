#!/usr/bin/env bash
# Caffe built on a fresh node with caffe_patch/0011's vectorised NHWC max pooling and narrow
# layout transposes: the layout gtests, then ResNet-18 (256) and ResNet-50 (128) in their
# fastest setting (NHWC, shared arena 64 MiB, FUSED BatchNorm, both families, share_diffs,
# fusions), AlexNet (256) undivided and shared at 512 MiB (legacy), 3 processes each, all
# with the planning's smaller workspace offer; torch.compile for each net in the same call.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/a; mkdir -p $R
timeout 380 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
timeout 120 third_party/caffe/build/test/test.testbin "--gtest_filter=Layout*:*PoolingLayerTest*" 0 > $R/gtests.log 2>&1; el "gtests rc=$?"
grep -E "FAILED|Failure|PASSED|tests ran" $R/gtests.log | cut -c1-200 | head -8
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/grid_bench.sqlite"
for net in resnet18 resnet50; do
  timeout 120 $C --out $R/grid_$net --nets $net --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC > $R/grid_$net.log 2>&1; el "grid $net rc=$?"
  grep -E "^$net|rror" $R/grid_$net.log | cut -c1-200 | tail -2
done
timeout 120 $C --out $R/grid_alexnet --nets alexnet --limits 512MiB --policies undivided --engines legacy --layouts NCHW > $R/grid_alexnet.log 2>&1; el "grid alexnet rc=$?"
grep -E "^alexnet|rror" $R/grid_alexnet.log | cut -c1-200 | tail -3
rm -rf $R/grid_*/prototxt
cp third_party/grid_bench.sqlite $R/ 2>/dev/null
for net in resnet18 resnet50 alexnet; do
  left=$(( 575 - ($(date +%s)-t0) ))
  [ $left -gt 50 ] || break
  timeout $left python3 scripts/time_pytorch.py --net $net --mode compile --processes 1 --json $R/pytorch_$net.json > $R/pytorch_$net.log 2>&1; el "pytorch $net rc=$?"
  grep -E "process" $R/pytorch_$net.log | cut -c1-200
done
tar czf $OUT/a.tgz -C $OUT a && rm -rf $R; el done
