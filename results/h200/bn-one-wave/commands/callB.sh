#!/usr/bin/env bash
# Right after callA.sh, on the same node (Caffe built): ResNet-18 at batch 256 in the same
# setting, 3 `caffe time` processes from an empty cache, its kernels through
# scripts/kernel_timeline.py, torch.compile in the same call; then the rest of the BatchNorm
# and Caffe GPU tests.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-580} - ($(date +%s)-t0) )); }
R=$OUT/b; mkdir -p $R
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $R/setup.log 2>&1; el "setup rc=$?"
export PYTHONPATH=$PWD/third_party/caffe/src/python
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/resnet18.sqlite"
N=(--nets resnet18 --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC)
timeout 100 $C --out $R/grid_resnet18 "${N[@]}" > $R/grid_resnet18.log 2>&1; el "grid resnet18 rc=$?"
grep -E "^resnet18|rror" $R/grid_resnet18.log | cut -c1-220 | tail -2
m=$(ls $R/grid_resnet18/prototxt/*.prototxt | head -1)
GLOG_minloglevel=2 timeout 60 python3 -P scripts/kernel_timeline.py caffe $m --out $R/caffe_resnet18.json > $R/caffe_resnet18.txt 2>$R/caffe_resnet18.err; el "caffe timeline resnet18 rc=$?"
head -3 $R/caffe_resnet18.txt
rm -rf $R/grid_resnet18/prototxt
timeout 120 python3 scripts/time_pytorch.py --net resnet18 --mode compile --processes 1 --json $R/pytorch_resnet18.json > $R/pytorch_resnet18.log 2>&1; el "pytorch resnet18 rc=$?"
grep -E "process" $R/pytorch_resnet18.log | cut -c1-200
unset PYTHONPATH
if [ $(left) -gt 60 ]; then
  timeout $(( $(left) - 15 )) python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_caffe_gpu.py tests/gpu/test_batchnorm_gpu.py -k "not batch_norm_eltwise and not batch_norm_relu_fusion and not nhwc_net and not gtests and not test_results_equal_stock_caffe" > $R/gpu_tier.log 2>&1; el "caffe gpu tests rc=$?"
  tail -4 $R/gpu_tier.log | cut -c1-200
fi
xz -9 $R/setup.log
tar cJf $OUT/b.tar.xz -C $OUT b && rm -rf $R; el done
