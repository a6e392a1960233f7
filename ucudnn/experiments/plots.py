"""Figures from saved results only (benchmark tables, ``bench_core`` JSON, ``reproduce.json``). One figure per
function; each takes its inputs and an output path, uses the Agg backend and writes a
deterministic PNG (no timestamps in the metadata). Needs the ``plot`` extra (matplotlib).
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from ..plan.dp import desirable_set
from ..plan.network import LayerSpec, plan_network
from ..plan.table import KernelBench
from ..vocab import format_size
from .grid import is_unlimited, point_order
from .results import point_conv_ms

__all__ = ["kernel_algorithms", "desirable_set_scatter", "measured_vs_predicted",
           "stacked_layers", "ilp_vs_dp", "load_bench_core", "reproduce_stacked",
           "reproduce_overhead", "reproduce_measured_vs_predicted"]

OP_COLORS = {"fwd": "#4477aa", "bwd_data": "#ee6677", "bwd_filter": "#228833"}
LIMIT_LINES = (8 << 20, 64 << 20, 512 << 20)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: str) -> None:
    fig.tight_layout()
    fig.savefig(out, dpi=110, metadata={"Software": None})
    _plt().close(fig)


def load_bench_core(paths: Iterable[str]) -> dict:
    """Merge ``bench_core`` JSON files: {"networks": [...], "kernels": [...], "meta": [...]}."""
    merged = {"networks": [], "kernels": [], "meta": []}
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        merged["networks"] += d["networks"]
        merged["kernels"] += d["kernels"]
        merged["meta"].append(d["meta"])
    return merged


def kernel_algorithms(bench: KernelBench, title: str, out: str) -> None:
    """Time and workspace of every algorithm against micro-batch size (one kernel)."""
    plt = _plt()
    fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(10, 4))
    series: Dict[tuple, List[tuple]] = defaultdict(list)
    for b in sorted(bench):
        for p in bench[b]:
            series[p.algo, p.math].append((b, p.time_ms, p.ws_bytes))
    for (algo, math), pts in sorted(series.items()):
        label = f"algo {algo}" + (f" (math {math})" if math else "")
        xs = [b for b, _, _ in pts]
        ax_t.plot(xs, [t / b for b, t, _ in pts], marker="o", label=label)
        ax_w.plot(xs, [max(w, 1) / 2**20 for _, _, w in pts], marker="o", label=label)
    for ax in (ax_t, ax_w):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("micro-batch size")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_ylabel("time per sample (ms)")
    ax_w.set_ylabel("workspace (MiB)")
    for lim in LIMIT_LINES:
        ax_w.axhline(lim / 2**20, color="grey", ls="--", lw=0.8)
    ax_w.legend(fontsize=7)
    fig.suptitle(title)
    _save(fig, out)


def desirable_set_scatter(bench: KernelBench, n: int, title: str, out: str,
                          policy: str = "powerOfTwo") -> None:
    """The desirable set (Pareto front of plans) as a time-workspace scatter, with the undivided
    algorithms and the 8/64/512 MiB limits."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    front = desirable_set(bench, n, policy, strict=False)
    ax.step([max(p.ws_bytes, 1) / 2**20 for p in front], [p.time_ms for p in front],
            where="post", color="#4477aa", lw=1)
    ax.scatter([max(p.ws_bytes, 1) / 2**20 for p in front], [p.time_ms for p in front],
               color="#4477aa", zorder=3, label=f"desirable set ({policy})")
    whole = bench.get(n, [])
    ax.scatter([max(p.ws_bytes, 1) / 2**20 for p in whole], [p.time_ms for p in whole],
               marker="x", color="#ee6677", zorder=3, label="undivided algorithms")
    for lim in LIMIT_LINES:
        ax.axvline(lim / 2**20, color="grey", ls="--", lw=0.8)
        ax.text(lim / 2**20, ax.get_ylim()[1], format_size(lim), fontsize=7, ha="right",
                va="top", rotation=90)
    ax.set_xscale("log")
    ax.set_xlabel("workspace (MiB)")
    ax.set_ylabel("time (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    _save(fig, out)


def measured_vs_predicted(results: dict, out: str) -> None:
    """Network convolution time: measured against the planner's prediction."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    marks = {"undivided": "s", "powerOfTwo": "o", "all": "^"}
    lo, hi = float("inf"), 0.0
    for r in results["networks"]:
        ax.scatter(r["predicted_ms"], r["measured_ms"], marker=marks.get(r["policy"], "o"),
                   color="#4477aa" if r["net"] == "alexnet" else "#ee6677")
        lo = min(lo, r["predicted_ms"], r["measured_ms"])
        hi = max(hi, r["predicted_ms"], r["measured_ms"])
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.plot([lo, hi], [1.1 * lo, 1.1 * hi], color="grey", lw=0.5, ls=":")
    ax.plot([lo, hi], [0.9 * lo, 0.9 * hi], color="grey", lw=0.5, ls=":")
    for name, m in marks.items():
        ax.scatter([], [], marker=m, color="black", label=name)
    for net, c in (("alexnet", "#4477aa"), ("resnet18", "#ee6677")):
        ax.scatter([], [], marker="o", color=c, label=net)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted (ms)")
    ax.set_ylabel("measured (ms)")
    ax.set_title("convolution time per iteration (±10 % dotted)")
    ax.legend(fontsize=8)
    _save(fig, out)


def stacked_layers(results: dict, net: str, out: str) -> None:
    """Per (limit, policy): per-layer measured time stacked by op, speedup over undivided."""
    plt = _plt()
    rows = [k for k in results["kernels"] if k["net"] == net]
    configs = sorted({(k["limit"], k["policy"]) for k in rows},
                     key=lambda c: (c[0], ["undivided", "powerOfTwo", "all"].index(c[1])
                                    if c[1] in ("undivided", "powerOfTwo", "all") else 9))
    layers = list(dict.fromkeys(k["layer"] for k in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(configs)), 4.5))
    totals = {}
    for x, cfg in enumerate(configs):
        bottom = 0.0
        for op in ("fwd", "bwd_data", "bwd_filter"):
            for li, layer in enumerate(layers):
                t = sum(k["count"] * k["measured_ms"] for k in rows
                        if (k["limit"], k["policy"]) == cfg and k["layer"] == layer
                        and k["op"] == op)
                if t:
                    ax.bar(x, t, bottom=bottom, color=OP_COLORS[op], edgecolor="white",
                           lw=0.5, alpha=0.55 + 0.45 * (li % 2))
                    bottom += t
        totals[cfg] = bottom
    for x, (limit, policy) in enumerate(configs):
        base = totals.get((limit, "undivided"))
        if base:
            ax.text(x, totals[limit, policy], f"{base / totals[limit, policy]:.2f}x",
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([f"{format_size(l)}\n{p}" for l, p in configs], fontsize=7)
    ax.set_ylabel("convolution time per iteration (ms)")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=c, label=op) for op, c in OP_COLORS.items()], fontsize=8)
    ax.set_title(f"{net}: layers stacked per op (measured), speedup over undivided")
    _save(fig, out)


def ilp_vs_dp(layers: Sequence[LayerSpec], benches: Mapping, title: str, out: str,
              limits: Sequence[int] = LIMIT_LINES, policy: str = "powerOfTwo") -> None:
    """Predicted network time: undivided, per-layer DP and ILP at the same total memory; and
    the workspace each kernel got from the ILP at the middle limit."""
    plt = _plt()
    fig, (ax, ax_w) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.27
    for i, lim in enumerate(limits):
        dp = plan_network(layers, benches, policy=policy, limit=lim, strict=False)
        ilp = plan_network(layers, benches, policy=policy, limit=lim, optimizer="ilp",
                           strict=False)
        for j, (val, c, name) in enumerate(((dp.baseline_time_ms, "#bbbbbb", "undivided"),
                                            (dp.time_ms, "#4477aa", "DP per layer"),
                                            (ilp.time_ms, "#ee6677", "ILP, same total"))):
            ax.bar(i + (j - 1) * width, val, width, color=c, label=name if i == 0 else None)
        if lim == limits[len(limits) // 2]:
            shown = ilp
    ax.set_xticks(range(len(limits)))
    ax.set_xticklabels([format_size(l) + " / kernel" for l in limits])
    ax.set_ylabel("predicted convolution time (ms)")
    ax.legend(fontsize=8)
    names = [k.name for k in shown.kernels]
    ax_w.bar(range(len(names)), [k.plan.ws_bytes / 2**20 for k in shown.kernels],
             color=[OP_COLORS[k.op] for k in shown.kernels])
    ax_w.axhline(shown.budget / len(names) / 2**20, color="grey", ls="--", lw=0.8)
    ax_w.set_xticks(range(len(names)))
    ax_w.set_xticklabels(names, rotation=90, fontsize=6)
    ax_w.set_ylabel(f"ILP workspace (MiB), budget {format_size(shown.budget)}")
    fig.suptitle(title)
    _save(fig, out)


# ---------------------------------------------------------------------------------------------
# `ucudnn reproduce` results (reproduce.json): whole Caffe iterations

def _measured(doc: dict, net: str) -> List[dict]:
    """The net's measured points, ordered: stock, unlimited, then by limit and setting."""
    pts = [r for r in doc["points"].values() if r.get("net") == net and r.get("status") == "ok"]
    return sorted(pts, key=point_order)


def _conv_ms(r: dict) -> Optional[float]:
    """A point's measured convolution-layer time (:func:`.results.point_conv_ms`)."""
    return point_conv_ms(r)


def _label(r: dict) -> str:
    lim = r.get("limit_bytes")
    if r["setting"] in ("caffe", "unlimited") or lim is None or is_unlimited(lim):
        return "stock Caffe" if r["setting"] == "caffe" else "unlimited"
    return f"{format_size(lim)}\n{r['setting']}"


def reproduce_ilp_vs_dp(doc: dict, net: str, out: str, policy: str = "powerOfTwo") -> None:
    """Measured in Caffe: convolution-layer time of undivided, the per-layer DP and the ILP
    (same policy, budget limit x kernels) per limit, with the processes' spread; and the
    workspace each kernel got from the DP and from the ILP at the middle limit."""
    plt = _plt()
    pts = {(r["setting"], r.get("limit_bytes")): r for r in _measured(doc, net)}
    limits = sorted({lim for (s, lim) in pts if s == "ilp" and (policy, lim) in pts})
    if not limits:
        raise ValueError(f"no measured ILP and {policy} points for {net!r} in the results")
    fig, (ax, ax_w) = plt.subplots(1, 2, figsize=(12, 4.4))
    width = 0.27
    series = (("undivided", "#bbbbbb", "undivided"), (policy, "#4477aa", f"DP per layer ({policy})"),
              ("ilp", "#ee6677", "ILP, same total"))
    for i, lim in enumerate(limits):
        for j, (setting, color, name) in enumerate(series):
            r = pts.get((setting, lim))
            value = _conv_ms(r) if r else None
            if value is None:       # stock-like undivided point without kernels: no bar
                continue
            convs = [x["conv_ms"] for x in r.get("repeats") or [] if x.get("conv_ms") is not None]
            err = ([[value - min(convs)], [max(convs) - value]] if len(convs) > 1 else None)
            ax.bar(i + (j - 1) * width, value, width, color=color, yerr=err, capsize=2,
                   label=name if i == 0 else None)
    ax.set_xticks(range(len(limits)))
    ax.set_xticklabels([format_size(l) + " / kernel" for l in limits])
    ax.set_ylabel("convolution layers, measured (ms / iteration)")
    ax.legend(fontsize=8)
    lim = limits[len(limits) // 2]
    ilp, dp = pts[("ilp", lim)]["kernels"], pts[(policy, lim)]["kernels"]
    names = list(ilp)
    x = range(len(names))
    ax_w.bar([i - 0.2 for i in x], [dp.get(n, {}).get("ws_bytes", 0) / 2**20 for n in names],
             0.4, color="#4477aa", label=f"DP ({policy})")
    budget = pts[("ilp", lim)].get("ilp_budget_bytes")
    ax_w.bar([i + 0.2 for i in x], [ilp[n]["ws_bytes"] / 2**20 for n in names], 0.4,
             color="#ee6677",
             label="ILP" + (f" (budget {format_size(budget)} in all)" if budget else ""))
    ax_w.axhline(lim / 2**20, color="grey", ls="--", lw=0.8)
    ax_w.set_xticks(list(x))
    ax_w.set_xticklabels(names, rotation=90, fontsize=6)
    ax_w.set_ylabel("workspace per kernel (MiB)")
    ax_w.legend(fontsize=8)
    fig.suptitle(f"{net}: ILP against per-layer DP in caffe time (limit line: "
                 f"{format_size(lim)} per kernel)")
    _save(fig, out)


def reproduce_stacked(doc: dict, net: str, out: str) -> None:
    """Per point: per-layer forward and backward time of one Caffe iteration (convolution
    layers in colour, the rest grey), speedup over undivided at the same limit on top."""
    plt = _plt()
    pts = _measured(doc, net)
    if not pts:
        raise ValueError(f"no measured points for {net!r} in the results")
    # stock Caffe has no ucudnn kernels: its convolution layers are the other points' ones
    net_convs = {k.split("/")[0] for r in pts for k in (r.get("kernels") or {})}
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(pts)), 4.5))
    for x, r in enumerate(pts):
        convs = set(r.get("conv_layers") or net_convs)
        bottom = 0.0
        for part, color, grey in (("forward", "#4477aa", "#bbbbbb"),
                                  ("backward", "#ee6677", "#dddddd")):
            # one segment per convolution layer, the other layers as one block
            for i, layer in enumerate(l for l in r["layers"] if l["name"] in convs):
                t = layer.get(part, 0.0)
                ax.bar(x, t, bottom=bottom, color=color, edgecolor="white", lw=0.3,
                       alpha=0.65 + 0.35 * (i % 2))
                bottom += t
            rest = sum(l.get(part, 0.0) for l in r["layers"] if l["name"] not in convs)
            ax.bar(x, rest, bottom=bottom, color=grey, edgecolor="white", lw=0.3)
            bottom += rest
        base = next((b for b in pts if b["setting"] == "undivided"
                     and b.get("limit_bytes") == r.get("limit_bytes")), None)
        if base and r is not base and r.get("limit_bytes"):
            ax.text(x, bottom, f"{base['median_ms'] / r['median_ms']:.2f}x", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(range(len(pts)))
    ax.set_xticklabels([_label(r) for r in pts], fontsize=7)
    ax.set_ylabel("time per iteration (ms, sum of layers)")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color="#4477aa", label="conv forward (per layer)"),
                       Patch(color="#bbbbbb", label="other layers forward"),
                       Patch(color="#ee6677", label="conv backward (per layer)"),
                       Patch(color="#dddddd", label="other layers backward")], fontsize=8)
    ax.set_title(f"{net}: caffe time per layer; speedup (median) over undivided")
    _save(fig, out)


def reproduce_overhead(doc: dict, out: str) -> None:
    """Time spent before the first iteration, one panel per network: benchmarking (or reading
    the benchmark cache), planning (DP) and solving the ILP, per point, on a log scale (a cold
    benchmark of policy ``all`` takes minutes, a cache read a second)."""
    plt = _plt()
    nets = sorted({r.get("net") for r in doc["points"].values()})
    per_net = [(net, [r for r in _measured(doc, net) if r.get("kernels")]) for net in nets]
    per_net = [(net, pts) for net, pts in per_net if pts]
    if not per_net:
        raise ValueError("no measured ucudnn points in the results")
    width = max(6.0, 0.45 * max(len(pts) for _, pts in per_net))
    fig, axes = plt.subplots(len(per_net), 1, figsize=(width, 3.2 * len(per_net)), squeeze=False)
    parts = (("bench_s", "benchmark (or cache read)", "#4477aa"),
             ("plan_s", "DP planning", "#228833"), ("ilp_solve_s", "ILP solve", "#ccbb44"))
    for ax, (net, pts) in zip(axes[:, 0], per_net):
        for j, (key, label, color) in enumerate(parts):
            xs = [x + (j - 1) * 0.27 for x in range(len(pts))]
            ys = [r.get(key) or 0.0 for r in pts]
            ax.bar(xs, [y if y > 0 else float("nan") for y in ys], width=0.27, color=color,
                   label=label)
        ax.set_yscale("log")
        ax.set_xticks(range(len(pts)))
        ax.set_xticklabels([_label(r).replace("\n", " ") for r in pts], fontsize=7,
                           rotation=30, ha="right")
        ax.set_ylabel(f"{net}: seconds")
        ax.grid(axis="y", lw=0.3)
    axes[0, 0].legend(fontsize=7)
    axes[0, 0].set_title("ucudnn overhead per point (all kernels of the net, first process)")
    _save(fig, out)


def reproduce_measured_vs_predicted(doc: dict, out: str) -> None:
    """Convolution layers' measured time (Caffe's per-layer timer, forward + backward) against
    the planner's prediction for the same plans."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    xs, ys = [], []
    colors = {"alexnet": "#4477aa", "resnet18": "#ee6677", "cifar10": "#228833"}
    labelled = set()
    for r in doc["points"].values():
        if r.get("status") != "ok" or not r.get("predicted_conv_ms"):
            continue
        measured = _conv_ms(r)
        xs.append(r["predicted_conv_ms"])
        ys.append(measured)
        ax.scatter(r["predicted_conv_ms"], measured, color=colors.get(r["net"], "#999999"),
                   label=r["net"] if r["net"] not in labelled else None, s=18)
        labelled.add(r["net"])
    if not xs:
        raise ValueError("no measured ucudnn points in the results")
    lo, hi = min(xs + ys), max(xs + ys)
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.set_xlabel("predicted convolution time (ms)")
    ax.set_ylabel("measured convolution layers (ms, incl. bias)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("caffe time: convolutions, measured vs predicted")
    _save(fig, out)
