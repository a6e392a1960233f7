#!/usr/bin/env bash
# Call G4 (G1's node): ResNet-50 at 256 in the fastest setting (NHWC, shared 64 MiB, FUSED,
# both families, share_diffs), 3 caffe time processes from an empty cache; PyTorch
# torch.compile and channels_last, 3 processes each, same call.
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s)-t0 )) s] $*"; }
left() { echo $(( ${BUDGET:-570} - ($(date +%s)-t0) )); }
R=$OUT/g4; mkdir -p $R
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > /dev/null 2>&1; el "setup rc=$?"
export PYTHONPATH=$PWD/third_party/caffe/src/python
C="python3 -P -m ucudnn reproduce --caffe third_party/caffe/build/tools/caffe --repeats 3 --no-pytorch --share-diffs --no-ilp --no-unlimited --no-stock"
timeout 200 $C --cache third_party/resnet50_256.sqlite --out $R/grid_resnet50_256 --nets resnet50@256 --limits 64MiB --policies "" --bn-engines fused --engines both --layouts NHWC > $R/grid.log 2>&1; el "grid resnet50@256 rc=$?"
grep -E "^resnet50|rror" $R/grid.log | cut -c1-220 | tail -2
unset PYTHONPATH
timeout $(( $(left) - 5 )) python3 scripts/time_pytorch.py --net resnet50 --batch 256 --mode channels_last --mode compile --processes 3 --json $R/pytorch_resnet50_256.json > $R/pytorch.log 2>&1; el "pytorch rc=$?"
grep -E "process|fastest" $R/pytorch.log | cut -c1-200
rm -rf $R/*/prototxt; tar cJf $OUT/g4.tar.xz -C $OUT g4 && rm -rf $R; el done
