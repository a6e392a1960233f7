"""What a person reads of a training comparison: the summaries in Markdown
(:func:`format_summary` of :func:`.comparison.compare`, :func:`format_seeds_summary` of
:func:`.comparison.compare_seeds`) and the figure (:func:`plot_curves`, from the curves only).
"""
from __future__ import annotations

import math
from typing import Iterable

from .comparison import LOSS_TARGET, SMOOTHING, rel_diff
from .curves import Row, by_setting
from .settings import setting_order


def _fmt(v, spec: str, none: str = "-") -> str:
    """``v`` formatted by ``spec``; ``none`` where it is None, "inf" where infinite."""
    if v is None:
        return none
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return format(v, spec)


def format_summary(summary: dict) -> str:
    """The summary as Markdown: one table per net, a row per setting."""
    lines = [f"Differences to `{summary['reference']}` (the equivalence targets: training loss "
             f"within {100 * summary['loss_target']:g} % relative at every recorded iteration, "
             f"final held-out accuracy within {summary['accuracy_target_pp']:g} pp).", ""]
    for net, per in summary["nets"].items():
        lines += [f"### {net}", "",
                  "| setting | kernels split | loss rel. diff, it. 0 | max loss rel. diff (it.) "
                  f"| median | max, {SMOOTHING}-it. mean | final acc. | Δ acc. (pp) "
                  "| max abs Δ acc. (pp) | weights rel. diff | targets |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for setting, r in per.items():
            split = (f"{r['kernels_split']}/{r['kernels']}" if r.get("kernels") else "-")
            if setting == summary["reference"]:
                targets = "reference"
            elif "loss_within_target" not in r:
                targets = "-"
            elif r.get("bitwise_equal"):
                targets = "bitwise equal"
            else:
                ok = r.get("loss_within_target") and r.get("accuracy_within_target", True)
                targets = "met" if ok else "NOT met"
            mx = (f"{_fmt(r.get('max_rel_loss_diff'), '.2e')} "
                  f"({_fmt(r.get('max_rel_loss_diff_iteration'), 'd')})"
                  if "max_rel_loss_diff" in r else "-")
            fin = r.get("final_accuracy")
            lines.append(
                f"| {setting} | {split} | {_fmt(r.get('rel_loss_diff_iteration0'), '.2e')} | "
                f"{mx} | {_fmt(r.get('median_rel_loss_diff'), '.2e')} | "
                f"{_fmt(r.get('max_rel_smoothed_loss_diff'), '.2e')} | "
                f"{_fmt(None if fin is None else 100 * fin, '.2f')} % | "
                f"{_fmt(r.get('final_accuracy_diff_pp'), '+.2f')} | "
                f"{_fmt(r.get('max_abs_accuracy_diff_pp'), '.2f')} | "
                f"{_fmt(r.get('final_weights_rel_diff'), '.2e')} | {targets} |")
        lines.append("")
    for key, error in (summary.get("failed") or {}).items():
        lines.append(f"- {key} failed: {error}")
    return "\n".join(lines)


def format_seeds_summary(summary: dict) -> str:
    """Markdown of :func:`compare_seeds`."""
    ref, ctl = summary["reference"], summary["control"]
    lines = [f"Several seeds ({', '.join(map(str, summary['seeds']))}) against `{ref}`; "
             f"`{ctl}` is stock against itself. Accuracy: mean of each run's last "
             f"{summary['last_evaluations']} held-out evaluations, then over the seeds. Loss: "
             f"{summary['smoothing']}-iteration trailing means, averaged over the seeds "
             "(seed-mean) or compared seed by seed (paired)."]
    for net, stats in summary["nets"].items():
        lines += ["", f"### {net}", "",
                  "| setting | accuracy, mean ± sd (pp) | Δ vs stock (pp) ± se | seed-mean loss "
                  "diff (max) | paired loss diff, per seed | within noise | one-run targets |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for s, st in stats.items():
            acc = (f"{st['accuracy_mean_pp']:.2f} ± {st['accuracy_sd_pp']:.2f}"
                   if st["accuracy_mean_pp"] is not None else "-")
            if s == ref:
                lines.append(f"| {s} | {acc} | reference | - | - | - | - |")
                continue
            d = (f"{st['accuracy_diff_pp']:+.2f} ± {st['accuracy_diff_se_pp']:.2f}"
                 if st.get("accuracy_diff_pp") is not None else "-")
            paired = ", ".join(f"{v:.3f}" for v in st["paired_loss_diff"])
            lines.append(f"| {s} | {acc} | {d} | {_fmt(st.get('seed_mean_loss_diff'), '.2%')} "
                         f"| {paired} | {'yes' if st.get('within_noise') else 'NO'} | "
                         f"{'met' if st.get('issue_targets') else 'NOT met'} |")
    return "\n".join(lines)


SETTING_COLORS = {"stock": "#000000", "stock-rerun": "#777777", "undivided": "#4477aa",
                  "powerOfTwo": "#ee6677", "all": "#228833", "ilp": "#ccbb44",
                  "shared": "#66ccee"}
#: the relative-difference axis is symlog, linear below this: a zero difference is drawn at 0
REL_LINTHRESH = 1e-8


def plot_curves(rows: Iterable[Row], out: str, reference: str = "stock"):
    """One row of panels per net: training loss per setting (log scale), |loss - stock| /
    stock (symlog: identical iterations drawn at 0; the 1 % target dashed) and held-out
    accuracy. Agg backend, deterministic PNG (no timestamps); returns the closed figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter
    curves = by_setting(rows)
    nets = sorted(curves)
    fig, axes = plt.subplots(max(1, len(nets)), 3, figsize=(15, 4.2 * max(1, len(nets))),
                             squeeze=False)
    for row_axes, net in zip(axes, nets):
        ax_l, ax_d, ax_a = row_axes
        per = curves[net]
        ref = {r.iteration: r for r in per.get(reference, [])}
        for setting in sorted(per, key=setting_order):
            rs = per[setting]
            style = dict(color=SETTING_COLORS.get(setting, "#66ccee"), lw=1.2,
                         label=setting, ls="--" if setting == "stock-rerun" else "-")
            pts = [(r.iteration, r.loss) for r in rs if r.loss is not None and r.loss > 0]
            if pts:
                ax_l.plot(*zip(*pts), **style)
            acc = [(r.iteration, 100 * r.test_accuracy) for r in rs
                   if r.test_accuracy is not None]
            if acc:
                ax_a.plot(*zip(*acc), marker="o", ms=2.5, **style)
            if setting != reference and ref:
                d = [(r.iteration, rel_diff(r.loss, ref[r.iteration].loss)) for r in rs
                     if r.iteration in ref and r.loss is not None
                     and ref[r.iteration].loss is not None]
                d = [(i, v) for i, v in d if math.isfinite(v)]
                if d:
                    ax_d.plot(*zip(*d), **style)
        ax_l.set_yscale("log")
        ax_l.set_ylabel("training loss")
        ax_l.set_title(f"{net}: training loss")
        ax_d.set_yscale("symlog", linthresh=REL_LINTHRESH, linscale=0.5)
        ax_d.yaxis.set_major_locator(FixedLocator([0.0] + [10.0 ** k for k in range(-8, 1)]))
        ax_d.yaxis.set_major_formatter(FuncFormatter(
            lambda v, _: "0" if v == 0 else f"1e{int(round(math.log10(v)))}"))
        ax_d.axhline(LOSS_TARGET, color="#aa3377", ls=":", lw=1, label="1 % target")
        ax_d.set_ylim(-REL_LINTHRESH / 2, 1.0)
        ax_d.set_ylabel(f"|loss - {reference}| / {reference} (symlog: 0 = equal)")
        ax_d.set_title(f"{net}: relative difference to {reference}")
        ax_a.set_ylabel("held-out accuracy (%)")
        ax_a.set_title(f"{net}: held-out accuracy")
        for ax in row_axes:
            ax.set_xlabel("iteration")
            ax.grid(True, alpha=0.3)
        ax_l.legend(fontsize=8)
        ax_d.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return fig
