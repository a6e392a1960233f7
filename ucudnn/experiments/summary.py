"""Tables of a results document: ``points.csv``, ``layers.csv`` and the text summary
``ucudnn reproduce`` prints."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from ..files import write_text
from ..vocab import format_size
from .grid import (Point, bn_engine, engines_of, is_unlimited, layout_of, limit_label,
                   point_order)
from .results import measured_repeats, pytorch_fields, speedup, vs_pytorch

POINT_COLUMNS = ("net", "setting", "policy", "optimizer", "bn_engine", "engines", "layout",
                 "limit_bytes",
                 "status",
                 "median_ms", "timing", "per_layer_median_ms",
                 "min_ms", "max_ms", "processes", "mean_ms", "forward_ms", "backward_ms",
                 "speedup_vs_undivided", "conv_ms", "conv_speedup_vs_undivided", "vs_pytorch",
                 "predicted_conv_ms", "workspace_bytes", "peak_gpu_memory_bytes", "bench_s",
                 "plan_s", "ilp_solve_s", "pytorch_mode", "pytorch_ms", "vs_pytorch_best",
                 "pytorch_peak_gpu_memory_bytes")


def spread(rec: dict) -> str:
    """`` [min-max, n processes]`` of a point measured more than once (Note [Repeats])."""
    n = len(measured_repeats(rec))
    return f" [{rec['min_ms']:.2f}-{rec['max_ms']:.2f}, {n} runs]" if n > 1 else ""


def summary_line(point: Point, rec: dict, doc: dict) -> str:
    """One point, as the runner reports it after measuring."""
    if rec.get("status") == "ok":
        sp = speedup(doc, rec) if point.setting != "undivided" else None
        return f"{rec['median_ms']:.2f} ms{spread(rec)}" + (
            f" ({sp:.2f}x vs undivided)" if sp else "")
    if rec.get("status") == "predicted":
        return f"{rec['predicted_conv_ms']:.2f} ms convolutions (predicted)"
    return f"{rec.get('status')}: {rec.get('error')}"


def write_csv(out: Path, doc: dict) -> None:
    """``points.csv`` (one row per point) and ``layers.csv`` (per layer, measured points); a
    predicted grid has no per-layer times and gets no ``layers.csv``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with io.StringIO() as f:    # written whole: Note [Writing a named file] in ucudnn/files.py
        w = csv.writer(f)
        w.writerow(POINT_COLUMNS)
        for key in sorted(doc["points"]):
            rec = doc["points"][key]
            timing = rec.get("timing") or ("per layer" if rec.get("status") == "ok" else None)
            rec = dict(rec, bn_engine=bn_engine(rec), engines=engines_of(rec), timing=timing,
                       layout=layout_of(rec),
                       speedup_vs_undivided=speedup(doc, rec),
                       conv_speedup_vs_undivided=speedup(doc, rec, "conv_ms"),
                       vs_pytorch=vs_pytorch(doc, rec, "eager") or vs_pytorch(doc, rec),
                       vs_pytorch_best=vs_pytorch(doc, rec),
                       **pytorch_fields(doc, rec["net"]),
                       processes=len(measured_repeats(rec)) or None)
            w.writerow(["" if rec.get(c) is None else rec.get(c) for c in POINT_COLUMNS])
        write_text(out / "points.csv", f.getvalue(), fsync=True)
    if doc.get("meta", {}).get("mode") == "predict":
        return
    with io.StringIO() as f:
        w = csv.writer(f)
        w.writerow(("net", "setting", "limit_bytes", "bn_engine", "engines", "layout",
                    "layer", "forward_ms", "backward_ms"))
        for key in sorted(doc["points"]):
            rec = doc["points"][key]
            for t in rec.get("layers") or []:
                w.writerow((rec["net"], rec["setting"], rec.get("limit_bytes") or "",
                            bn_engine(rec), engines_of(rec), layout_of(rec), t["name"],
                            t.get("forward", ""),
                            t.get("backward", "")))
        write_text(out / "layers.csv", f.getvalue(), fsync=True)


def tags(rec: dict) -> str:
    """`` (fused BN) (engines both) (NHWC)``: what sets a point apart beyond its setting and
    limit, each part only where it is not the default (BVLC BatchNorm, legacy, NCHW)."""
    return (("" if bn_engine(rec) == "caffe" else f" ({bn_engine(rec)} BN)")
            + ("" if engines_of(rec) == "legacy" else f" (engines {engines_of(rec)})")
            + ("" if layout_of(rec) == "NCHW" else f" ({layout_of(rec)})"))


def peak(rec: dict) -> str:
    """``, peak 9.71 GiB`` (NVML, whole process) where the record has it."""
    b = rec.get("peak_gpu_memory_bytes")
    return f", peak {b / 2**30:.2f} GiB" if b else ""


def format_summary(doc: dict) -> str:
    """A table of the points: median forward-backward time and speedup over undivided
    (measured), or predicted convolution time (predict mode); peak GPU memory beside each
    measured time, Caffe's and PyTorch's alike."""
    rows = []
    for key in sorted(doc["points"], key=lambda k: (doc["points"][k]["net"],
                                                    point_order(doc["points"][k]))):
        rec = doc["points"][key]
        lim = limit_label(rec.get("limit_bytes"))
        if rec.get("status") == "ok":
            sp, csp = speedup(doc, rec), speedup(doc, rec, "conv_ms")
            val = (f"{rec['median_ms']:10.2f} ms" + (f"  {sp:5.2f}x" if sp else " " * 7)
                   + (f"  conv {rec['conv_ms']:7.2f} ms" if rec.get("conv_ms") else "")
                   + (f" {csp:5.2f}x" if csp else "") + spread(rec) + peak(rec))
        elif rec.get("status") == "predicted":
            sp = speedup(doc, rec, "predicted_conv_ms")
            val = f"{rec['predicted_conv_ms']:10.2f} ms conv (predicted)" + (
                f"  {sp:5.2f}x" if sp else "")
        else:
            val = f"{rec.get('status')}: {str(rec.get('error'))[:80]}"
        rows.append(f"{rec['net']:<9} {rec['setting']:<11} {lim:>9}  {val}{tags(rec)}")
    for net, rec in sorted(doc.get("pytorch", {}).items()):
        if rec.get("status") == "ok":
            best = min((r for r in doc["points"].values()
                        if r.get("net") == net and r.get("status") == "ok"
                        and r.get("setting") != "unlimited"),
                       key=lambda r: r["median_ms"], default=None)
            vs = (f"; best Caffe point {best['setting']}/{format_size(best['limit_bytes'])}"
                  + tags(best) + ": "
                  f"{vs_pytorch(doc, best):.2f}x PyTorch's time"
                  + (f", {best['peak_gpu_memory_bytes'] / rec['peak_gpu_memory_bytes']:.2f}x "
                     "its peak memory" if best.get("peak_gpu_memory_bytes")
                     and rec.get("peak_gpu_memory_bytes") else "")
                  if best and best.get("limit_bytes") and not is_unlimited(best["limit_bytes"])
                  else "")
            mode = rec.get("pytorch_mode", "eager")
            rows.append(f"{net:<9} {'pytorch':<11} {'-':>9}  {rec['median_ms']:10.2f} ms "
                        f"(fastest of its modes: {mode}{peak(rec)}){vs}")
    return "\n".join(rows)
