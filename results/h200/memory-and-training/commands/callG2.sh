#!/usr/bin/env bash
# Call G2 (G1's node): caffe train, ResNet-50 at 128 (NHWC, shared 64 MiB, FUSED, both, share_diffs),
# the factor on the host (UCUDNN_BN_HOST_FACTOR=1, experiment patch) or on the GPU (0018), 3
# processes each interleaved; caffe time on the same prototxt; then GPU tests as time allows.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-575} - ($(date +%s)-t0) )); }
R=$OUT/g2; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > /dev/null 2>&1; el "setup rc=$?"
export PYTHONPATH=$PWD/third_party/caffe/src/python
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock"
for net in resnet50 resnet18; do
  timeout 150 $C --repeats 1 --cache third_party/$net.sqlite --out $R/grid_$net --nets $net --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC > $R/grid_$net.log 2>&1; el "grid $net rc=$?"
  grep -E "^$net|rror" $R/grid_$net.log | cut -c1-200 | tail -1
  m=$(ls $PWD/$R/grid_$net/prototxt/*.prototxt 2>/dev/null | head -1); [ -n "$m" ] || m=$(ls $R/grid_$net/prototxt/*.prototxt | head -1)
  cp $m $R/$net.prototxt
  printf 'net: "%s"\nbase_lr: 0.01\nmomentum: 0.9\nweight_decay: 0.0001\nlr_policy: "fixed"\nmax_iter: 80\ndisplay: 10\nsnapshot_after_train: false\nsolver_mode: GPU\nrandom_seed: 1\n' "$(readlink -f $m)" > $R/${net}_solver.prototxt
  for rep in 1 2 3; do for h in 1 0; do
    UCUDNN_BN_HOST_FACTOR=$h GLOG_logtostderr=1 timeout 90 third_party/caffe/build/tools/caffe train -solver $R/${net}_solver.prototxt -gpu 0 > $R/train_${net}_h${h}_$rep.log 2>&1; el "train $net host=$h rep $rep rc=$?"
    grep -oE "Iteration [0-9]+ \([0-9.]+ iter/s" $R/train_${net}_h${h}_$rep.log | tail -6 | awk '{gsub(/\(/,"",$3); printf "%.2f ", 1000/$3} END {print "ms/iter"}'
  done; done
done
unset PYTHONPATH
if [ $(left) -gt 60 ]; then
  timeout $(( $(left) - 10 )) python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs --durations=10 tests/gpu/test_caffe_gpu.py -k "results_equal_stock or train_and_test or caffe_time_with_and_without or bad_ucudnn_param or shared_arena_budget" tests/gpu/test_batchnorm_gpu.py > $R/gpu_tests.log 2>&1; el "gpu tests rc=$?"
  grep -E "passed|failed|FAILED|ERROR" $R/gpu_tests.log | tail -6 | cut -c1-200
fi
for f in $R/train_*.log; do grep -E "Iteration|rror|Check failed" $f > $f.lines; rm $f; done
rm -rf $R/*/prototxt; xz -9 $R/gpu_tests.log 2>/dev/null
tar cJf $OUT/g2.tar.xz -C $OUT g2 && rm -rf $R; el done
