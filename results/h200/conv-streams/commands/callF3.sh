#!/usr/bin/env bash
# Call F3 (the session's last device seconds): 0017 with the bias gradient through cuBLAS;
# the new gtest and the grouped one, then AlexNet at 256 (shared 512 MiB), one process.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/f3; mkdir -p $R
timeout 260 scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu --no-pycaffe setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "error:|Error " $R/setup.log | head -5 | cut -c1-300
timeout 30 third_party/caffe/build/test/test.testbin --gtest_filter="UcudnnConvolutionLayerTest.TestOneGroup*:UcudnnConvolutionLayerTest.TestMicroBatched*" 0 > $R/gtest.log 2>&1; el "gtest rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure|Expected|actual" $R/gtest.log | head -12 | cut -c1-200
timeout 60 python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 1 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock --cache third_party/alexnet.sqlite --out $R/grid_alexnet --nets alexnet --limits 512MiB --policies "" --engines both > $R/grid_alexnet.log 2>&1; el "grid alexnet rc=$?"
grep -E "^alexnet|rror" $R/grid_alexnet.log | cut -c1-220 | tail -2
python3 -c "
import csv
for r in csv.DictReader(open('$R/grid_alexnet/layers.csv')):
    if r['layer'] in ('conv1','conv3'): print(r['layer'], r['forward_ms'], r['backward_ms'])" 2>&1 | tail -3
rm -rf $R/grid_alexnet/prototxt; xz -9 $R/setup.log; el done
