#!/usr/bin/env python3
"""Measured against predicted: the core's micro-batched convolutions on this GPU.

For each network (AlexNet, ResNet-18 at batch 256), each per-layer workspace limit and each
policy, plan every kernel with the DP, run the plan with the core (CUDA events, median of
--iters iterations, all three ops) and add up the network's convolution time (each kernel
times its count per iteration). Prints the measured time next to the planner's prediction and
the measured speedup over the undivided plan measured in the same run.

    python scripts/bench_core.py --out results/h200/bench_core

GPU only. Benchmarks go through the cache (--cache), so a second run only times plans.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from ucudnn.experiments.grid import LIMITS
from ucudnn.measure import bench, shipped
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import plan_kernel
from ucudnn.plan.settings import candidate_sizes
from ucudnn.vocab import format_size, parse_size


def shipped_layers(net):
    return shipped.layers(net)


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        return "unknown"


def measure_layer(core, layer, op, limits, policies, args, log):
    """{(limit, policy): (plan, median_ms)} for one kernel of one layer."""
    shape = ConvShape.from_layer(layer)
    kern = core.Kernel(shape, op, layer.n, "float32", args.math, f"{layer.name}/{op}")
    sizes = sorted({b for p in policies for b in candidate_sizes(p, layer.n)})
    t0 = time.perf_counter()
    data = bench.measure(kern, sizes, repeats=args.repeats, cache_path=args.cache)
    bench_s = time.perf_counter() - t0
    xb = core.DeviceBuffer(kern.extent_bytes(0, layer.n))
    yb = core.DeviceBuffer(kern.extent_bytes(1, layer.n))
    wb = core.DeviceBuffer(kern.filter_bytes)
    for i, buf in enumerate((xb, yb, wb)):
        buf.fill_random(4, 101 + i)
    a, b, out = {"fwd": (xb, wb, yb), "bwd_data": (wb, yb, xb), "bwd_filter": (xb, yb, wb)}[op]
    handle = core.Handle(0)
    results = {}
    for limit in limits:
        for policy in policies:
            plan = plan_kernel(data, layer.n, policy, limit, name=kern.name)
            kern.set_plan(plan)
            ws = core.DeviceBuffer(kern.workspace_size)
            times = core.time_run(kern, handle, a.ptr, b.ptr, out.ptr, ws.ptr,
                                  kern.workspace_size, args.iters, 3)
            results[limit, policy] = (plan, statistics.median(times), kern.workspace_size)
            del ws
    log(f"  {layer.name:10s} {op:10s} benchmark {bench_s:6.1f} s")
    return results, bench_s


def run(args):
    core = bench.core()
    info = bench.device_info()
    limits = [parse_size(s, "--limits") for s in args.limits]
    policies = args.policies
    log = lambda m: print(m, file=sys.stderr, flush=True)
    rows, kernels = [], []
    for net in args.nets:
        layers = shipped_layers(net)
        log(f"{net}: {len(layers)} layer shapes")
        totals = {}
        for layer in layers:
            for op in layer.ops:
                res, bench_s = measure_layer(core, layer, op, limits, policies, args, log)
                for (limit, policy), (plan, ms, ws) in res.items():
                    t = totals.setdefault((limit, policy), [0.0, 0.0, 0])
                    t[0] += layer.count * plan.time_ms
                    t[1] += layer.count * ms
                    t[2] += layer.count * ws
                    kernels.append({"net": net, "layer": layer.name, "op": op,
                                    "count": layer.count, "limit": limit, "policy": policy,
                                    "plan": plan.describe(), "predicted_ms": plan.time_ms,
                                    "measured_ms": ms, "workspace": ws,
                                    "benchmark_s": bench_s})
        for limit in limits:
            base = totals[limit, "undivided"][1] if (limit, "undivided") in totals else None
            for policy in policies:
                pred, meas, ws = totals[limit, policy]
                rows.append({"net": net, "limit": limit, "policy": policy,
                             "predicted_ms": pred, "measured_ms": meas, "workspace_total": ws,
                             "speedup_measured": base / meas if base else None,
                             "prediction_error": (meas - pred) / pred})
    return info, rows, kernels


def report(info, rows, args):
    lines = [f"# bench_core: {info['gpu']}, driver {info['driver']}, CUDA runtime "
             f"{info['cuda_runtime_version']}, cuDNN {info['cudnn_version']}, math {args.math}, "
             f"median of {args.iters} iterations, Find repeats {args.repeats}",
             f"# command: {' '.join(sys.argv)}",
             f"{'net':9s} {'limit':>9s} {'policy':11s} {'predicted':>10s} {'measured':>10s} "
             f"{'error':>7s} {'speedup':>8s} {'workspace':>10s}"]
    for r in rows:
        sp = f"{r['speedup_measured']:.2f}x" if r["speedup_measured"] else "-"
        lines.append(f"{r['net']:9s} {format_size(r['limit']):>9s} {r['policy']:11s} "
                     f"{r['predicted_ms']:9.2f}ms {r['measured_ms']:9.2f}ms "
                     f"{100 * r['prediction_error']:+6.1f}% {sp:>8s} "
                     f"{format_size(r['workspace_total']):>10s}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", nargs="+", default=["alexnet", "resnet18"])
    ap.add_argument("--limits", nargs="+", default=list(LIMITS))
    ap.add_argument("--policies", nargs="+", default=["undivided", "powerOfTwo", "all"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3, help="Find...Ex repetitions (median)")
    ap.add_argument("--math", default="default")
    ap.add_argument("--cache", default=None, help="benchmark cache (default $UCUDNN_CACHE)")
    ap.add_argument("--out", default=None, help="write OUT.txt and OUT.json")
    args = ap.parse_args(argv)
    if "undivided" not in args.policies:
        args.policies = ["undivided"] + args.policies
    try:
        info, rows, kernels = run(args)
    except bench.NoGpuError as e:
        print(f"bench_core: {e}", file=sys.stderr)
        return 2
    text = report(info, rows, args)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out + ".txt", "w") as f:
            f.write(text + "\n")
        meta = {"command": " ".join(sys.argv), "device": info, "math": args.math,
                "iters": args.iters, "repeats": args.repeats, "commit": git_commit(),
                "python": platform.python_version()}
        with open(args.out + ".json", "w") as f:
            json.dump({"meta": meta, "networks": rows, "kernels": kernels}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
