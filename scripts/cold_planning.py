#!/usr/bin/env python3
"""Cold and warm planning time of a shipped net's kernels, each planned alone by the DP.

Every convolution kernel of the net is created in the core and planned by
``ucudnn.measure.runtime.prepare_kernel`` (what the C API runs for Caffe): first with an empty
benchmark cache (cold), then again with the cache the first pass filled (warm). ``--search``
picks the search over micro-batch sizes for policy ``all`` (Note [Pruned search at run time]).
Appends one row per (net, policy, search) to a CSV with the predicted convolution time of the
plans (every kernel times its group calls and identical layers):

    net,policy,search,limit_bytes,gpus,repeats,cold_s,warm_s,sizes_benchmarked,predicted_ms,
    setup_s,warmup_find_s,find_s,retime_s,graph_heuristics_s,graph_build_s,graph_time_s,
    graph_check_s,engines

The ``_s`` parts say where the cold pass's benchmarks spent their time, summed over kernels
(and GPUs), in parts that do not overlap: buffers and workspace, warm-up Finds, Finds,
re-timing with CUDA events, and for the graph family (``--engines graph`` or ``both``) the
heuristics' queries, the plan builds, timing the engine configs and checking their results
(Note [Graph results checked] in cython/ucudnn/_check.pyx).

With ``--devices 0,1`` the cold pass is spread over the GPUs the way ``ucudnn bench
--devices`` spreads a net (Note [Benchmarks over several GPUs]): one child process per GPU
(``CUDA_VISIBLE_DEVICES``) plans its share of the kernels (``sources.shard_kernels``) into the
one cache; cold_s is the wall time until the last child is done, and the warm pass (every
kernel, this process's GPU) reads what they measured.

Needs a GPU. Example (the benchmark cache goes to a fresh temporary folder):

    python3 scripts/cold_planning.py --net resnet18 --policy all --search pruned --limit 64MiB \\
        --devices 0,1 --csv cold_planning.csv
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ucudnn.vocab import ENGINES, SEARCHES

PARTS = ("setup", "warmup_find", "find", "retime", "graph_heuristics", "graph_build",
         "graph_time", "graph_check")
FIELDS = ["net", "policy", "search", "limit_bytes", "gpus", "repeats", "cold_s", "warm_s",
          "sizes_benchmarked", "predicted_ms"] + [f"{p}_s" for p in PARTS] + ["engines"]


def bench_totals(records):
    """(sizes benchmarked, seconds per part of the core's benchmarks: PARTS), summed over
    the bench records in ``records`` (none: nothing was benchmarked)."""
    from ucudnn.caffe.records import read_records
    sizes, parts = 0, dict.fromkeys(PARTS, 0.0)
    for r in (read_records(records) if records.exists() else []):
        if r["kind"] == "bench":
            sizes += r["sizes_benchmarked"]
            for p in PARTS:
                parts[p] += (r.get("benchmark_seconds") or {}).get(p, 0.0)
    return sizes, parts


def plan_net(net, policy, search, limit, cache, records, shard=None, repeats=1,
             engines="legacy"):
    """(seconds, sizes benchmarked, predicted ms, split) of planning every kernel of ``net``
    (with ``shard`` = (i, n): only the i-th of n equal-cost shares); the plan records go to
    ``records`` (the sizes benchmarked are read from them). ``split``: the seconds summed
    over kernels in the benchmark through the cache (``bench_s``: for a warm pass, the cache
    reads and the search) and in the DP with the plan's resolution in the core (``plan_s``:
    graph plans are built there)."""
    from ucudnn.measure import records as rw
    from ucudnn.measure import shipped
    from ucudnn.measure.live import plan_kernels
    from ucudnn.measure.planner_state import planner_state
    from ucudnn.measure.sources import shard_kernels
    from ucudnn.plan.settings import PlanSettings, candidate_sizes
    from ucudnn.vocab import OPS
    os.environ[rw.ENV] = str(records)
    if records.exists() and shard is None:
        records.unlink()
    layers = shipped.layers(net)
    kernels = [(l, op) for l in layers for op in l.ops]
    if shard is not None:
        mine = set(shard_kernels(layers, OPS, lambda l: candidate_sizes(policy, l.n),
                                 shard[1])[shard[0]])
        kernels = [(l, op) for l, op in kernels if (l.name, op) in mine]
    t0 = time.perf_counter()
    planned = plan_kernels(kernels, PlanSettings(policy=policy, limit=limit, search=search,
                                                 cache_path=str(cache), repeats=repeats,
                                                 engines=engines))
    seconds = time.perf_counter() - t0
    predicted = sum(l.groups * l.count * k.plan.time_ms for l, _, k in planned)
    split = {p: sum(planner_state(k).timing[p] for _, _, k in planned)
             for p in ("bench_s", "plan_s")}
    return seconds, bench_totals(records)[0], predicted, split


def cold_on_devices(args, devices, cache, records):
    """Note at the top: one child per GPU plans its share; the wall seconds."""
    t0 = time.perf_counter()
    procs = []
    for i, dev in enumerate(devices):
        cmd = [sys.executable, os.path.abspath(__file__), "--net", args.net, "--policy",
               args.policy, "--search", args.search, "--limit", args.limit,
               "--shard", f"{i}/{len(devices)}", "--cache", str(cache), "--records",
               str(records), "--repeats", str(args.repeats), "--engines", args.engines]
        procs.append((dev, subprocess.Popen(cmd, env=dict(os.environ,
                                                           CUDA_VISIBLE_DEVICES=str(dev)))))
    failed = [f"GPU {dev} (exit status {p.returncode})" for dev, p in procs if p.wait() != 0]
    if failed:
        raise SystemExit("cold_planning: failed on " + ", ".join(failed))
    return time.perf_counter() - t0


def plot_overhead(runs_csv, points_csv, out, call="5"):
    """The figure of results/h200/cold_planning/: cold planning time per net and policy before
    (exhaustive ``all``: the benchmark time of Caffe's planning in the grid's points.csv; the
    powers of two: the first call of cold_runs.csv, before the core's changes) and after
    (pruned ``all`` and powerOfTwo on one and two GPUs: the newest call up to ``call`` that
    measured each), log scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(runs_csv, newline="") as f:
        runs = list(csv.DictReader(f))
    with open(points_csv, newline="") as f:
        points = [r for r in csv.DictReader(f) if r["policy"] == "all" and r["optimizer"] == "dp"
                  and int(r["limit_bytes"]) == 64 << 20]
    groups = [(net, pol) for net in ("alexnet", "resnet18") for pol in ("powerOfTwo", "all")]
    bars = {"before (1 GPU)": [], "after, 1 GPU": [], "after, 2 GPUs": []}
    for net, pol in groups:
        if pol == "all":
            before = next((float(r["bench_s"]) for r in points if r["net"] == net), None)
        else:
            before = next((float(r["cold_s"]) for r in runs if r["call"] == "1"
                           and (r["net"], r["policy"], r["gpus"]) == (net, pol, "1")), None)
        bars["before (1 GPU)"].append(before)
        for label, g in (("after, 1 GPU", "1"), ("after, 2 GPUs", "2")):
            after = [r for r in runs if int(r["call"]) <= int(call) and r["call"] != "1"
                     and (r["net"], r["policy"], r["gpus"]) == (net, pol, g)]
            bars[label].append(float(max(after, key=lambda r: int(r["call"]))["cold_s"])
                               if after else None)
    fig, ax = plt.subplots(figsize=(7.5, 4))
    width = 0.27
    for i, (label, vals) in enumerate(bars.items()):
        xs = [j + (i - 1) * width for j in range(len(groups))]
        ax.bar([x for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None],
               width, label=label)
        for x, v in zip(xs, vals):
            if v is not None:
                ax.text(x, v * 1.08, f"{v:.0f}" if v >= 10 else f"{v:.1f}", ha="center",
                        fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{n}\n{p}" for n, p in groups])
    ax.set_yscale("log")
    ax.set_ylabel("cold planning, s (empty cache)")
    ax.set_title("H200, batch 256, 64 MiB per kernel: before = exhaustive all / 3 Finds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet18", help="a shipped net (alexnet, resnet18)")
    ap.add_argument("--policy", default="all", choices=("undivided", "powerOfTwo", "all"))
    ap.add_argument("--search", default="pruned", choices=SEARCHES,
                    help="how policy all finds its sizes")
    ap.add_argument("--limit", default="64MiB", help="workspace per kernel (DP)")
    ap.add_argument("--repeats", type=int, default=1, help="cudnnFind calls per size "
                    "(median; default 1, as the runtime's)")
    ap.add_argument("--engines", default="legacy", choices=ENGINES,
                    help="families of choices to measure and plan (Note [Choices])")
    ap.add_argument("--devices", metavar="LIST", help="GPUs to spread the cold pass over, "
                    "e.g. 0,1 (default: the current GPU only)")
    ap.add_argument("--warm-passes", type=int, default=1, metavar="K",
                    help="warm passes after the cold one (warm_s: their median; default 1)")
    ap.add_argument("--csv", help="CSV file to append a row to (required but with --shard "
                    "and --figure)")
    ap.add_argument("--figure", nargs=3, metavar=("RUNS_CSV", "POINTS_CSV", "PNG"),
                    help="only draw the before/after figure (plot_overhead) and exit")
    # what each child of --devices runs: its share, into the parent's cache and records
    ap.add_argument("--shard", metavar="I/N", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--records", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from ucudnn.measure.bench import device_info
    from ucudnn.vocab import parse_size
    limit = parse_size(args.limit)
    if args.figure:
        plot_overhead(*args.figure)
        return 0
    if args.shard:
        if not (args.cache and args.records):
            ap.error("--shard needs --cache and --records")
        i, n = (int(x) for x in args.shard.split("/"))
        plan_net(args.net, args.policy, args.search, limit, Path(args.cache),
                 Path(args.records), shard=(i, n), repeats=args.repeats,
                 engines=args.engines)
        return 0
    if not args.csv:
        ap.error("--csv is required")
    if args.warm_passes < 1:
        ap.error(f"--warm-passes: must be >= 1, got {args.warm_passes}")
    devices = None
    if args.devices:
        from ucudnn.measure.for_plan import parse_devices
        from ucudnn.vocab import InputError
        try:
            devices = parse_devices(args.devices, "--devices")
        except InputError as e:
            ap.error(str(e))
    with tempfile.TemporaryDirectory(prefix="ucudnn-cold-") as d:
        cache, records = Path(d) / "bench.sqlite", Path(d) / "records.jsonl"
        common = dict(repeats=args.repeats, engines=args.engines)
        if devices:
            cold_s = cold_on_devices(args, devices, cache, records)
            sizes, parts = bench_totals(records)
            records.unlink()
        else:
            cold_s, sizes, predicted, _ = plan_net(
                args.net, args.policy, args.search, limit, cache, records, **common)
            _, parts = bench_totals(records)
        # (seconds, sizes benchmarked again, predicted ms, split) of each warm pass
        warm = [plan_net(args.net, args.policy, args.search, limit, cache, records, **common)
                for _ in range(args.warm_passes)]
    again = max(w[1] for w in warm)
    if again:       # a warm pass must be served by the cache alone
        raise SystemExit(f"cold_planning: a warm pass benchmarked {again} sizes again")
    if devices:     # the children planned: the first warm pass here predicts the net
        predicted = warm[0][2]
    warm.sort(key=lambda w: w[0])
    warm_s, _, _, warm_split = warm[len(warm) // 2]
    row = {"net": args.net, "policy": args.policy, "search": args.search, "limit_bytes": limit,
           "gpus": len(devices) if devices else 1, "repeats": args.repeats,
           "cold_s": round(cold_s, 2),
           "warm_s": round(warm_s, 3),
           "sizes_benchmarked": sizes, "predicted_ms": round(predicted, 3),
           **{f"{p}_s": round(v, 2) for p, v in parts.items()}, "engines": args.engines}
    new = not os.path.exists(args.csv)
    if not new:
        with open(args.csv, newline="") as f:
            header = next(csv.reader(f), None)
        if header != FIELDS:
            print(f"cold_planning: {args.csv}: its columns are not this script's (an older "
                  "version wrote it); give another --csv", file=sys.stderr)
            return 2
    with open(args.csv, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)
    print(f"{args.net} {args.policy} ({args.search}, {args.limit}, {args.engines}) on "
          f"{device_info().get('gpu')}: cold {cold_s:.1f} s ({sizes} sizes benchmarked), "
          f"warm {warm_s:.2f} s"
          + (f" (median of {len(warm)}: " + ", ".join(f"{w[0]:.2f}" for w in warm) + ")"
             if len(warm) > 1 else "")
          + f" (cache and search {warm_split['bench_s']:.2f} s, DP and plan "
          f"builds {warm_split['plan_s']:.2f} s), predicted {predicted:.2f} ms; benchmarks: "
          + ", ".join(f"{p} {v:.1f} s" for p, v in parts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
