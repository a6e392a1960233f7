#!/usr/bin/env python3
"""DeepBench's 3x3 and 5x5 training convolutions through the core (the paper's DeepBench figure).

For every distinct kernel of ``ucudnn/data/deepbench/conv_train.csv`` (batch 256), each op
(forward, backward-data, backward-filter) and each per-kernel workspace limit (128, 256,
512 MiB): benchmark the micro-batch sizes the policies need (through the cache), plan
``undivided`` and ``powerOfTwo`` (``--policies ... all`` adds all sizes) with the DP, run every
plan through the core with CUDA events (median of --iters runs) and record predicted and
measured times (Note [DeepBench results] in ``ucudnn/experiments/deepbench.py``).

    python scripts/bench_deepbench.py --json results/h200/deepbench/deepbench.json

GPU only. The JSON is rewritten after every kernel; ``--max-seconds`` stops before the next
kernel once the time is up and writes what it has (``complete: false``). The same kernel listed
several times by DeepBench (VGG at N = 8 and 16) is measured once (``same_as``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

from ucudnn.experiments import deepbench as db
from ucudnn.plan.dp import plan_kernel
from ucudnn.plan.settings import candidate_sizes
from ucudnn.vocab import PlanError
from ucudnn.vocab import OPS, format_size, parse_size

PLAN_WARMUP = 3


def git_commit():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=here).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=here).stdout.strip()
        return (out + ("-dirty" if dirty else "")) if out else "unknown"
    except OSError:
        return "unknown"


def sizes_for(policies, n):
    """Micro-batch sizes to benchmark: the union of what the policies may use."""
    return sorted({b for p in policies for b in candidate_sizes(p, n)})


def operands(op, xb, yb, wb):
    """(a, b, out) of the core's run for ``op``, as scripts/bench_core.py passes them."""
    return {"fwd": (xb, wb, yb), "bwd_data": (wb, yb, xb), "bwd_filter": (xb, yb, wb)}[op]


def jobs(layers, ops):
    """(first row, names of the rows with that kernel, op) in list order, op order within."""
    return [(layer, same, op) for layer, same in db.unique_layers(layers) for op in ops]


def make_buffers(core, kern, n):
    """x, y, w for ``n`` samples, filled as scripts/bench_core.py fills them. The three ops of
    one layer share them (the fill runs on the host: 24 GB for the whole list, so once per
    layer, not per op)."""
    xb = core.DeviceBuffer(kern.extent_bytes(0, n))
    yb = core.DeviceBuffer(kern.extent_bytes(1, n))
    wb = core.DeviceBuffer(kern.filter_bytes)
    for i, buf in enumerate((xb, yb, wb)):
        buf.fill_random(4, 101 + i)
    return xb, yb, wb


def measure_kernel(core, bench, layer, same_as, op, limits, policies, args, log, buffers=None):
    """Records (Note [DeepBench results]) of one kernel for every limit and policy;
    ``buffers`` (x, y, w from :func:`make_buffers`) are made here when not given."""
    n = layer.n
    kern = core.Kernel(layer.shape, op, n, "float32", args.math, f"{layer.name}/{op}")
    t0 = time.perf_counter()
    data = bench.measure(kern, sizes_for(policies, n), repeats=args.repeats,
                         cache_path=args.cache)
    bench_s = time.perf_counter() - t0
    xb, yb, wb = buffers or make_buffers(core, kern, n)
    a, b, out = operands(op, xb, yb, wb)
    handle = core.Handle(0)
    recs = []
    for limit in limits:
        for policy in policies:
            try:
                plan = plan_kernel(data, n, policy, limit, name=kern.name)
            except PlanError as e:
                recs.append(db.kernel_record(layer, same_as, op, limit, policy, error=str(e),
                                             benchmark_s=bench_s))
                continue
            kern.set_plan(plan)
            ws = core.DeviceBuffer(kern.workspace_size)
            times = core.time_run(kern, handle, a.ptr, b.ptr, out.ptr, ws.ptr,
                                  kern.workspace_size, args.iters, PLAN_WARMUP)
            recs.append(db.kernel_record(layer, same_as, op, limit, policy, plan, list(times),
                                         kern.workspace_size, bench_s))
            del ws
    log(f"  {layer.name:6s} {op:10s} {layer.describe():48s} benchmark {bench_s:6.1f} s")
    return recs


def point_lines(records, policies):
    """Text lines, one per (layer, op, limit): each policy's predicted/measured ms, the measured
    (and predicted) speedup over undivided."""
    by = {}
    for r in records:
        by.setdefault((r["layer"], r["op"], r["limit"]), {})[r["policy"]] = r
    lines = []
    for (layer, op, limit), pts in by.items():
        base = pts.get("undivided", {})
        cells = []
        for p in policies:
            r = pts.get(p)
            if r is None:
                continue
            if r.get("measured_ms") is None:
                cells.append(f"{p} -")
                continue
            cell = f"{p} {r['predicted_ms']:8.3f}/{r['measured_ms']:8.3f} ms"
            if p != "undivided" and base.get("measured_ms"):
                cell += (f" {base['measured_ms'] / r['measured_ms']:5.2f}x"
                         f" (pred {base['predicted_ms'] / r['predicted_ms']:5.2f}x)")
            cells.append(cell)
        plans = "; ".join(f"{p}: {pts[p]['plan']}" for p in policies if pts.get(p, {}).get("plan"))
        lines.append(f"{layer:6s} {op:10s} {format_size(limit):>7s}  " + "  ".join(cells) +
                     f"  [{plans}]")
    return lines


def report(doc, policies):
    meta = doc["meta"]
    dev = meta.get("device", {})
    lines = [f"# bench_deepbench: {dev.get('gpu')}, driver {dev.get('driver')}, CUDA runtime "
             f"{dev.get('cuda_runtime_version')}, cuDNN {dev.get('cudnn_version')}, math "
             f"{meta.get('math')}, batch 256, median of {meta.get('iters')} runs, Find repeats "
             f"{meta.get('repeats')}, {'complete' if doc['complete'] else 'INCOMPLETE'}",
             f"# command: {meta.get('command')}",
             "# per layer/op/limit: policy predicted/measured ms, measured speedup over "
             "undivided (predicted)"]
    lines += point_lines(doc["kernels"], policies)
    for p in policies:
        if p == "undivided":
            continue
        for basis in ("measured", "predicted"):
            rows = db.summary(doc, p, basis)
            if rows:
                lines += ["", f"## {p} over undivided, {basis}", db.format_summary(rows)]
    return "\n".join(lines)


def write(doc, args, policies):
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, args.json)
    text = report(doc, policies)
    with open(args.text or os.path.splitext(args.json)[0] + ".txt", "w") as f:
        f.write(text + "\n")
    return text


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=None,
                    help="rows by name (db_17) or DeepBench index (17); default all")
    ap.add_argument("--filters", nargs="+", default=None, choices=["3x3", "5x5"])
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    ap.add_argument("--limits", nargs="+", default=[f"{m}MiB" for m in db.LIMITS_MIB])
    ap.add_argument("--policies", nargs="+", default=["undivided", "powerOfTwo"],
                    choices=["undivided", "powerOfTwo", "all"])
    ap.add_argument("--iters", type=int, default=10, help="CUDA-event runs per plan (median)")
    ap.add_argument("--repeats", type=int, default=1, help="Find...Ex repetitions (median)")
    ap.add_argument("--math", default="default")
    ap.add_argument("--cache", default=None, help="benchmark cache (default $UCUDNN_CACHE)")
    ap.add_argument("--csv", default=None, help="layer list (default the shipped conv_train.csv)")
    ap.add_argument("--json", required=True, help="write the results here (and .txt beside)")
    ap.add_argument("--text", default=None, help="text report (default JSON path with .txt)")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="stop before the next kernel after this long, writing what was measured")
    args = ap.parse_args(argv)
    args.limit_bytes = [parse_size(s, "--limits") for s in args.limits]
    args.policy_list = ["undivided"] + [p for p in args.policies if p != "undivided"]
    if args.iters < 1 or args.repeats < 1:
        ap.error("--iters and --repeats must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)
    layers = db.select_layers(db.read_layers(args.csv), args.layers, args.filters)
    todo = jobs(layers, args.ops)
    from ucudnn.measure import bench
    try:
        core = bench.core()
        info = bench.device_info()
    except bench.NoGpuError as e:
        print(f"bench_deepbench: {e}", file=sys.stderr)
        return 2
    import ucudnn
    meta = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "device": info, "math": args.math, "iters": args.iters, "repeats": args.repeats,
            "limits": args.limit_bytes, "policies": args.policy_list, "ops": args.ops,
            "layers": [l.name for l in layers], "commit": git_commit(),
            "ucudnn": ucudnn.__version__, "python": platform.python_version(),
            "source": "ucudnn/data/deepbench/conv_train.csv (DeepBench da81ba7, Apache-2.0)"}
    doc = db.new_document(meta)
    deadline = db.Deadline(args.max_seconds)
    log(f"bench_deepbench: {len(layers)} rows, {len(todo) // max(1, len(args.ops))} distinct "
        f"kernels, {len(todo)} kernel-ops, limits {', '.join(args.limits)}")
    done, buffers = 0, (None, None)
    for layer, same, op in todo:
        if deadline.expired():
            log(f"bench_deepbench: --max-seconds {args.max_seconds:g} reached after {done} of "
                f"{len(todo)} kernel-ops; writing what was measured")
            break
        if buffers[0] is not layer:
            buffers = (None, None)  # free the previous layer's before allocating
            kern = core.Kernel(layer.shape, op, layer.n, "float32", args.math, layer.name)
            buffers = (layer, make_buffers(core, kern, layer.n))
            del kern
        doc["kernels"] += measure_kernel(core, bench, layer, same, op, args.limit_bytes,
                                         args.policy_list, args, log, buffers[1])
        done += 1
        doc["meta"]["elapsed_s"] = round(deadline.elapsed(), 1)
        write(doc, args, args.policy_list)
    doc["complete"] = done == len(todo)
    doc["meta"]["elapsed_s"] = round(deadline.elapsed(), 1)
    print(write(doc, args, args.policy_list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
