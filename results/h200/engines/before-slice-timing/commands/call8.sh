#!/usr/bin/env bash
# The ResNet-18 study again on the same warm H200 right after call7.sh (whose points.csv did
# not come back): the files this README quotes (points.csv, summary.json, engines.png).
timeout 140 python3 -P scripts/bench_engines.py --suites resnet18 --limits 8MiB 64MiB 512MiB \
    --max-configs 16 --out /tmp/r18 > /tmp/r18.log 2> /tmp/r18.err
