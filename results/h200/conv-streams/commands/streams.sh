#!/usr/bin/env bash
# Experiment: UCUDNN_CONV_STREAMS bvlc | fork | serial, ResNet-50 at 128, NHWC shared 64 MiB,
# FUSED BN, both families, share_diffs, every fusion; processes interleaved by mode.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/e1; mkdir -p $R
timeout 330 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: |error|Error" $R/setup.log | head -5 | cut -c1-300
export PYTHONPATH=$PWD/third_party/caffe/src/python
net=${NET:-resnet50}
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/$net.sqlite"
N=(--nets $net --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC)
for rep in 1 2 3; do
  for mode in bvlc fork serial; do
    UCUDNN_CONV_STREAMS=$mode timeout 200 $C --repeats $rep --out $R/${net}_$mode "${N[@]}" > $R/${net}_${mode}_$rep.log 2>&1; el "$mode rep $rep rc=$?"
  done
done
for mode in bvlc fork serial; do echo "== $mode"; grep -E "^$net" $R/${net}_${mode}_3.log | cut -c1-250 | tail -1; python3 -c "
import csv,sys
for r in csv.DictReader(open('$R/${net}_$mode/points.csv')): print(r['setting'], r['median_ms'], r['min_ms'], r['max_ms'], r['processes'], r.get('peak_gpu_memory_bytes'))"; done
rm -rf $R/*/prototxt; xz -9 $R/setup.log
tar cJf $OUT/e1.tar.xz -C $OUT e1 && rm -rf $R; el done
