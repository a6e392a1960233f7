#!/usr/bin/env bash
# caffe_patch/0015 (Note [BatchNorm + Eltwise fusion]) on a fresh node: Caffe built from the
# series; the fusion checks on the GPU (net_fusion_check: the new fusion alone, with the
# Split sum, share_diffs and use_global_stats, and with every fusion; NHWC against NCHW with
# every fusion on); then ResNet-50 v1 at batch 128 in the fastest setting (NHWC, shared arena
# 64 MiB, FUSED BatchNorm, both families, share_diffs) with every fusion, and with every
# fusion but batch_norm_eltwise (the same benchmark cache, so the same plans); each 3 `caffe
# time` processes; torch.compile at the same batch in the same call.
# (.wheels_gpu: .wheels without PuLP, whose 16 MB wheel would take the carried tree over
# 64 MiB; these calls run no ILP.)
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/a; mkdir -p $R
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
timeout 150 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py -k "batch_norm_eltwise or batch_norm_relu_fusion or nhwc_net" > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "layer\(s\)|IDENTICAL|DIFFERENT|WITHIN|BEYOND|passed|failed|Error" $R/gpu_tests.log | cut -c1-160 | sort | uniq -c | head -20
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/r50.sqlite"
N=(--nets resnet50 --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC)
timeout 100 $C --out $R/grid_resnet50 "${N[@]}" > $R/grid_resnet50.log 2>&1; el "grid resnet50 rc=$?"
grep -E "^resnet50|rror" $R/grid_resnet50.log | cut -c1-220 | tail -2
timeout 60 $C --out $R/grid_resnet50_no_bn_eltwise "${N[@]}" --fusions eltwise_relu,batch_norm_relu,split_sum > $R/grid_resnet50_no_bn_eltwise.log 2>&1; el "grid resnet50 batch_norm_eltwise off rc=$?"
grep -E "^resnet50|rror" $R/grid_resnet50_no_bn_eltwise.log | cut -c1-220 | tail -2
rm -rf $R/grid_*/prototxt
left=$(( ${BUDGET:-580} - ($(date +%s)-t0) ))
if [ $left -gt 90 ]; then
  timeout $left python3 scripts/time_pytorch.py --net resnet50 --mode compile --processes 1 --json $R/pytorch_resnet50.json > $R/pytorch_resnet50.log 2>&1; el "pytorch resnet50 rc=$?"
  grep -E "process" $R/pytorch_resnet50.log | cut -c1-200
else el "pytorch skipped: $left s left"; fi
xz -9 $R/setup.log
tar cJf $OUT/a.tar.xz -C $OUT a && rm -rf $R; el done
