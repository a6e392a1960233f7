#!/usr/bin/env bash
# Call G1 (fresh node): the series with 0018 and the experiment patch (UCUDNN_BN_HOST_FACTOR);
# BatchNorm gtests; the core and engines GPU tests (the benchmark's workspace); AlexNet at 256
# (shared 512 MiB, both families) 3 Caffe processes from an empty cache; torch.compile 3 processes.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-575} - ($(date +%s)-t0) )); }
R=$OUT/g1; mkdir -p $R
cp results/h200/memory-and-training/commands/experiment-bn-host-factor.patch caffe_patch/0019-experiment-bn-host-factor.patch
timeout 300 scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
grep -E "cuDNN: .* from|error:|Error " $R/setup.log | head -4 | cut -c1-250
timeout 60 third_party/caffe/build/test/test.testbin --gtest_filter="CuDNNBatchNorm*" 0 > $R/bn_gtest.log 2>&1; el "bn gtests rc=$?"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/bn_gtest.log | head -8 | cut -c1-200
timeout 150 python3 -P -X faulthandler -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_core_gpu.py tests/gpu/test_engines_gpu.py > $R/core_tests.log 2>&1; el "core+engines tests rc=$?"
grep -E "passed|failed|FAILED|Error" $R/core_tests.log | tail -5 | cut -c1-200
export PYTHONPATH=$PWD/third_party/caffe/src/python
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock"
timeout 150 $C --cache third_party/alexnet.sqlite --out $R/grid_alexnet --nets alexnet --limits 512MiB --policies "" --engines both > $R/grid_alexnet.log 2>&1; el "grid alexnet rc=$?"
grep -E "^alexnet|rror" $R/grid_alexnet.log | cut -c1-220 | tail -2
python3 -c "
import json;d=json.load(open('$R/grid_alexnet/reproduce.json'))
for k,p in d['points'].items():
  print(k, p.get('median_ms'), [(r.get('peak_gpu_memory_bytes'), round(sum(r.get('iteration_ms',[0]))/max(1,len(r.get('iteration_ms',[1]))),2)) for r in p.get('repeats',[])])" 2>&1 | tail -2
unset PYTHONPATH
if [ $(left) -gt 90 ]; then
  timeout $(( $(left) - 10 )) python3 scripts/time_pytorch.py --net alexnet --mode compile --processes 3 --json $R/pytorch_alexnet.json > $R/pytorch_alexnet.log 2>&1; el "pytorch alexnet rc=$?"
  grep -E "process|fastest" $R/pytorch_alexnet.log | cut -c1-200
fi
rm -rf $R/*/prototxt; xz -9 $R/setup.log $R/bn_gtest.log
tar cJf $OUT/g1.tar.xz -C $OUT g1 && rm -rf $R; el done
