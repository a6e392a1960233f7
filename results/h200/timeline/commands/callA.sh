#!/usr/bin/env bash
# Where a whole iteration's GPU time goes, Caffe against torch.compile (scripts/kernel_timeline.py):
# ResNet-50 v1 at batch 128 in Caffe's fastest setting (NHWC, shared arena 64 MiB, FUSED
# BatchNorm, both families, share_diffs, every fusion), planned by `ucudnn reproduce` (one
# `caffe time` process), then the same prototxt through pycaffe under the profiler; PyTorch's
# torch.compile at the same batch, in the same call. Then ResNet-18 at 256 likewise.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/a; mkdir -p $R
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
export PYTHONPATH=$PWD/third_party/caffe/src/python
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 1 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock"
N=(--limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC)
left() { echo $(( ${BUDGET:-580} - ($(date +%s)-t0) )); }
for net in resnet50 resnet18; do
  [ $(left) -gt 150 ] || { el "$net skipped: $(left) s left"; break; }
  timeout 120 $C --cache third_party/$net.sqlite --out $R/grid_$net --nets $net "${N[@]}" > $R/grid_$net.log 2>&1; el "grid $net rc=$?"
  grep -E "^$net|rror" $R/grid_$net.log | cut -c1-220 | tail -2
  m=$(ls $R/grid_$net/prototxt/*.prototxt | head -1)
  GLOG_minloglevel=2 timeout 90 python3 -P scripts/kernel_timeline.py caffe $m --out $R/caffe_$net.json > $R/caffe_$net.txt 2>$R/caffe_$net.err; el "caffe timeline $net rc=$?"
  head -40 $R/caffe_$net.txt; tail -3 $R/caffe_$net.err | cut -c1-300
  [ $(left) -gt 100 ] || { el "pytorch $net skipped: $(left) s left"; continue; }
  timeout $(( $(left) - 20 )) python3 -P scripts/kernel_timeline.py pytorch $net --mode compile --out $R/pytorch_$net.json > $R/pytorch_$net.txt 2>$R/pytorch_$net.err; el "pytorch timeline $net rc=$?"
  head -40 $R/pytorch_$net.txt; tail -3 $R/pytorch_$net.err | cut -c1-300
  rm -rf $R/grid_$net/prototxt/*.caffemodel
done
xz -9 $R/setup.log
tar cJf $OUT/a.tar.xz -C $OUT a && rm -rf $R; el done
