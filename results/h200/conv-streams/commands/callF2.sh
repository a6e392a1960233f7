#!/usr/bin/env bash
# Call F2, right after F1 on the same node (Caffe built, F1's benchmark caches there): the
# ucudnn, layout and convolution gtests, the fusion and NHWC checks; ResNet-50's kernels
# through scripts/kernel_timeline.py; AlexNet at 256 (shared arena 512 MiB, NCHW: its grouped
# convolutions) against torch.compile, 3 processes each.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-580} - ($(date +%s)-t0) )); }
R=$OUT/f2; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > /dev/null 2>&1; el "setup rc=$?"
timeout 200 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_caffe_gpu.py -k "layer_gtests or layout_gtests or shared_arena_in_caffe_time or nhwc_net or batch_norm_eltwise or split_sum" > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "IDENTICAL|DIFFERENT|WITHIN|BEYOND|PASSED|FAILED" $R/gpu_tests.log | cut -c1-120 | sort | uniq -c | head -12; tail -2 $R/gpu_tests.log | cut -c1-200
export PYTHONPATH=$PWD/third_party/caffe/src/python
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock"
timeout 60 $C --cache third_party/resnet50.sqlite --out $R/grid_resnet50 --nets resnet50 --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC --repeats 1 > /dev/null 2>&1
m=$(ls $R/grid_resnet50/prototxt/*.prototxt | head -1)
GLOG_minloglevel=2 timeout 60 python3 -P scripts/kernel_timeline.py caffe $m --out $R/caffe_resnet50.json > $R/caffe_resnet50.txt 2>$R/caffe_resnet50.err; el "caffe timeline resnet50 rc=$?"
head -2 $R/caffe_resnet50.txt | cut -c1-200; rm -rf $R/grid_resnet50
timeout 150 $C --cache third_party/alexnet.sqlite --out $R/grid_alexnet --nets alexnet --limits 512MiB --policies "" --engines both > $R/grid_alexnet.log 2>&1; el "grid alexnet rc=$?"
grep -E "^alexnet|rror" $R/grid_alexnet.log | cut -c1-220 | tail -2
unset PYTHONPATH
if [ $(left) -gt 60 ]; then
  timeout $(( $(left) - 10 )) python3 scripts/time_pytorch.py --net alexnet --mode compile --processes 3 --json $R/pytorch_alexnet.json > $R/pytorch_alexnet.log 2>&1; el "pytorch alexnet rc=$?"
  grep -E "process|fastest" $R/pytorch_alexnet.log | cut -c1-200
fi
rm -rf $R/*/prototxt; xz -9 $R/gpu_tests.log
tar cJf $OUT/f2.tar.xz -C $OUT f2 && rm -rf $R; el done
