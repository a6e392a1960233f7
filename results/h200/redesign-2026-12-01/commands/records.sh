#!/usr/bin/env bash
# Plan records of AlexNet and ResNet-18 at 8/64 MiB, DP / ILP / shared, through caffe time.
# usage: records.sh OUTDIR   (UCUDNN_CACHE must be set; ucudnn and Caffe installed)
set -uo pipefail
out="$1"; mkdir -p "$out"
CAFFE=third_party/caffe/build/tools/caffe
NETS_DIR="${NETS_DIR:-prototxt}"
for net in alexnet resnet18; do
  for lim in 8MiB 64MiB; do
    for opt in dp ilp shared; do
      stem="${net}_${opt}_${lim}"
      python3 -P -m ucudnn prototxt "$NETS_DIR/$net.prototxt" -o "$out/$stem.prototxt" --force \
        --policy powerOfTwo --optimizer "$opt" --limit "$lim" >/dev/null 2>&1 \
        || { echo "variant $stem failed"; continue; }
      UCUDNN_RECORDS="$out/$stem.jsonl" GLOG_logtostderr=1 timeout 300 \
        "$CAFFE" time -model "$out/$stem.prototxt" -iterations 2 -gpu 0 > "$out/$stem.log" 2>&1
      echo "$stem rc=$? records=$(wc -l < "$out/$stem.jsonl" 2>/dev/null)"
    done
  done
done
