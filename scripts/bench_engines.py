#!/usr/bin/env python3
"""Where micro-batching still pays on today's cuDNN: both families of choices, both layouts.

For every convolution kernel of the chosen suites (a net of prototxt/ at its batch: AlexNet,
ResNet-18, ResNet-50; the DeepBench training layers) and every setting family (legacy, graph) x layout (NCHW,
NHWC) x dtype, this benchmarks the kernel once at the powerOfTwo sizes (the core's
``Kernel.benchmark``: cudnnFind for legacy algorithms, heuristics A, B and FALLBACK for engine
configs; Note [Graph choices tried] in cython/ucudnn/_graph.pyx), plans it with the DP at each
workspace limit (undivided and powerOfTwo, plus unlimited undivided), runs each plan with the
core and times it with CUDA events (median of --iters runs after 3 warm-ups; backward-filter
with beta 1, as Caffe runs it). Every row is one kernel x op x setting x limit x policy:

    suite,kernel,op,family,layout,dtype,limit_bytes,policy,predicted_ms,measured_ms,
    workspace_bytes,choice,count,benchmark_s

``count`` is how often one iteration of the net runs the kernel (1 for DeepBench): a grouped
layer (AlexNet's) runs its one per-group kernel once per group, on strided views into the
whole blobs in NCHW (Note [Grouped layers] in ucudnn/plan/conv.py). Caffe's grouped layers run
NCHW only; the NHWC setting of such a kernel is each group's channels as a packed NHWC tensor.
``benchmark_s`` the seconds the kernel's benchmark took (heuristics, plan builds and timing
for the graph family: the cost of a cold plan). The summary (stdout, and --out/summary.json)
adds ``count x measured_ms`` per suite and setting: the net's convolution time per iteration.

Where the powerOfTwo plan at a limit differs from the undivided plan at the same limit, the
two are also timed side by side (Note [Divided against undivided, side by side]) into
--out/versus_undivided.csv, one row per kernel x op x setting x limit:

    suite,kernel,op,family,layout,dtype,limit_bytes,undivided_choice,divided_choice,
    undivided_predicted_ms,divided_predicted_ms,undivided_ms,divided_ms,ratio,ratio_min,
    ratio_max,rounds

    python scripts/bench_engines.py --suites resnet18 --out results/h200/engines
    python scripts/bench_engines.py --replot results/h200/engines/points.csv --out /tmp/fig

GPU only; no benchmark cache (the cache keys the legacy family only so far).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import platform
import statistics
import sys
import time

from ucudnn.caffe.prototxt import merge_shapes, read_prototxt
from ucudnn.experiments import plots
from ucudnn.measure import bench
from ucudnn.paths import net_names, net_prototxt
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import plan_kernel
from ucudnn.plan.settings import candidate_sizes
from ucudnn.vocab import DTYPES, UNLIMITED, PlanError, default_math, format_size, parse_size

COLUMNS = ("suite", "kernel", "op", "family", "layout", "dtype", "limit_bytes", "policy",
           "predicted_ms", "measured_ms", "workspace_bytes", "choice", "count", "benchmark_s")
VERSUS_COLUMNS = ("suite", "kernel", "op", "family", "layout", "dtype", "limit_bytes",
                  "undivided_choice", "divided_choice", "undivided_predicted_ms",
                  "divided_predicted_ms", "undivided_ms", "divided_ms", "ratio", "ratio_min",
                  "ratio_max", "rounds")

# Note [Divided against undivided, side by side]
#     "Is this plan slower than not dividing?" is a ratio of two times, and a ratio is
#     measured side by side: each timed once per setting, minutes apart, the same plan of a
#     short host-bound kernel (legacy half precision, results/h200/timing/) measured up to
#     1.6x apart, more than any difference between the two plans. So the two plans of one
#     kernel at one limit, each with its own workspace on the same buffers and stream, are
#     timed in alternating rounds (undivided first in even rounds, divided first in odd ones,
#     so that a drift over the rounds weighs on both), each round a median of --iters runs;
#     ``ratio`` is the median over rounds of divided / undivided, ``ratio_min`` and
#     ``ratio_max`` its range. ``undivided_ms`` and ``divided_ms`` are the medians of the
#     rounds' medians.


@dataclasses.dataclass(frozen=True)
class Kernel:
    suite: str
    name: str
    shape: ConvShape
    n: int
    ops: tuple
    count: int


def suite_kernels(suite: str, deepbench_limit: int):
    """The kernels of a suite (a shipped net's layers, or DeepBench's distinct layers)."""
    if suite in net_names():
        layers = merge_shapes(read_prototxt(net_prototxt(suite)))
        return [Kernel(suite, l.name, ConvShape.from_layer(l), l.n, tuple(l.ops),
                       l.count * l.groups) for l in layers]
    if suite == "deepbench":
        from ucudnn.experiments.deepbench import read_layers, unique_layers
        rows = unique_layers(read_layers())
        if deepbench_limit:
            rows = rows[:deepbench_limit]
        return [Kernel(suite, f"db{l.index}", l.shape, l.n, ("fwd", "bwd_data", "bwd_filter"), 1)
                for l, _ in rows]
    raise SystemExit(f"bench_engines: unknown suite {suite!r} "
                     f"({', '.join(net_names() + ['deepbench'])})")


def kernel_ops(suites, deepbench_limit: int, kernels=None):
    """``[(Kernel, op)]`` to measure, suite by suite: every op of every kernel, or with
    ``kernels`` (layer names, or ``name/op``) only those, in the order given (a run cut
    short by its time has measured the first ones named)."""
    out = [(ks, op) for suite in suites for ks in suite_kernels(suite, deepbench_limit)
           for op in ks.ops]
    if not kernels:
        return out
    rank = {k: i for i, k in enumerate(kernels)}
    named = [(min(rank.get(ks.name, len(rank)), rank.get(f"{ks.name}/{op}", len(rank))), i)
             for i, (ks, op) in enumerate(out)]
    return [out[i] for r, i in sorted(named) if r < len(rank)]


def math_of(args, dtype: str) -> str:
    """The math mode of ``dtype``'s kernels: ``--math``, where ``auto`` is the dtype's
    default (``ucudnn.vocab.default_math``)."""
    return default_math(dtype) if args.math == "auto" else args.math


def measure(core, kern_spec, op, family, layout, dtype, args, log):
    """Rows of one kernel x op x setting."""
    shape = dataclasses.replace(kern_spec.shape, layout=layout)
    if layout != "NCHW":        # a grouped layer's group as a packed tensor (module docstring)
        shape = dataclasses.replace(shape, x_strides=None, y_strides=None)
    name = f"{kern_spec.name}/{op}"
    kern = core.Kernel(shape, op, kern_spec.n, dtype, math_of(args, dtype), name)
    kern.max_graph_configs = args.max_configs
    sizes = candidate_sizes("powerOfTwo", kern_spec.n)
    t0 = time.perf_counter()
    data = bench.measure_kernel(kern, sizes, repeats=1, engines=family)
    bench_s = time.perf_counter() - t0
    esize = DTYPES[dtype][1]
    xb = core.DeviceBuffer(kern.extent_bytes(0, kern_spec.n))
    yb = core.DeviceBuffer(kern.extent_bytes(1, kern_spec.n))
    wb = core.DeviceBuffer(kern.filter_bytes)
    for i, buf in enumerate((xb, yb, wb)):
        buf.fill_random(esize, 101 + i, dtype == "bfloat16")
    a, b, out = {"fwd": (xb, wb, yb), "bwd_data": (wb, yb, xb), "bwd_filter": (xb, yb, wb)}[op]
    handle = core.Handle(0)
    # backward-filter accumulates, as in Caffe and as the benchmark times it (Note
    # [Backward-filter timed with beta 1] in cython/ucudnn/_timing.pyx)
    beta = 1.0 if op == "bwd_filter" else 0.0
    setting = {"suite": kern_spec.suite, "kernel": kern_spec.name, "op": op, "family": family,
               "layout": layout, "dtype": dtype}

    def timed(k, ws, iters):
        return statistics.median(core.time_run(k, handle, a.ptr, b.ptr, out.ptr, ws.ptr,
                                               k.workspace_size, iters, 3, beta=beta))

    rows, versus = [], []
    plans = {}
    settings = [(UNLIMITED, "undivided")] + [(lim, pol) for lim in args.limits
                                             for pol in ("undivided", "powerOfTwo")]
    for limit, policy in settings:
        try:
            plan = plan_kernel(data, kern_spec.n, policy, limit, name=name)
        except PlanError as e:
            log(f"  {name} {family} {layout} {dtype} {format_size(limit)} {policy}: {e}")
            continue
        plans[limit, policy] = plan
        kern.set_plan(plan)
        ws = core.DeviceBuffer(max(1, kern.workspace_size))
        rows.append(dict(setting, limit_bytes="unlimited" if limit == UNLIMITED else limit,
                         policy=policy, predicted_ms=round(plan.time_ms, 5),
                         measured_ms=round(timed(kern, ws, args.iters), 5),
                         workspace_bytes=kern.workspace_size, choice=plan.describe(op),
                         count=kern_spec.count, benchmark_s=round(bench_s, 3)))
        undivided = plans.get((limit, "undivided"))
        if (policy == "powerOfTwo" and undivided is not None and args.versus_rounds
                and undivided.describe() != plan.describe()):
            # Note [Divided against undivided, side by side]
            kern_u = core.Kernel(shape, op, kern_spec.n, dtype, math_of(args, dtype), name)
            kern_u.set_plan(undivided)
            ws_u = core.DeviceBuffer(max(1, kern_u.workspace_size))
            pairs = []
            for r in range(args.versus_rounds):
                if r % 2 == 0:
                    u = timed(kern_u, ws_u, args.iters)
                    d = timed(kern, ws, args.iters)
                else:
                    d = timed(kern, ws, args.iters)
                    u = timed(kern_u, ws_u, args.iters)
                pairs.append((u, d))
            versus.append(dict(setting, limit_bytes=limit,
                               undivided_choice=undivided.describe(op),
                               divided_choice=plan.describe(op),
                               undivided_predicted_ms=round(undivided.time_ms, 5),
                               divided_predicted_ms=round(plan.time_ms, 5),
                               **side_by_side(pairs)))
            del kern_u, ws_u
        del ws
    log(f"  {name:22s} {family:6s} {layout} {dtype:8s} benchmark {bench_s:6.1f} s"
        + (f" ({kern.graph_stats})" if family == "graph" else ""))
    return rows, versus


def side_by_side(pairs):
    """Note [Divided against undivided, side by side]: the columns of one kernel's row from
    its rounds' ``(undivided_ms, divided_ms)`` medians."""
    ratios = [d / u for u, d in pairs]
    return {"undivided_ms": round(statistics.median(u for u, _ in pairs), 5),
            "divided_ms": round(statistics.median(d for _, d in pairs), 5),
            "ratio": round(statistics.median(ratios), 4), "ratio_min": round(min(ratios), 4),
            "ratio_max": round(max(ratios), 4), "rounds": len(pairs)}


def print_versus(rows, versus, slower=1.03):
    """One line per suite, family, layout, dtype and limit, from the side-by-side timings
    (Note [Divided against undivided, side by side]): over the kernels whose undivided plan
    fits the limit, the geomean speedup of the powerOfTwo plan (undivided / divided, 1 where
    the two plans are the same), how many plans differ, and those slower than their undivided
    plan by more than ``slower``."""
    def at_limit(r):            # one kernel x op x setting at one limit
        return tuple(str(r[f]) for f in ("suite", "kernel", "op", "family", "layout", "dtype",
                                         "limit_bytes"))

    timed = {at_limit(v): v for v in versus}
    policies = {}
    for r in rows:
        policies.setdefault(at_limit(r), set()).add(r["policy"])
    groups = {}
    for key, pols in sorted(policies.items()):
        if {"undivided", "powerOfTwo"} <= pols:
            suite, kernel, op, fam, lay, dt, limit = key
            groups.setdefault((suite, fam, lay, dt, limit), []).append(
                (f"{kernel}/{op}", timed.get(key)))
    for (suite, fam, lay, dt, limit), kvs in groups.items():
        geo = statistics.geometric_mean(1.0 / float(v["ratio"]) if v else 1.0 for _, v in kvs)
        worse = [f"{name} {float(v['ratio']):.3f}" for name, v in kvs
                 if v and float(v["ratio"]) > slower]
        print(f"{suite:9s} {fam:6s} {lay} {dt:8s} {format_size(int(limit)):>10s} side by side: "
              f"{len(kvs)} kernels, {sum(1 for _, v in kvs if v)} divided, geomean speedup "
              f"{geo:.3f}x, slower than {slower:.2f}x: " + (", ".join(worse) if worse else "none"))


def read_versus(path):
    """The rows of a versus_undivided.csv (no rows where the file is absent: a points.csv
    written before the side-by-side timing)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def summarise(rows):
    """Per suite, setting, limit and policy: sum of count x time (the net's convolutions per
    iteration), predicted and measured. ``complete`` is False where some kernel had no plan
    there (nothing fits the limit): such a sum leaves kernels out and compares with nothing."""
    kernels = {}
    for r in rows:
        kernels.setdefault(r["suite"], set()).add((r["kernel"], r["op"]))
    out = {}
    for r in rows:
        k = (r["suite"], r["family"], r["layout"], r["dtype"], str(r["limit_bytes"]), r["policy"])
        t = out.setdefault(k, {"predicted_ms": 0.0, "measured_ms": 0.0, "kernels": 0})
        t["predicted_ms"] += r["count"] * r["predicted_ms"]
        t["measured_ms"] += r["count"] * r["measured_ms"]
        t["kernels"] += 1
    return [dict(zip(("suite", "family", "layout", "dtype", "limit", "policy"), k), **v,
                 complete=v["kernels"] == len(kernels[k[0]])) for k, v in out.items()]


def print_summary(summary):
    for s in summary:
        print(f"{s['suite']:9s} {s['family']:6s} {s['layout']} {s['dtype']:8s} "
              f"{s['limit']:>10s} {s['policy']:10s} predicted {s['predicted_ms']:8.2f} ms "
              f"measured {s['measured_ms']:8.2f} ms"
              + ("" if s["complete"] else f"  (incomplete: {s['kernels']} kernels)"))


def read_points(path):
    """The rows of a points.csv, numbers as numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("predicted_ms", "measured_ms", "benchmark_s"):
            r[k] = float(r[k])
        for k in ("workspace_bytes", "count"):
            r[k] = int(r[k])
    return rows


def plot(rows, path):
    """engines.png: per suite and dtype a panel of the measured convolution time per family x
    layout (:func:`ucudnn.experiments.plots.engines_summary`, complete sums only)."""
    plots.engines_summary([s for s in summarise(rows) if s["complete"]], path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", nargs="+", default=["resnet18"])
    ap.add_argument("--families", nargs="+", default=["legacy", "graph"])
    ap.add_argument("--layouts", nargs="+", default=["NCHW", "NHWC"])
    ap.add_argument("--dtypes", nargs="+", default=["float32"])
    ap.add_argument("--limits", nargs="+", default=["8MiB", "64MiB", "512MiB"])
    ap.add_argument("--math", default="auto",
                    help="cuDNN math mode (default auto: tensor_op for float16 and bfloat16, "
                    "default otherwise; ucudnn.vocab.default_math)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--versus-rounds", type=int, default=6,
                    help="rounds of the side-by-side timing of a divided plan and its "
                    "undivided plan (Note [Divided against undivided, side by side]; 0: none)")
    ap.add_argument("--max-configs", type=int, default=None,
                    help="engine configs tried per size (0: every one heuristics propose; "
                    "default: the core's GRAPH_CONFIGS_DEFAULT)")
    ap.add_argument("--deepbench-layers", type=int, default=0, help="first N distinct (0: all)")
    ap.add_argument("--kernels", nargs="+", default=None, metavar="NAME[/OP]",
                    help="only these kernels of the suites (a layer name, or name/op)")
    ap.add_argument("--out", default=None,
                    help="folder for points.csv, summary.json and engines.png")
    ap.add_argument("--replot", metavar="POINTS_CSV", nargs="+", default=None,
                    help="only print the sums and the side-by-side lines and draw engines.png "
                    "(into --out) from earlier points.csv files (each with the "
                    "versus_undivided.csv beside it, where there is one), one cut short "
                    "included")
    args = ap.parse_args(argv)
    if args.versus_rounds < 0:
        ap.error(f"--versus-rounds: must be >= 0, got {args.versus_rounds}")
    if args.replot:
        rows = [r for p in args.replot for r in read_points(p)]
        versus = [v for p in args.replot for v in read_versus(
            os.path.join(os.path.dirname(p), "versus_undivided.csv"))]
        print_summary(summarise(rows))
        print_versus(rows, versus)
        os.makedirs(args.out or ".", exist_ok=True)
        plot(rows, os.path.join(args.out or ".", "engines.png"))
        return 0
    args.limits = [parse_size(s, "--limits") for s in args.limits]
    todo = kernel_ops(args.suites, args.deepbench_layers, args.kernels)
    unknown = sorted(set(args.kernels or ()) - {n for ks, op in todo
                                                for n in (ks.name, f"{ks.name}/{op}")})
    if unknown:
        ap.error(f"--kernels: {', '.join(unknown)}: no such kernel in the suites "
                 f"{', '.join(args.suites)}")
    log = lambda m: print(m, file=sys.stderr, flush=True)
    try:
        info = bench.device_info()
    except bench.NoGpuError as e:
        print(f"bench_engines: {e}", file=sys.stderr)
        return 2
    core = bench.core()
    if args.max_configs is None:
        args.max_configs = core.GRAPH_CONFIGS_DEFAULT
    rows, versus = [], []
    t0 = time.perf_counter()
    points = versus_file = None
    if args.out:
        # written as each kernel is measured: a run cut short keeps what it measured
        # (--replot draws it)
        os.makedirs(args.out, exist_ok=True)
        points = open(os.path.join(args.out, "points.csv"), "w", newline="")
        writer = csv.DictWriter(points, fieldnames=COLUMNS)
        writer.writeheader()
        versus_file = open(os.path.join(args.out, "versus_undivided.csv"), "w", newline="")
        versus_writer = csv.DictWriter(versus_file, fieldnames=VERSUS_COLUMNS)
        versus_writer.writeheader()
    try:
        for ks, op in todo:
            for dtype in args.dtypes:
                for family in args.families:
                    for layout in args.layouts:
                        new, new_versus = measure(core, ks, op, family, layout, dtype, args,
                                                  log)
                        rows.extend(new)
                        versus.extend(new_versus)
                        if points is not None:
                            writer.writerows(new)
                            versus_writer.writerows(new_versus)
                            points.flush()
                            versus_file.flush()
    finally:
        for f in (points, versus_file):
            if f is not None:
                f.close()
    summary = summarise(rows)
    meta = {"command": " ".join(sys.argv), "device": info, "python": platform.python_version(),
            "seconds": round(time.perf_counter() - t0, 1), "max_configs": args.max_configs,
            "iters": args.iters, "versus_rounds": args.versus_rounds,
            "math": {d: math_of(args, d) for d in args.dtypes}}
    print_summary(summary)
    print_versus(rows, versus)
    if args.out:
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump({"meta": meta, "summary": summary}, f, indent=1)
        plot(rows, os.path.join(args.out, "engines.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
