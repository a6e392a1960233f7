#!/usr/bin/env python3
"""Figures of the H200 results, from saved results only.

    python scripts/plot_figures.py --results results/h200 -o results/h200/figures

Reads ``bench_core*.json`` (scripts/bench_core.py) and ``reproduce.json`` (``ucudnn
reproduce``) under --results, and the benchmark tables
shipped in the package (or --tables DIR with {net}_layers.csv and {net}_bench.csv).
"""
import argparse
import glob
import json
import os
import sys

from ucudnn.experiments import plots
from ucudnn.paths import shipped_dir
from ucudnn.plan.layers import read_layers
from ucudnn.plan.table import group_by_kernel, read_table


def tables(folder, net):
    if folder:
        return (read_layers(os.path.join(folder, f"{net}_layers.csv")),
                group_by_kernel(read_table(os.path.join(folder, f"{net}_bench.csv"))))
    return tables(shipped_dir(), net)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results/h200", help="folder with bench_core*.json")
    ap.add_argument("--tables", default=None, help="folder with {net}_layers.csv, {net}_bench.csv")
    ap.add_argument("-o", "--out", default="results/h200/figures")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    written = []

    def out(name):
        written.append(os.path.join(args.out, name))
        return written[-1]

    layers, benches = tables(args.tables, "alexnet")
    plots.kernel_algorithms(benches["conv2", "fwd"], "AlexNet conv2 forward (per group, H200)",
                            out("alexnet_conv2_fwd_algorithms.png"), op="fwd")
    plots.desirable_set_scatter(benches["conv2", "fwd"], 256,
                                "AlexNet conv2 forward, batch 256: desirable set",
                                out("alexnet_conv2_fwd_desirable_set.png"), op="fwd")
    for net in ("alexnet", "resnet18"):
        l, b = tables(args.tables, net)
        plots.ilp_vs_dp(l, b, f"{net}: ILP against per-layer DP (predicted)",
                        out(f"{net}_ilp_vs_dp.png"))
    runs = sorted(glob.glob(os.path.join(args.results, "bench_core*.json")))
    if runs:
        full = [p for p in runs if p.endswith("_all.json")] or runs
        results = plots.load_bench_core(full)
        plots.measured_vs_predicted(results, out("measured_vs_predicted.png"))
        for net in sorted({r["net"] for r in results["networks"]}):
            plots.stacked_layers(results, net, out(f"{net}_stacked_layers.png"))
    else:
        print(f"plot_figures: no bench_core*.json under {args.results}", file=sys.stderr)
    rep = os.path.join(args.results, "reproduce.json")
    if os.path.isfile(rep):
        with open(rep) as f:
            doc = json.load(f)
        for net in sorted({r["net"] for r in doc["points"].values()
                           if r.get("status") == "ok"}):
            plots.reproduce_stacked(doc, net, out(f"{net}_caffe_time_layers.png"))
            if any(plots.time_memory_points(doc, net)):
                plots.reproduce_time_vs_memory(doc, net, out(f"{net}_time_vs_memory.png"))
            if plots.layer_type_bars(doc, net, 64 << 20):
                plots.reproduce_layer_types(doc, net, out(f"{net}_layer_types.png"))
            if any(r.get("setting") == "ilp" and r.get("status") == "ok" and r["net"] == net
                   for r in doc["points"].values()):
                plots.reproduce_ilp_vs_dp(doc, net, out(f"{net}_caffe_ilp_vs_dp.png"))
        if any(r.get("kernels") for r in doc["points"].values() if r.get("status") == "ok"):
            plots.reproduce_overhead(doc, out("overhead.png"))
            plots.reproduce_measured_vs_predicted(doc, out("caffe_measured_vs_predicted.png"))
    else:
        print(f"plot_figures: no reproduce.json under {args.results}", file=sys.stderr)
    for w in written:
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
