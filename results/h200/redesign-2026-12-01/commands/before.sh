#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ls /usr/include/cudnn_version*.h 2>/dev/null && grep -E 'define CUDNN_(MAJOR|MINOR|PATCHLEVEL)' /usr/include/cudnn_version*.h
python3 -c "import torch;print('torch',torch.__version__,'cudnn',torch.backends.cudnn.version())"
python3 -m pip list 2>/dev/null | grep -i -E 'cudnn|frontend|pulp|protobuf|cython' 
export UCUDNN_CACHE=/tmp/cache/bench.sqlite; mkdir -p /tmp/cache; cp .device/seed.sqlite $UCUDNN_CACHE
scripts/gpu_node.sh --offline .offline --wheels .wheels setup > $OUT/setup.log 2>&1; echo "setup rc=$? $(( $(date +%s)-t0 )) s"
tail -3 $OUT/setup.log
.device/records.sh /tmp/rec
echo "records done $(( $(date +%s)-t0 )) s"
tar -C /tmp -cJf $OUT/records_before.tar.xz rec
cp $UCUDNN_CACHE $OUT/cache_after_before.sqlite
python3 -P -m ucudnn info 2>&1 | head -20
