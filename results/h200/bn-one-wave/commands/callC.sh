#!/usr/bin/env bash
# Call C, right after B on the same node: the BatchNorm gtests (FUSED and CUDNN against CAFFE,
# NHWC among them), which call A's time limit cut off.
scripts/gpu_node.sh --offline .offline --wheels .wheels_gpu setup > $OUT/setup.log 2>&1; echo "setup rc=$?"; timeout 300 python3 -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider -rfEs tests/gpu/test_batchnorm_gpu.py -k gtests > $OUT/bn_gtests.log 2>&1; echo "bn gtests rc=$?"; tail -5 $OUT/bn_gtests.log | cut -c1-200; grep -E "^\[  (PASSED|FAILED) |tests ran" $OUT/bn_gtests.log | head; rm $OUT/setup.log; xz -9 $OUT/bn_gtests.log
