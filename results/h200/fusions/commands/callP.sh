#!/usr/bin/env bash
# Issue 26: caffe_patch/0009 (FUSED BatchNorm + Scale + ReLU) and 0008 on the GPU: Caffe built
# on the node, net_fusion_check --gpu through the pytests (both fusions, and BatchNorm with
# use_global_stats), then each fusion measured alone in the fastest Caffe setting (shared
# arena 64 MiB, FUSED BatchNorm, both families, share_diffs): none, eltwise_relu,
# batch_norm_relu; ResNet-18 (256) and ResNet-50 (128), 3 processes per point, one cache.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/p; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
tail -1 $R/setup.log | cut -c1-200
timeout 150 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs -s tests/gpu/test_caffe_gpu.py -k fusion > $R/fusion_tests.log 2>&1; el "fusion tests rc=$?"
grep -E "fused into|IDENTICAL|DIFFERENT|passed|failed|Check failed" $R/fusion_tests.log | cut -c1-200 | tail -8
for f in none eltwise_relu batch_norm_relu; do
  left=$(( 590 - ($(date +%s)-t0) ))
  timeout $left python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid_$f --nets resnet18,resnet50 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines both --repeats 3 --no-pytorch --share-diffs --fusions $f --cache third_party/grid_bench.sqlite > $R/grid_$f.log 2>&1; el "grid fusions=$f rc=$?"
  grep -E "^resnet" $R/grid_$f.log | cut -c1-150 | tail -2
done
rm -rf $R/grid_*/prototxt
tar czf $OUT/p.tgz -C $OUT p && rm -rf $R; el done
