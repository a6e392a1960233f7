#!/usr/bin/env bash
# caffe_patch/0016 (the FUSED BatchNorm's NHWC statistics in one wave, 3 launches a pass) on a
# fresh node: Caffe built from the series; the BatchNorm gtests (FUSED and CUDNN against
# CAFFE, NHWC among them) and the fusion checks on the GPU; then ResNet-50 v1 at batch 128 in
# the fastest setting (NHWC, shared arena 64 MiB, FUSED BatchNorm, both families,
# share_diffs, every fusion), 3 `caffe time` processes, planned from an empty cache; its
# kernels through scripts/kernel_timeline.py; torch.compile at the same batch in the same call.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-580} - ($(date +%s)-t0) )); }
R=$OUT/a; mkdir -p $R
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
timeout 150 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py tests/gpu/test_batchnorm_gpu.py -k "batch_norm_eltwise or batch_norm_relu_fusion or nhwc_net or gtests" > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "layer\(s\)|IDENTICAL|DIFFERENT|WITHIN|BEYOND|passed|failed|Error" $R/gpu_tests.log | cut -c1-160 | sort | uniq -c | head -20
export PYTHONPATH=$PWD/third_party/caffe/src/python
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/resnet50.sqlite"
N=(--nets resnet50 --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC)
timeout 120 $C --out $R/grid_resnet50 "${N[@]}" > $R/grid_resnet50.log 2>&1; el "grid resnet50 rc=$?"
grep -E "^resnet50|rror" $R/grid_resnet50.log | cut -c1-220 | tail -2
m=$(ls $R/grid_resnet50/prototxt/*.prototxt | head -1)
GLOG_minloglevel=2 timeout 60 python3 -P scripts/kernel_timeline.py caffe $m --out $R/caffe_resnet50.json > $R/caffe_resnet50.txt 2>$R/caffe_resnet50.err; el "caffe timeline resnet50 rc=$?"
head -3 $R/caffe_resnet50.txt; grep -E "BatchNorm|scal|axpy" $R/caffe_resnet50.txt | cut -c1-110
rm -rf $R/grid_resnet50/prototxt
if [ $(left) -gt 90 ]; then
  timeout $(( $(left) - 10 )) python3 scripts/time_pytorch.py --net resnet50 --mode compile --processes 1 --json $R/pytorch_resnet50.json > $R/pytorch_resnet50.log 2>&1; el "pytorch resnet50 rc=$?"
  grep -E "process" $R/pytorch_resnet50.log | cut -c1-200
else el "pytorch skipped: $(left) s left"; fi
xz -9 $R/setup.log
tar cJf $OUT/a.tar.xz -C $OUT a && rm -rf $R; el done
