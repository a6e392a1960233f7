#!/usr/bin/env bash
# ResNet-50 v1 (128) NHWC as call N ran ResNet-18, on the same machine (Caffe kept), and
# PyTorch's two faster modes for ResNet-50 in the same call.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/o; mkdir -p $R
[ -x third_party/caffe/build/tools/caffe ] || timeout 380 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: " $R/setup.log | head -1 | cut -c1-200
timeout 300 python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid --nets resnet50 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines both --repeats 3 --no-pytorch --share-diffs --layouts NHWC --cache third_party/grid_bench.sqlite > $R/grid.log 2>&1; el "grid rc=$?"
grep -E "^resnet|rror" $R/grid.log | cut -c1-160 | tail -3
python3 -c "
import json; d=json.load(open('$R/grid/reproduce.json'))
for k, p in d['points'].items():
    print(k, p.get('status'), p.get('timing'), 'whole', p.get('median_ms'), 'per-layer', p.get('per_layer_median_ms'), 'conv', p.get('conv_ms'), 'peak', p.get('peak_gpu_memory_bytes'))
    for r in p.get('repeats', []): print('   ', r.get('median_ms'), r.get('per_layer_median_ms'), r.get('whole_iteration_ms'))"
rm -rf $R/grid/prototxt
timeout 150 python3 scripts/time_pytorch.py --net resnet50 --mode channels_last --mode compile --processes 1 --json $R/pytorch.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
grep -E "median" $R/pytorch.log | cut -c1-200
left=$(( ${BUDGET:-565} - ($(date +%s)-t0) ))
tar czf $OUT/o.tgz -C $OUT o && rm -rf $R; el done
