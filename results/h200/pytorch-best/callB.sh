#!/usr/bin/env bash
# Caffe with the graph family on the H200: results equal to stock Caffe (ucudnn_compare, both
# families), then the shared arena at 64 MiB with FUSED BatchNorm, legacy against both, 3
# processes per point, ResNet-18 (256) and ResNet-50 (128); PyTorch's three modes after.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
R=$OUT/b; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $R/setup.log 2>&1; el "setup rc=$?"
tail -2 $R/setup.log
timeout 170 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs "tests/gpu/test_caffe_gpu.py::test_results_equal_stock_caffe" > $R/caffe_compare.log 2>&1; el "compare rc=$?"
grep -E "ucudnn_compare:|passed|failed" $R/caffe_compare.log | cut -c1-220 | tail -22
left=$(( 500 - ($(date +%s)-t0) ))
timeout $left python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --out $R/grid --nets resnet18,resnet50 --limits 64MiB --policies "" --no-ilp --no-unlimited --no-stock --bn-engines fused --engines legacy,both --repeats 3 --no-pytorch --cache $R/bench.sqlite > $R/grid.log 2>&1; el "grid rc=$?"
grep -E "^\[|^resnet" $R/grid.log | cut -c1-200 | tail -20
rm -f $R/bench.sqlite*
left=$(( 575 - ($(date +%s)-t0) ))
[ $left -gt 30 ] && timeout $left python3 scripts/time_pytorch.py --net resnet18 --net resnet50 --processes 1 --profile --json $R/pytorch.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
tail -3 $R/pytorch.log
tar czf $OUT/b.tgz -C $OUT b --exclude='*.sqlite*' && rm -rf $R; el done
