#!/usr/bin/env python3
"""Cold and warm planning time of a shipped net, as Caffe's layers plan it (issue 14).

Every convolution kernel of the net is created in the core and planned by
``ucudnn.measure.runtime.prepare_kernel`` (what the C API runs for Caffe): first with an empty
benchmark cache (cold), then again with the cache the first pass filled (warm). ``--search``
picks the search over micro-batch sizes for policy ``all`` (Note [Pruned search at run time]).
Appends one row per (net, policy, search) to a CSV with the predicted convolution time of the
plans (every kernel times its group calls and identical layers):

    net,policy,search,limit_bytes,gpus,cold_s,warm_s,sizes_benchmarked,predicted_ms

Needs a GPU. Example (the benchmark cache goes to a fresh temporary folder):

    python3 scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB \\
        --csv cold_planning.csv
"""
import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

from ucudnn.vocab import SEARCHES

FIELDS = ["net", "policy", "search", "limit_bytes", "gpus", "cold_s", "warm_s",
          "sizes_benchmarked", "predicted_ms"]


def plan_net(net, policy, search, limit, cache, records):
    """(seconds, sizes benchmarked, predicted ms) of planning every kernel of ``net``; the
    plan records go to ``records`` (the sizes benchmarked are read from them)."""
    from ucudnn.caffe.records import read_records
    from ucudnn.measure import bench as B
    from ucudnn.measure import records as rw
    from ucudnn.measure import runtime, shipped
    from ucudnn.plan.conv import ConvShape
    os.environ[rw.ENV] = str(records)
    if records.exists():
        records.unlink()
    t0 = time.perf_counter()
    predicted = 0.0
    for layer in shipped.layers(net):
        for op in layer.ops:
            kern = B.core().Kernel(ConvShape.from_layer(layer), op, layer.n, "float32",
                                   "default", layer.name, layer.groups)
            runtime.prepare_kernel(kern, policy=policy, optimizer=0, limit=limit,
                                   cache_path=str(cache), search=search)
            predicted += layer.groups * layer.count * kern.plan.time_ms
    seconds = time.perf_counter() - t0
    benchmarked = sum(r["sizes_benchmarked"] for r in read_records(records)
                      if r["kind"] == "bench")
    return seconds, benchmarked, predicted


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet18", help="a shipped net (alexnet, resnet18)")
    ap.add_argument("--policy", default="all", choices=("undivided", "powerOfTwo", "all"))
    ap.add_argument("--search", default="pruned", choices=SEARCHES,
                    help="how policy all finds its sizes")
    ap.add_argument("--limit", default="64MiB", help="workspace per kernel (DP)")
    ap.add_argument("--csv", required=True, help="CSV file to append a row to")
    args = ap.parse_args(argv)
    from ucudnn.measure.bench import device_info
    from ucudnn.vocab import parse_size
    limit = parse_size(args.limit)
    with tempfile.TemporaryDirectory(prefix="ucudnn-cold-") as d:
        cache, records = Path(d) / "bench.sqlite", Path(d) / "records.jsonl"
        cold_s, sizes, predicted = plan_net(args.net, args.policy, args.search, limit, cache,
                                            records)
        warm_s, _, _ = plan_net(args.net, args.policy, args.search, limit, cache, records)
    row = {"net": args.net, "policy": args.policy, "search": args.search, "limit_bytes": limit,
           "gpus": 1, "cold_s": round(cold_s, 2), "warm_s": round(warm_s, 3),
           "sizes_benchmarked": sizes, "predicted_ms": round(predicted, 3)}
    new = not os.path.exists(args.csv)
    with open(args.csv, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)
    print(f"{args.net} {args.policy} ({args.search}, {args.limit}) on "
          f"{device_info().get('gpu')}: cold {cold_s:.1f} s ({sizes} sizes benchmarked), "
          f"warm {warm_s:.2f} s, predicted {predicted:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
