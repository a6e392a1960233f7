"""Figures from saved results only (benchmark tables, ``bench_core`` JSON, ``reproduce.json``). One figure per
function; each takes its inputs and an output path, uses the Agg backend and writes a
deterministic PNG (no timestamps in the metadata), and returns the (closed) figure so that
tests can check what was drawn. Each PNG says where its numbers come from in its
``Description`` metadata (:data:`MEASURED`, :data:`H200_TABLES`, or
:data:`~ucudnn.experiments.predict.PREDICTED` for the planner's predictions), and a figure of
predicted numbers says so in its title. A panel without data is not drawn. Workspace axes are symlog with a real ``0`` tick: a kernel
with no workspace is drawn at 0, not at a tiny stand-in on a log axis. Needs the ``plot``
extra (matplotlib).
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from ..measure import shipped
from ..plan.dp import desirable_set
from ..plan.layers import LayerSpec
from ..plan.network import plan_network
from ..plan.settings import PlanSettings
from ..plan.table import KernelBench
from ..vocab import algo_name, format_size, parse_size
from . import deepbench
from .grid import LIMITS, POLICIES, bn_engine, is_unlimited, point_order
from .predict import PREDICTED
from .results import point_conv_ms, stock_workspace

__all__ = ["kernel_algorithms", "desirable_set_scatter", "measured_vs_predicted",
           "stacked_layers", "ilp_vs_dp", "load_bench_core", "reproduce_stacked",
           "reproduce_overhead", "reproduce_measured_vs_predicted", "predicted_kernel_rows",
           "grid_status", "deepbench_speedups", "engines_summary", "MEASURED", "H200_TABLES",
           "PREDICTED"]

#: The ``Description`` of a figure of measured numbers.
MEASURED = "measured"
#: The ``Description`` of a figure drawn from the benchmark tables shipped with the package.
H200_TABLES = ("the H200 benchmark tables shipped with ucudnn (cuDNN's find, measured on an "
               "H200, not on this machine)")

OP_COLORS = {"fwd": "#4477aa", "bwd_data": "#ee6677", "bwd_filter": "#228833"}
LIMIT_LINES = tuple(parse_size(x) for x in LIMITS)
#: Workspace axes are symlog in MiB: linear below this, so that a zero workspace is drawn at 0
#: (its own "0" tick) and not faked at a tiny positive value on a log axis.
WS_LINTHRESH_MIB = 1.0
ALGO_COLORS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#ee7733",
               "#777777")
ALGO_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: str, tight: bool = True, source: str = MEASURED):
    """Write ``fig`` to ``out``: no software version or time in the metadata (the same bytes
    every time), ``source`` as its ``Description``."""
    if tight:
        fig.tight_layout()
    fig.savefig(out, dpi=110, metadata={"Software": None, "Description": source})
    _plt().close(fig)
    return fig


def _titled(title: str, source: str, policies: bool = False) -> str:
    """``title``, and for predicted numbers a line saying so; ``policies``: and a line saying
    that policy ``all`` plans as powerOfTwo there (the shipped data holds power-of-two sizes
    only)."""
    if not source.startswith("predicted"):
        return title
    shipped_data = source == PREDICTED
    return (f"{title}\n" + ("predicted from the shipped H200 benchmark data, not measured"
                            if shipped_data else source)
            + ("\n(policy all plans as powerOfTwo: the data has power-of-two sizes only)"
               if policies and shipped_data else ""))


def _mib(ws_bytes: int) -> float:
    """Workspace in MiB for a symlog axis: zero stays zero."""
    return ws_bytes / 2**20


def _ws_axis(ax, axis: str = "y") -> None:
    """Symlog workspace axis (MiB): 0, then 1, 10, 100 ... MiB; zero is a real 0 tick."""
    from matplotlib.ticker import FixedLocator, FuncFormatter
    setter = ax.set_yscale if axis == "y" else ax.set_xscale
    setter("symlog", linthresh=WS_LINTHRESH_MIB, linscale=0.5)
    ticks = [0.0] + [10.0 ** k for k in range(0, 6)]
    fmt = FuncFormatter(lambda v, _: "0" if v == 0 else f"{v:g}")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(fmt)


def _label_segments(ax, segments, min_frac: float = 0.03) -> None:
    """Name the stacked segments tall enough to hold a label: ``segments`` holds
    (x, bottom, height, name); the others stay unnamed (the legend says how they are stacked)."""
    top = ax.get_ylim()[1]
    for x, bottom, h, name in segments:
        if h >= min_frac * top:
            ax.text(x, bottom + h / 2, name, ha="center", va="center", fontsize=6,
                    color="white")


def _algo_label(op: Optional[str], algo: int, math: int = 0) -> str:
    name = algo_name(op, algo) if op else f"algo {algo}"
    return name + (f" (math {math})" if math else "")


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


def kernel_algorithms(bench: KernelBench, title: str, out: str, op: Optional[str] = None,
                      source: str = H200_TABLES):
    """Time and workspace of every algorithm against micro-batch size (one kernel). ``op``
    names the algorithms (cuDNN's names); the workspace axis is symlog, zero drawn at 0."""
    plt = _plt()
    fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(10.5, 4.8))
    series: Dict[tuple, List[tuple]] = defaultdict(list)
    for b in sorted(bench):
        for p in bench[b]:
            series[p.algo, p.math].append((b, p.time_ms, p.ws_bytes))
    for (algo, math), pts in sorted(series.items()):
        style = dict(marker=ALGO_MARKERS[algo % 8], ms=5, color=ALGO_COLORS[algo % 8],
                     ls="--" if math else "-", label=_algo_label(op, algo, math))
        xs = [b for b, _, _ in pts]
        ax_t.plot(xs, [t / b for b, t, _ in pts], **style)
        ax_w.plot(xs, [_mib(w) for _, _, w in pts], **style)
    for ax in (ax_t, ax_w):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("micro-batch size")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_yscale("log")
    _ws_axis(ax_w)
    ax_t.set_ylabel("time per sample (ms)")
    ax_w.set_ylabel("workspace (MiB, symlog: 0 = none)")
    top = max([_mib(w) for pts in series.values() for _, _, w in pts] + [1.0])
    ax_w.set_ylim(-0.1, top * 4)
    from matplotlib.transforms import blended_transform_factory
    tr = blended_transform_factory(ax_w.transAxes, ax_w.transData)
    for lim in LIMIT_LINES:
        ax_w.axhline(_mib(lim), color="grey", ls="--", lw=0.8)
        ax_w.text(0.01, _mib(lim), f"{format_size(lim)} limit", transform=tr, fontsize=7,
                  color="dimgrey", ha="left", va="bottom")
    handles, labels = ax_t.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8,
               frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06 * ((len(labels) + 3) // 4), 1, 1))
    return _save(fig, out, tight=False, source=source)


def desirable_set_scatter(bench: KernelBench, n: int, title: str, out: str,
                          policy: str = "powerOfTwo", op: Optional[str] = None,
                          source: str = H200_TABLES):
    """The desirable set (Pareto front of plans) as a time-workspace scatter, with the undivided
    algorithms (named by cuDNN when ``op`` is given) and the 8/64/512 MiB limits. The workspace
    axis is symlog: a plan with no workspace is drawn at 0."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.8))
    front = desirable_set(bench, n, policy, strict=False)
    ax.step([_mib(p.ws_bytes) for p in front], [p.time_ms for p in front],
            where="post", color="black", lw=0.8)
    ax.scatter([_mib(p.ws_bytes) for p in front], [p.time_ms for p in front],
               color="black", s=18, zorder=3, label=f"desirable set ({policy})")
    whole = sorted(bench.get(n, []), key=lambda p: (p.algo, p.math))
    for p in whole:
        ax.scatter([_mib(p.ws_bytes)], [p.time_ms], marker=ALGO_MARKERS[p.algo % 8],
                   facecolors="none", edgecolors=ALGO_COLORS[p.algo % 8], s=60, lw=1.3,
                   zorder=4, label=f"undivided: {_algo_label(op, p.algo, p.math)}")
    _ws_axis(ax, "x")
    top = max([_mib(p.ws_bytes) for p in list(front) + whole] + [_mib(LIMIT_LINES[-1])])
    ax.set_xlim(-0.1, top * 3)
    from matplotlib.transforms import blended_transform_factory
    tr = blended_transform_factory(ax.transData, ax.transAxes)
    for lim in LIMIT_LINES:
        ax.axvline(_mib(lim), color="grey", ls="--", lw=0.8)
        ax.text(_mib(lim), 1.01, f"{format_size(lim)}\nlimit", transform=tr, fontsize=7,
                ha="center", va="bottom", color="dimgrey")
    ax.set_xlabel("workspace (MiB, symlog: 0 = no workspace)")
    ax.set_ylabel("time (ms)")
    ax.set_title(title, pad=24)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, out, source=source)


def measured_vs_predicted(results: dict, out: str):
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
    return _save(fig, out)


def stacked_layers(results: dict, net: str, out: str, value: str = "measured_ms",
                   source: str = MEASURED):
    """Per (limit, policy): per-layer time stacked by op, speedup over undivided. ``value``:
    the kernels' field drawn, ``measured_ms`` (``bench_core``) or ``predicted_ms``
    (:func:`predicted_kernel_rows`, ``source`` :data:`PREDICTED`)."""
    plt = _plt()
    rows = [k for k in results["kernels"] if k["net"] == net]
    configs = sorted({(k["limit"], k["policy"]) for k in rows},
                     key=lambda c: (c[0], ["undivided", "powerOfTwo", "all"].index(c[1])
                                    if c[1] in ("undivided", "powerOfTwo", "all") else 9))
    layers = list(dict.fromkeys(k["layer"] for k in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(configs)), 4.5))
    totals = {}
    segments = []
    for x, cfg in enumerate(configs):
        bottom = 0.0
        for op in ("fwd", "bwd_data", "bwd_filter"):
            for li, layer in enumerate(layers):
                t = sum(k["count"] * k[value] for k in rows
                        if (k["limit"], k["policy"]) == cfg and k["layer"] == layer
                        and k["op"] == op)
                if t:
                    ax.bar(x, t, bottom=bottom, color=OP_COLORS[op], edgecolor="white",
                           lw=0.5, alpha=0.55 + 0.45 * (li % 2))
                    segments.append((x, bottom, t, layer))
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
    ax.set_ylim(0, max(totals.values(), default=1.0) * 1.08)
    _label_segments(ax, segments)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=c, label=op) for op, c in OP_COLORS.items()]
              + [Patch(color="none", label=f"one segment per layer, {layers[0]}..{layers[-1]}\n"
                       "bottom-up in each op, shades alternate")],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    basis = "measured" if source == MEASURED else "predicted"
    ax.set_title(_titled(f"{net}: layers stacked per op ({basis}), speedup over undivided",
                         source, policies=True), fontsize=10)
    return _save(fig, out, source=source)


def _kernel_rows(n: int):
    """Figure with the time panel top left and a tall horizontal-bar panel on the right, one
    row per kernel (names readable, not rotated); returns (fig, ax_time, ax_ws)."""
    plt = _plt()
    height = max(4.6, 0.17 * n + 1.4)
    fig = plt.figure(figsize=(12, height))
    gs = fig.add_gridspec(2, 2, height_ratios=[4.0, max(height - 4.0, 0.3)],
                          width_ratios=[1, 1.1])
    return fig, fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[:, 1])


def _small_marks(ax, ys, ws_bytes, color, top_bytes):
    """Write the size next to workspace bars too short to see (zero, or under 1 % of the
    largest bar): ``0`` or ``1.0KiB``, so that an empty row is not mistaken for missing data."""
    for y, v in zip(ys, ws_bytes):
        if v < 0.01 * top_bytes:
            ax.text(0.005 * top_bytes / 2**20, y, "0" if v == 0 else format_size(v),
                    color=color, fontsize=7, ha="left", va="center")


def ilp_vs_dp(layers: Sequence[LayerSpec], benches: Mapping, title: str, out: str,
              limits: Sequence[int] = LIMIT_LINES, policy: str = "powerOfTwo",
              source: str = PREDICTED):
    """Predicted network time: undivided, per-layer DP and ILP at the same total memory; and
    the workspace each kernel got from the ILP at the middle limit (one row per kernel,
    coloured by op)."""
    width = 0.27
    shown = None
    results = []
    for lim in limits:
        dp = plan_network(layers, benches, PlanSettings(policy=policy, limit=lim),
                          strict=False)
        ilp = plan_network(layers, benches,
                           PlanSettings(policy=policy, limit=lim, optimizer="ilp"), strict=False)
        results.append((dp, ilp))
        if lim == limits[len(limits) // 2]:
            shown, shown_lim = ilp, lim
    fig, ax, ax_w = _kernel_rows(len(shown.kernels))
    for i, (dp, ilp) in enumerate(results):
        for j, (val, c, name) in enumerate(((dp.baseline_time_ms, "#bbbbbb", "undivided"),
                                            (dp.time_ms, "#4477aa", "DP per layer"),
                                            (ilp.time_ms, "#ee6677", "ILP, same total"))):
            ax.bar(i + (j - 1) * width, val, width, color=c, label=name if i == 0 else None)
    ax.set_xticks(range(len(limits)))
    ax.set_xticklabels([format_size(l) + " / kernel" for l in limits])
    ax.set_ylabel("predicted convolution time (ms)")
    ax.legend(fontsize=8)
    names = [k.name for k in shown.kernels]
    ys = list(range(len(names)))
    ws = [k.plan.ws_bytes for k in shown.kernels]
    ax_w.barh(ys, [w / 2**20 for w in ws], 0.75, color=[OP_COLORS[k.op] for k in shown.kernels])
    _small_marks(ax_w, ys, ws, "black", max(ws + [1]))
    per_kernel = shown.budget / len(names) / 2**20
    ax_w.axvline(per_kernel, color="grey", ls="--", lw=0.8)
    ax_w.set_yticks(ys)
    ax_w.set_yticklabels(names, fontsize=7)
    ax_w.set_ylim(len(names) - 0.5, -0.5)
    ax_w.set_xlabel("workspace the ILP gave each kernel (MiB)")
    ax_w.set_title(f"ILP at {format_size(shown_lim)} / kernel: budget "
                   f"{format_size(shown.budget)} in all", fontsize=9)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    ax_w.legend(handles=[Patch(color=c, label=op) for op, c in OP_COLORS.items()]
                + [Line2D([], [], color="grey", ls="--", lw=0.8,
                          label=f"budget / kernels = {per_kernel:.0f} MiB")],
                fontsize=7, loc="lower right")
    ax_w.grid(axis="x", lw=0.3)
    fig.suptitle(_titled(title, source))
    return _save(fig, out, source=source)


# ---------------------------------------------------------------------------------------------
# `ucudnn reproduce` results (reproduce.json): whole Caffe iterations

def _measured(doc: dict, net: str, bn: str = "caffe", status: str = "ok") -> List[dict]:
    """The net's measured points (``status`` ``predicted``: its predicted ones) with
    BatchNorm engine ``bn`` (the paper's grid: BVLC's layer, Note [BatchNorm engines]),
    ordered: stock, unlimited, then by limit and setting."""
    pts = [r for r in doc["points"].values() if r.get("net") == net
           and r.get("status") == status and bn_engine(r) == bn]
    return sorted(pts, key=point_order)


def grid_status(doc: dict) -> str:
    """``ok`` where the results document holds measured points, else ``predicted`` (a grid
    predicted without a GPU: figures of its points say so)."""
    return "ok" if any(r.get("status") == "ok" for r in doc["points"].values()) else "predicted"


def predicted_kernel_rows(doc: dict, net: str) -> dict:
    """The predicted points of ``net`` at the DP's policies as :func:`stacked_layers` reads
    them: ``{"kernels": [{net, layer, op, count, limit, policy, predicted_ms}]}`` (count:
    the kernel's instances, its groups)."""
    rows = []
    for r in _measured(doc, net, status="predicted"):
        if r["setting"] not in POLICIES or r.get("limit_bytes") is None:
            continue
        rows += [{"net": net, "layer": k["layer"], "op": k["op"],
                  "count": k.get("instances", 1), "limit": r["limit_bytes"],
                  "policy": r["setting"], "predicted_ms": k["predicted_ms"]}
                 for k in r["kernels"].values()]
    order = {l.name: i for i, l in enumerate(shipped.layers(net))} if net in shipped.nets() else {}
    rows.sort(key=lambda k: order.get(k["layer"], len(order)))      # the net's order
    return {"kernels": rows}


def _label(r: dict) -> str:
    lim = r.get("limit_bytes")
    if r["setting"] in ("caffe", "unlimited") or lim is None or is_unlimited(lim):
        return "stock Caffe" if r["setting"] == "caffe" else "unlimited"
    return f"{format_size(lim)}\n{r['setting']}"


def reproduce_ilp_vs_dp(doc: dict, net: str, out: str, policy: str = "powerOfTwo"):
    """Measured in Caffe: convolution-layer time of undivided, the per-layer DP and the ILP
    (same policy, budget limit x kernels) per limit, with the processes' spread; and the
    workspace each kernel got from the DP and from the ILP at the middle limit."""
    pts = {(r["setting"], r.get("limit_bytes")): r for r in _measured(doc, net)}
    limits = sorted({lim for (s, lim) in pts if s == "ilp" and (policy, lim) in pts})
    if not limits:
        raise ValueError(f"no measured ILP and {policy} points for {net!r} in the results")
    lim = limits[len(limits) // 2]
    ilp, dp = pts[("ilp", lim)]["kernels"], pts[(policy, lim)]["kernels"]
    names = list(ilp)
    fig, ax, ax_w = _kernel_rows(len(names))
    width = 0.27
    series = (("undivided", "#bbbbbb", "undivided"), (policy, "#4477aa", f"DP per layer ({policy})"),
              ("ilp", "#ee6677", "ILP, same total"))
    for i, limit in enumerate(limits):
        for j, (setting, color, name) in enumerate(series):
            r = pts.get((setting, limit))
            value = point_conv_ms(r) if r else None
            if value is None:       # stock-like undivided point without kernels: no bar
                continue
            convs = [x["conv_ms"] for x in r.get("repeats") or [] if x.get("conv_ms") is not None]
            err = ([[value - min(convs)], [max(convs) - value]] if len(convs) > 1 else None)
            ax.bar(i + (j - 1) * width, value, width, color=color, yerr=err, capsize=2,
                   label=name if i == 0 else None)
    ax.set_xticks(range(len(limits)))
    ax.set_xticklabels([format_size(l) + " / kernel" for l in limits])
    ax.set_ylabel("convolution layers, measured (ms / iteration)")
    ax.set_title("median of the processes; bars: min-max", fontsize=8)
    ax.legend(fontsize=8)
    ys = list(range(len(names)))
    dp_ws = [dp.get(n, {}).get("ws_bytes", 0) for n in names]
    ilp_ws = [ilp[n]["ws_bytes"] for n in names]
    ax_w.barh([y - 0.2 for y in ys], [w / 2**20 for w in dp_ws], 0.4, color="#4477aa",
              label=f"DP ({policy})")
    budget = pts[("ilp", lim)].get("ilp_budget_bytes")
    ax_w.barh([y + 0.2 for y in ys], [w / 2**20 for w in ilp_ws], 0.4, color="#ee6677",
              label="ILP" + (f" (budget {format_size(budget)} in all)" if budget else ""))
    top = max(dp_ws + ilp_ws + [1])
    _small_marks(ax_w, [y - 0.2 for y in ys], dp_ws, "#4477aa", top)
    _small_marks(ax_w, [y + 0.2 for y in ys], ilp_ws, "#ee6677", top)
    ax_w.axvline(lim / 2**20, color="grey", ls="--", lw=0.8,
                 label=f"DP limit {format_size(lim)} / kernel")
    ax_w.set_yticks(ys)
    ax_w.set_yticklabels(names, fontsize=7)
    ax_w.set_ylim(len(names) - 0.5, -0.5)
    ax_w.set_xlabel(f"workspace per kernel at {format_size(lim)} / kernel (MiB)")
    ax_w.legend(fontsize=7, loc="lower right")
    ax_w.grid(axis="x", lw=0.3)
    fig.suptitle(f"{net}: ILP against per-layer DP in caffe time")
    return _save(fig, out)


def reproduce_stacked(doc: dict, net: str, out: str):
    """Per point: per-layer forward and backward time of one Caffe iteration (convolution
    layers in colour, the rest grey), speedup over undivided at the same limit on top."""
    plt = _plt()
    pts = _measured(doc, net)
    if not pts:
        raise ValueError(f"no measured points for {net!r} in the results")
    # stock Caffe has no ucudnn kernels: its convolution layers are the other points' ones
    net_convs = {k.split("/")[0] for r in pts for k in (r.get("kernels") or {})}
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(pts)) + 2, 4.8))
    segments, tops = [], []
    order = []
    for x, r in enumerate(pts):
        convs = set(r.get("conv_layers") or net_convs)
        order = order or [l["name"] for l in r["layers"] if l["name"] in convs]
        bottom = 0.0
        for part, color, grey in (("forward", "#4477aa", "#bbbbbb"),
                                  ("backward", "#ee6677", "#dddddd")):
            # one segment per convolution layer, the other layers as one block
            for i, layer in enumerate(l for l in r["layers"] if l["name"] in convs):
                t = layer.get(part, 0.0)
                ax.bar(x, t, bottom=bottom, color=color, edgecolor="white", lw=0.3,
                       alpha=0.65 + 0.35 * (i % 2))
                segments.append((x, bottom, t, layer["name"]))
                bottom += t
            rest = sum(l.get(part, 0.0) for l in r["layers"] if l["name"] not in convs)
            ax.bar(x, rest, bottom=bottom, color=grey, edgecolor="white", lw=0.3)
            bottom += rest
        tops.append(bottom)
        base = next((b for b in pts if b["setting"] == "undivided"
                     and b.get("limit_bytes") == r.get("limit_bytes")), None)
        if base and r is not base and r.get("limit_bytes"):
            ax.text(x, bottom, f"{base['median_ms'] / r['median_ms']:.2f}x", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(range(len(pts)))
    ax.set_xticklabels([_label(r) for r in pts], fontsize=7)
    ax.set_ylabel("time per iteration (ms, sum of layers)")
    ax.set_ylim(0, max(tops) * 1.08)
    _label_segments(ax, segments)
    from matplotlib.patches import Patch
    span = f"{order[0]}..{order[-1]}" if order else "net order"
    ax.legend(handles=[Patch(color="#4477aa", label="conv forward (per layer)"),
                       Patch(color="#bbbbbb", label="other layers forward"),
                       Patch(color="#ee6677", label="conv backward (per layer)"),
                       Patch(color="#dddddd", label="other layers backward"),
                       Patch(color="none", label=f"one segment per conv layer,\n{span} "
                             "bottom-up,\nshades alternate; named\nwhere there is room")],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title(f"{net}: caffe time per layer; speedup (median) over undivided")
    return _save(fig, out)


TYPE_COLORS = (("convolution", "#4477aa"), ("batchnorm", "#ee6677"), ("scale", "#ccbb44"),
               ("relu", "#228833"), ("other", "#bbbbbb"))


def layer_type_bars(doc: dict, net: str, limit: int) -> List[tuple]:
    """The bars of :func:`reproduce_layer_types`: ``(label, ms by kind, iteration ms)`` for
    stock Caffe and the fastest ucudnn point at ``limit``, per BatchNorm engine, then
    PyTorch's GPU time by kind when its profile was recorded."""
    bars = []
    engines = {"caffe": "BVLC BatchNorm", "cudnn": "cuDNN BatchNorm (0004)",
               "fused": "fused BatchNorm (0004)"}
    for bn, engine in engines.items():
        pts = [r for r in _measured(doc, net, bn) if r.get("type_ms")]
        stock = next((r for r in pts if r["setting"] == "caffe"), None)
        if stock:
            bars.append((f"stock Caffe\n{engine}", stock["type_ms"], stock["median_ms"]))
        at = [r for r in pts if r.get("limit_bytes") == limit and r["setting"] != "caffe"]
        if at:
            best = min(at, key=lambda r: r["median_ms"])
            bars.append((f"ucudnn {best['setting']} {format_size(limit)}\n{engine}",
                         best["type_ms"], best["median_ms"]))
    torch = doc.get("pytorch", {}).get(net, {})
    if torch.get("status") == "ok" and torch.get("by_type_ms"):
        bars.append((f"PyTorch {torch.get('pytorch_mode', 'eager')}\n(GPU kernel time)",
                     torch["by_type_ms"], torch["median_ms"]))
    return bars


def reproduce_layer_types(doc: dict, net: str, out: str, limit: int = 64 << 20):
    """Where a whole iteration goes, by kind of layer (Caffe's per-layer timer, forward +
    backward; PyTorch: its profiler's kernel time, BatchNorm2d = Caffe's BatchNorm + Scale),
    with the measured iteration time above each bar (Note [BatchNorm engines])."""
    plt = _plt()
    bars = layer_type_bars(doc, net, limit)
    if not bars:
        raise ValueError(f"no measured points with layer-type times for {net!r}")
    fig, ax = plt.subplots(figsize=(1.6 * len(bars) + 2.5, 4.8))
    for x, (_, parts, total) in enumerate(bars):
        bottom = 0.0
        for kind, color in TYPE_COLORS:
            v = parts.get(kind, 0.0)
            ax.bar(x, v, bottom=bottom, color=color, width=0.6,
                   label=kind if x == 0 else None)
            if v >= 4.0:
                ax.text(x, bottom + v / 2, f"{v:.1f}", ha="center", va="center", fontsize=7)
            bottom += v
        ax.text(x, max(bottom, total) + 2, f"{total:.1f} ms", ha="center", fontsize=8,
                fontweight="bold")
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([b[0] for b in bars], fontsize=7)
    ax.set_ylabel("ms per iteration (forward + backward)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(axis="y", lw=0.3)
    ax.set_title(f"{net}: time by kind of layer (bold: measured iteration, median)", fontsize=10)
    return _save(fig, out)


SETTING_STYLE = {"caffe": ("stock Caffe", "#000000", "X"), "unlimited": ("unlimited", "#777777", "*"),
                 "undivided": ("undivided", "#4477aa", "o"), "powerOfTwo": ("powerOfTwo", "#66ccee", "s"),
                 "all": ("all", "#228833", "D"), "ilp": ("ILP", "#ccbb44", "^"),
                 "shared": ("shared arena", "#ee6677", "v"),
                 "shared_stock": ("shared arena at stock's memory", "#aa3377", "P")}


def time_memory_points(doc: dict, net: str, bn: str = "caffe", status: str = "ok") -> List[dict]:
    """The points of :func:`reproduce_time_vs_memory`: ``setting``, ``limit_bytes``,
    ``median_ms``, ``time_ms`` (measured: the median; ``status`` ``predicted``: the predicted
    convolution time), ``workspace_bytes`` (stock Caffe: measured from peak memory, Note
    [Shared arena at stock memory]) and ``peak_gpu_memory_bytes``."""
    out = []
    for r in _measured(doc, net, bn, status):
        ws = r.get("workspace_bytes")
        if r["setting"] == "caffe":
            ws = stock_workspace(doc, net, bn)[0]
        out.append({"setting": r["setting"], "limit_bytes": r.get("limit_bytes"),
                    "median_ms": r.get("median_ms"),
                    "time_ms": r.get("median_ms", r.get("predicted_conv_ms")),
                    "workspace_bytes": ws,
                    "peak_gpu_memory_bytes": r.get("peak_gpu_memory_bytes")})
    return out


def reproduce_time_vs_memory(doc: dict, net: str, out: str, bn: str = "caffe"):
    """The trade-off the paper is about: iteration time (caffe time, median) against the
    workspace the net holds and the peak GPU memory of the Caffe process (Note [Measured
    memory]), for every setting and limit; a grid predicted without a GPU
    (:func:`grid_status`): the predicted convolution time against the workspace its plans
    hold. A panel whose memory the results do not record is not drawn."""
    plt = _plt()
    status = grid_status(doc)
    pts = time_memory_points(doc, net, bn, status)
    panels = [(field, xlabel) for field, xlabel in (
        ("workspace_bytes", "workspace held (MiB, log)"),
        ("peak_gpu_memory_bytes", "peak GPU memory of the process (GiB)"))
        if any(p.get(field) is not None for p in pts)]
    if not panels:
        raise ValueError(f"no {'measured' if status == 'ok' else status} points with their "
                         f"memory for {net!r}")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels) + 1.5, 4.6),
                             sharey=True, squeeze=False)
    for ax, (field, xlabel) in zip(axes[0], panels):
        scale = (1 << 20) if field == "workspace_bytes" else (1 << 30)
        shown = set()
        for p in pts:
            if p.get(field) is None:
                continue
            name, color, marker = SETTING_STYLE.get(p["setting"], (p["setting"], "#999999", "."))
            ax.scatter(p[field] / scale, p["time_ms"], color=color, marker=marker, s=42,
                       label=None if name in shown else name, zorder=3)
            shown.add(name)
            lim = p.get("limit_bytes")
            if lim and not is_unlimited(lim) and p["setting"] != "shared_stock":
                ax.annotate(format_size(lim).replace(".0", ""), (p[field] / scale, p["time_ms"]),
                            textcoords="offset points", xytext=(4, 3), fontsize=6, color=color)
        if field == "workspace_bytes":
            ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel(xlabel)
        ax.grid(lw=0.3)
    axes[0, 0].set_ylabel("ms per iteration (forward + backward, median)" if status == "ok"
                          else "predicted convolution time (ms per iteration)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    axes[0, -1].legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                       borderaxespad=0)
    engine = "" if bn == "caffe" else f", {bn} BatchNorm"
    source = MEASURED if status == "ok" else PREDICTED
    fig.suptitle(_titled(f"{net}{engine}: time against memory per setting (labels: per-kernel "
                         "limit)", source, policies=True), fontsize=10)
    return _save(fig, out, source=source)


def reproduce_overhead(doc: dict, out: str):
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
    axes[0, 0].legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8,
                      frameon=False)
    fig.suptitle("ucudnn overhead per point (all kernels of the net, first process)\n"
                 "log scale; no bar: none (ILP solve only at ILP points)", fontsize=10)
    return _save(fig, out)


def reproduce_measured_vs_predicted(doc: dict, out: str):
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
        measured = point_conv_ms(r)
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
    return _save(fig, out)


DEEPBENCH_LIMIT_COLORS = ("#88ccee", "#4477aa", "#332288", "#999933", "#cc6677")


def deepbench_speedups(results, out: str, policy: str = "powerOfTwo", basis: str = "measured",
                       ops: Optional[Sequence[str]] = None):
    """The paper's DeepBench figure from a ``scripts/bench_deepbench.py`` JSON (path or loaded
    document): one row per op, a 3x3 and a 5x5 panel, one group of bars per distinct kernel,
    one bar per workspace limit, speedup of ``policy`` over undivided on the y axis (``basis``:
    measured or predicted times), a line at 1. Points without both plans are left empty."""
    from matplotlib.patches import Patch
    doc = deepbench.load_results(results)
    sp = deepbench.speedups(doc, policy, basis)
    recs = doc["kernels"]
    filt, layers, limits = {}, [], set()
    for r in recs:
        filt[r["layer"]] = r.get("filter", "?")
        if r["layer"] not in layers:
            layers.append(r["layer"])
        limits.add(int(r["limit"]))
    limits = sorted(limits)
    ops = list(ops or [op for op in ("fwd", "bwd_data", "bwd_filter")
                       if any(r["op"] == op for r in recs)])
    panels = [f for f in ("3x3", "5x5") if any(filt[l] == f for l in layers)]
    plt = _plt()
    widths = [max(1, sum(1 for l in layers if filt[l] == f)) for f in panels]
    fig, axes = plt.subplots(len(ops), len(panels), squeeze=False, sharey="row",
                             figsize=(2.0 + 0.42 * sum(widths), 2.6 * len(ops) + 0.8),
                             gridspec_kw={"width_ratios": widths})
    bw = 0.8 / max(1, len(limits))
    for i, op in enumerate(ops):
        for j, f in enumerate(panels):
            ax = axes[i][j]
            names = [l for l in layers if filt[l] == f]
            for li, limit in enumerate(limits):
                xs = [x + (li - (len(limits) - 1) / 2) * bw for x in range(len(names))]
                ys = [sp.get((l, op, limit), 0.0) for l in names]
                ax.bar(xs, ys, width=bw, color=DEEPBENCH_LIMIT_COLORS[li % 5],
                       label=format_size(limit))
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=90, fontsize=7)
            ax.set_xlim(-0.6, len(names) - 0.4)
            ax.set_title(f"{op}, {f}", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"speedup ({basis})")
    handles = [Patch(color=DEEPBENCH_LIMIT_COLORS[i % 5], label=format_size(l))
               for i, l in enumerate(limits)]
    fig.legend(handles=handles, loc="upper center", ncol=len(limits), fontsize=8,
               title=f"{policy} over undivided, per-kernel workspace limit", title_fontsize=8,
               bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
    return _save(fig, out, tight=False)


#: The most panels side by side; more go on further rows.
MAX_COLUMNS = 4


def _panel_grid(n: int, width: float, height: float):
    """``n`` panels in rows of at most :data:`MAX_COLUMNS` (each ``width`` x ``height``
    inches); the cells left over are not drawn. Returns (fig, the ``n`` axes)."""
    plt = _plt()
    cols = min(n, MAX_COLUMNS)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n]


def engines_summary(summary: Sequence[dict], out: str):
    """scripts/bench_engines.py's figure: per suite and dtype one panel (at most
    :data:`MAX_COLUMNS` in a row) with the net's measured convolution time per iteration for
    each family x layout, undivided and powerOfTwo at each limit. ``summary``: its complete
    sums (``suite``, ``dtype``, ``family``, ``layout``, ``limit``: bytes as text or
    ``unlimited``, ``policy``, ``measured_ms``)."""
    panels = sorted({(s["suite"], s["dtype"]) for s in summary})
    if not panels:
        raise ValueError("no complete sums to draw")
    settings = sorted({(s["family"], s["layout"]) for s in summary})   # a colour each
    fig, axes = _panel_grid(len(panels), 5.2, 4.0)
    for ax, (suite, dtype) in zip(axes, panels):
        mine = [s for s in summary if (s["suite"], s["dtype"]) == (suite, dtype)]
        limits = sorted({s["limit"] for s in mine}, key=lambda l: (l == "unlimited", int(l)
                                                                  if l.isdigit() else 0))
        bars = [(l, p) for l in limits for p in ("undivided", "powerOfTwo")
                if any(s["limit"] == l and s["policy"] == p for s in mine)]
        width = 0.8 / len(settings)
        for i, (fam, lay) in enumerate(settings):
            ys = [next((s["measured_ms"] for s in mine if (s["family"], s["layout"], s["limit"],
                        s["policy"]) == (fam, lay, l, p)), float("nan")) for l, p in bars]
            ax.bar([j + i * width for j in range(len(bars))], ys, width,
                   color=ALGO_COLORS[i % len(ALGO_COLORS)])
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(bars))])
        ax.set_xticklabels([("unlim." if l == "unlimited" else format_size(int(l)))
                            + ("\nundiv." if p == "undivided" else "\npow2") for l, p in bars],
                           fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("convolutions, measured (ms, log)", fontsize=8)
        ax.set_title(f"{suite}, {dtype}", fontsize=9)
    from matplotlib.patches import Patch
    fig.legend(handles=[Patch(color=ALGO_COLORS[i % len(ALGO_COLORS)], label=f"{fam} {lay}")
                        for i, (fam, lay) in enumerate(settings)],
               loc="upper center", ncol=len(settings), fontsize=8,
               frameon=False, title="family and layout (measured)", title_fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    return _save(fig, out, tight=False)

