#!/usr/bin/env python3
"""The paper's figures, from saved results only, into the folder -o names.

    .venv/bin/python scripts/plot_figures.py RESULTS -o FIGDIR [--tables DIR]

RESULTS is a folder of results: ``reproduce.json`` (``ucudnn reproduce --out RESULTS``,
measured with the patched Caffe on a GPU or predicted without one), ``bench_core*.json``
(scripts/bench_core.py) and ``deepbench.json`` (scripts/bench_deepbench.py), each where there
is one. One kernel's algorithms, its desirable set and the ILP against per-layer DP come from
the benchmark tables shipped in the package (or --tables DIR with {net}_layers.csv and
{net}_bench.csv). The figures of a predicted grid say so in their titles; every PNG names where
its numbers come from in its Description metadata. The command prints one line per figure
written (its path and where its numbers come from) and one line per kind of figure not made
(which files, and why). docs/reproduce.md maps the paper's figures to these files.
"""
import argparse
import glob
import json
import os
import sys

from ucudnn.experiments import plots
from ucudnn.experiments.results import load_results
from ucudnn.paths import shipped_dir
from ucudnn.plan.layers import read_layers
from ucudnn.plan.table import group_by_kernel, read_table
from ucudnn.vocab import InputError

GPU_GRID = ("`ucudnn reproduce` on a GPU host with the patched Caffe measures them "
            "(docs/reproduce.md)")


class Figures:
    """The figures of one invocation: written (path, where its numbers come from) and not
    made (files, why)."""

    def __init__(self, out):
        self.out, self.written, self.missing = out, [], []

    def draw(self, name, source, draw):
        """``draw(path)`` writes the figure ``name``; ``source``: where its numbers come from."""
        path = os.path.join(self.out, name)
        draw(path)
        self.written.append((path, source))
        print(f"{path}  ({source})", flush=True)

    def skip(self, names, why):
        if names:
            self.missing.append(names)
            print(f"plot_figures: not made: {', '.join(names)}: {why}", file=sys.stderr,
                  flush=True)


def tables(folder, net):
    if folder:
        return (read_layers(os.path.join(folder, f"{net}_layers.csv")),
                group_by_kernel(read_table(os.path.join(folder, f"{net}_bench.csv"))))
    return tables(shipped_dir(), net)


def from_tables(figs, folder):
    """One kernel's algorithms and desirable set, the ILP against the DP: from the tables."""
    shipped = folder is None
    measured = plots.H200_TABLES if shipped else f"the benchmark tables in {folder}"
    predicted = plots.PREDICTED if shipped else f"predicted from the tables in {folder}"
    _, benches = tables(folder, "alexnet")
    conv2 = benches["conv2", "fwd"]
    figs.draw("alexnet_conv2_fwd_algorithms.png", measured, lambda p: plots.kernel_algorithms(
        conv2, "AlexNet conv2 forward (per group, H200)", p, op="fwd", source=measured))
    figs.draw("alexnet_conv2_fwd_desirable_set.png", measured,
              lambda p: plots.desirable_set_scatter(
                  conv2, 256, "AlexNet conv2 forward, batch 256: desirable set", p, op="fwd",
                  source=measured))
    for net in ("alexnet", "resnet18"):
        layers, b = tables(folder, net)
        figs.draw(f"{net}_ilp_vs_dp.png", predicted, lambda p: plots.ilp_vs_dp(
            layers, b, f"{net}: ILP against per-layer DP", p, source=predicted))


def from_bench_core(figs, results):
    runs = sorted(glob.glob(os.path.join(results, "bench_core*.json")))
    if not runs:
        figs.skip(["measured_vs_predicted.png", "NET_stacked_layers.png"],
                  "no bench_core*.json in RESULTS (scripts/bench_core.py measures the nets' "
                  "kernels on a GPU)")
        return
    full = [p for p in runs if p.endswith("_all.json")] or runs
    doc = plots.load_bench_core(full)
    figs.draw("measured_vs_predicted.png", plots.MEASURED,
              lambda p: plots.measured_vs_predicted(doc, p))
    for net in sorted({r["net"] for r in doc["networks"]}):
        figs.draw(f"{net}_stacked_layers.png", plots.MEASURED,
                  lambda p: plots.stacked_layers(doc, net, p))


def predicted_grid(figs, doc, nets):
    """A grid predicted without a GPU: the figures its points make, the others named."""
    for net in nets:
        rows = plots.predicted_kernel_rows(doc, net)
        if rows["kernels"]:
            figs.draw(f"{net}_stacked_layers_predicted.png", plots.PREDICTED,
                      lambda p: plots.stacked_layers(rows, net, p, value="predicted_ms",
                                                     source=plots.PREDICTED))
        figs.draw(f"{net}_time_vs_memory_predicted.png", plots.PREDICTED,
                  lambda p: plots.reproduce_time_vs_memory(doc, net, p))
    figs.skip([f"{net}_{kind}.png" for net in nets
               for kind in ("caffe_time_layers", "caffe_ilp_vs_dp", "layer_types")]
              + ["overhead.png", "caffe_measured_vs_predicted.png"],
              "need measured points, and RESULTS/reproduce.json holds predicted ones (no GPU "
              "run): " + GPU_GRID)


def measured_grid(figs, doc, nets):
    """A grid measured with Caffe: its figures, and those its points do not make, named."""
    no_memory, no_types, no_ilp = [], [], []
    for net in nets:
        figs.draw(f"{net}_caffe_time_layers.png", plots.MEASURED,
                  lambda p: plots.reproduce_stacked(doc, net, p))
        if any(plots.time_memory_points(doc, net)):
            figs.draw(f"{net}_time_vs_memory.png", plots.MEASURED,
                      lambda p: plots.reproduce_time_vs_memory(doc, net, p))
        else:
            no_memory.append(f"{net}_time_vs_memory.png")
        if plots.layer_type_bars(doc, net, 64 << 20):
            figs.draw(f"{net}_layer_types.png", plots.MEASURED,
                      lambda p: plots.reproduce_layer_types(doc, net, p))
        else:
            no_types.append(f"{net}_layer_types.png")
        if any(r.get("setting") == "ilp" and r.get("status") == "ok" and r["net"] == net
               for r in doc["points"].values()):
            figs.draw(f"{net}_caffe_ilp_vs_dp.png", plots.MEASURED,
                      lambda p: plots.reproduce_ilp_vs_dp(doc, net, p))
        else:
            no_ilp.append(f"{net}_caffe_ilp_vs_dp.png")
    figs.skip(no_memory, "no measured points with their memory")
    figs.skip(no_types, "no point at 64 MiB with times by kind of layer")
    figs.skip(no_ilp, "no measured ILP points")
    if any(r.get("kernels") for r in doc["points"].values() if r.get("status") == "ok"):
        figs.draw("overhead.png", plots.MEASURED, lambda p: plots.reproduce_overhead(doc, p))
        figs.draw("caffe_measured_vs_predicted.png", plots.MEASURED,
                  lambda p: plots.reproduce_measured_vs_predicted(doc, p))
    else:
        figs.skip(["overhead.png", "caffe_measured_vs_predicted.png"],
                  "no measured point records its plans (kernels)")


def from_reproduce(figs, results):
    path = os.path.join(results, "reproduce.json")
    if not os.path.isfile(path):
        figs.skip(["NET_stacked_layers_predicted.png", "NET_time_vs_memory_predicted.png"],
                  "no reproduce.json in RESULTS (`ucudnn reproduce --out RESULTS` writes one, "
                  "predicted without a GPU)")
        return
    doc = load_results(path)
    status = plots.grid_status(doc)
    nets = sorted({r["net"] for r in doc["points"].values() if r.get("status") == status})
    if status == "ok":
        measured_grid(figs, doc, nets)
    else:
        predicted_grid(figs, doc, nets)


def from_deepbench(figs, results):
    path = os.path.join(results, "deepbench.json")
    if not os.path.isfile(path):
        figs.skip(["deepbench_speedups.png"], "no deepbench.json in RESULTS "
                  "(scripts/bench_deepbench.py measures DeepBench's layers on a GPU)")
        return
    figs.draw("deepbench_speedups.png", plots.MEASURED,
              lambda p: plots.deepbench_speedups(path, p))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", metavar="RESULTS",
                    help="folder with reproduce.json, bench_core*.json, deepbench.json")
    ap.add_argument("--results", dest="results_option", metavar="RESULTS",
                    help="the same as RESULTS")
    ap.add_argument("--tables", default=None, help="folder with {net}_layers.csv, {net}_bench.csv "
                    "(default: the tables shipped in the package)")
    ap.add_argument("-o", "--out", required=True, metavar="FIGDIR",
                    help="folder the figures are written to (made if missing)")
    args = ap.parse_args(argv)
    results = args.results or args.results_option
    if not results or (args.results and args.results_option):
        ap.error("name the results folder once: RESULTS or --results RESULTS")
    if not os.path.isdir(results):
        ap.error(f"RESULTS: no folder {results}")
    os.makedirs(args.out, exist_ok=True)
    figs = Figures(args.out)
    try:
        from_tables(figs, args.tables)
        from_bench_core(figs, results)
        from_reproduce(figs, results)
        from_deepbench(figs, results)
    except (InputError, OSError, json.JSONDecodeError) as e:
        print(f"plot_figures: error: {e}", file=sys.stderr)
        return 2
    predicted = sum(1 for _, source in figs.written if source == plots.PREDICTED)
    print(f"plot_figures: {len(figs.written)} figures in {args.out}"
          + (f", {predicted} of them {plots.PREDICTED}" if predicted else "")
          + (f"; {sum(map(len, figs.missing))} not made (said above)" if figs.missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
