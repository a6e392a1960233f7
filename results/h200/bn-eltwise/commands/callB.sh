#!/usr/bin/env bash
# Right after call A, with caffe_patch/0015's kernel launches through one dispatch and
# Net::Init's BatchNorm folds in one loop (the same kernels): the fusion checks again; then
# ResNet-18 at batch 256 in the fastest setting with every fusion, and with every fusion but
# batch_norm_eltwise (the same benchmark cache); each 3 `caffe time` processes; torch.compile
# at the same batch; then the Caffe GPU tests with the time left.
# (.wheels_gpu: .wheels without PuLP, whose 16 MB wheel would take the carried tree over
# 64 MiB; these calls run no ILP.)
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/b; mkdir -p $R
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
timeout 120 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py -k "batch_norm_eltwise or batch_norm_relu_fusion" > $R/gpu_tests.log 2>&1; el "fusion tests rc=$?"
grep -E "layer\(s\)|IDENTICAL|DIFFERENT|passed|failed|Error" $R/gpu_tests.log | cut -c1-160 | sort | uniq -c | head -12
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/r18.sqlite"
N=(--nets resnet18 --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC)
timeout 90 $C --out $R/grid_resnet18 "${N[@]}" > $R/grid_resnet18.log 2>&1; el "grid resnet18 rc=$?"
grep -E "^resnet18|rror" $R/grid_resnet18.log | cut -c1-220 | tail -2
timeout 50 $C --out $R/grid_resnet18_no_bn_eltwise "${N[@]}" --fusions eltwise_relu,batch_norm_relu,split_sum > $R/grid_resnet18_no_bn_eltwise.log 2>&1; el "grid resnet18 batch_norm_eltwise off rc=$?"
grep -E "^resnet18|rror" $R/grid_resnet18_no_bn_eltwise.log | cut -c1-220 | tail -2
rm -rf $R/grid_*/prototxt
timeout 120 python3 scripts/time_pytorch.py --net resnet18 --mode compile --processes 1 --json $R/pytorch_resnet18.json > $R/pytorch_resnet18.log 2>&1; el "pytorch resnet18 rc=$?"
grep -E "process" $R/pytorch_resnet18.log | cut -c1-200
left=$(( ${BUDGET:-580} - ($(date +%s)-t0) ))
if [ $left -gt 30 ]; then
  timeout $left python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_caffe_gpu.py tests/gpu/test_batchnorm_gpu.py -k "not batch_norm_eltwise and not batch_norm_relu_fusion and not nhwc_net" > $R/gpu_tier.log 2>&1; el "caffe gpu tests rc=$?"
  tail -4 $R/gpu_tier.log | cut -c1-200
fi
xz -9 $R/setup.log
tar cJf $OUT/b.tar.xz -C $OUT b && rm -rf $R; el done
