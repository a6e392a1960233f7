"""What ``ucudnn baseline`` writes from its processes: ``processes.csv`` (every process), the
points (``points.csv``, one row per net) and the README, written from the CSV and the
versions only (Note [Interleaved baseline] in :mod:`.baseline`). Pure: no GPU, no Caffe.
"""
from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from ..files import read_text, write_text
from .pytorch_modes import FP32_MODES, fastest

#: processes.csv: one row per process, in the order of their slots (the order they ran, but
#: for a slot run again by ``--resume``: ``attempt`` 2, ``run`` the command that ran it)
PROCESS_FIELDS = ("order", "net", "round", "side", "mode", "input", "status", "attempt", "run",
                  "median_ms", "first_iteration_s", "peak_gpu_memory_bytes", "memory_method",
                  "sm_clock_start_mhz", "sm_clock_end_mhz", "sm_clock_min_mhz",
                  "power_start_w", "power_end_w", "power_max_w", "temperature_start_c",
                  "temperature_end_c", "temperature_max_c", "wall_s", "log", "error")
#: points.csv: one row per net; two columns per fp32 PyTorch mode (``pytorch_<mode>_ms``, the
#: median of its processes' medians, and ``pytorch_<mode>_processes``, how many ran)
POINT_FIELDS = (("net", "batch", "caffe_setting", "input", "caffe_ms", "caffe_per_process_ms",
                 "peak_gpu_memory_bytes")
                + tuple(f"pytorch_{m}_ms" for m in FP32_MODES)
                + tuple(f"pytorch_{m}_processes" for m in FP32_MODES) + ("screened_modes",)
                + ("pytorch_mode", "pytorch_ms", "pytorch_per_process_ms", "vs_pytorch_best",
                   "pytorch_peak_gpu_memory_bytes", "memory_vs_pytorch",
                   "bf16_mode", "bf16_ms", "bf16_per_process_ms", "vs_bf16",
                   "bf16_peak_gpu_memory_bytes",
                   "control_mode", "control_gaussian_ms", "control_constant_ms",
                   "control_difference", "caffe_processes", "pytorch_processes",
                   "failed_processes", "sm_clock_min_mhz", "temperature_max_c"))


def process_row(rec: dict) -> dict:
    """A process's row of processes.csv from its record (``gpu_state``: Note [GPU state of a
    process] in :mod:`.nvml`)."""
    row = {f: rec.get(f) for f in PROCESS_FIELDS}
    state = rec.get("gpu_state") or {}
    for key, name in (("sm_clock_mhz", "sm_clock"), ("power_w", "power"),
                      ("temperature_c", "temperature")):
        unit = key.rsplit("_", 1)[1]
        for end in ("start", "end"):
            row[f"{name}_{end}_{unit}"] = (state.get(end) or {}).get(key)
    for f in ("sm_clock_min_mhz", "power_max_w", "temperature_max_c"):
        row[f] = state.get(f)
    return row


def _median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _ratio(a, b) -> Optional[float]:
    return a / b if a is not None and b else None


def _runs(procs: Iterable[dict], side: str, mode: Optional[str] = None,
          kind: str = "gaussian") -> List[dict]:
    return [p for p in procs if p["side"] == side and p.get("status") == "ok"
            and (mode is None or p["mode"] == mode) and p.get("input") == kind]


def _per_process(runs: List[dict]) -> str:
    return ";".join(f"{p['median_ms']:.3f}" for p in runs)


def _peak(runs: List[dict]) -> Optional[int]:
    return max((p["peak_gpu_memory_bytes"] for p in runs
                if p.get("peak_gpu_memory_bytes") is not None), default=None)


def point_row(net: str, batch: int, setting: str, procs: List[dict],
              screen: bool = False) -> dict:
    """A net's row of points.csv from its processes' records (each with ``side``, ``mode``,
    ``input``, ``status``, ``median_ms``, ``peak_gpu_memory_bytes``, ``round``): a side's or a
    mode's time is the median of however many of its processes ran; the fp32 baseline the
    fastest fp32 mode (Note [PyTorch's modes]); the control the constant-input processes
    against the gaussian ones of the same mode. ``screen``: the run screened its fp32 modes
    (Note [Interleaved baseline]); ``screened_modes`` are those it timed in round 1 only,
    once later rounds began."""
    kind = input_kind(procs)
    caffe = _runs(procs, "caffe", kind=kind)
    row: Dict[str, object] = {"net": net, "batch": batch, "caffe_setting": setting,
                              "input": kind}
    row["caffe_ms"] = _median([p["median_ms"] for p in caffe])
    row["caffe_per_process_ms"] = _per_process(caffe)
    row["peak_gpu_memory_bytes"] = _peak(caffe)
    medians = {}
    for m in FP32_MODES:
        runs = _runs(procs, "pytorch", m)
        medians[m] = _median([p["median_ms"] for p in runs])
        row[f"pytorch_{m}_ms"] = medians[m]
        row[f"pytorch_{m}_processes"] = len(runs)
    last = max((p.get("round", 1) for p in procs), default=1)
    rounds = {m: {p.get("round", 1) for p in procs if p["side"] == "pytorch" and p["mode"] == m
                  and p.get("input") == "gaussian"} for m in FP32_MODES}
    row["screened_modes"] = ";".join(m for m in FP32_MODES if screen and last > 1
                                     and rounds[m] == {1})
    best = fastest(medians)
    best_runs = _runs(procs, "pytorch", best) if best else []
    row.update(pytorch_mode=best, pytorch_ms=medians.get(best) if best else None,
               pytorch_per_process_ms=_per_process(best_runs),
               pytorch_peak_gpu_memory_bytes=_peak(best_runs))
    row["vs_pytorch_best"] = _ratio(row["caffe_ms"], row["pytorch_ms"])
    row["memory_vs_pytorch"] = _ratio(row["peak_gpu_memory_bytes"],
                                      row["pytorch_peak_gpu_memory_bytes"])
    bf16 = sorted({p["mode"] for p in procs if p["mode"].startswith("bf16_")})
    bf16_medians = {m: _median([p["median_ms"] for p in _runs(procs, "pytorch", m)])
                    for m in bf16}
    b = fastest(bf16_medians, bf16)
    b_runs = _runs(procs, "pytorch", b) if b else []
    row.update(bf16_mode=b, bf16_ms=bf16_medians.get(b) if b else None,
               bf16_per_process_ms=_per_process(b_runs), bf16_peak_gpu_memory_bytes=_peak(b_runs))
    row["vs_bf16"] = _ratio(row["caffe_ms"], row["bf16_ms"])
    constant = [p for p in procs if p["side"] == "pytorch" and p.get("input") == "constant"
                and p.get("status") == "ok"]
    mode = constant[0]["mode"] if constant else None
    row["control_mode"] = mode
    row["control_gaussian_ms"] = medians.get(mode) if mode else None
    row["control_constant_ms"] = _median([p["median_ms"] for p in constant
                                          if p["mode"] == mode])
    # the constant input's time over the gaussian one's, less 1: above 0, constant is slower
    row["control_difference"] = (None if row["control_gaussian_ms"] is None
                                 or row["control_constant_ms"] is None
                                 else row["control_constant_ms"] / row["control_gaussian_ms"] - 1)
    row["caffe_processes"] = len(caffe)
    row["pytorch_processes"] = len(best_runs)
    failed: Dict[str, int] = {}
    for p in procs:
        if p.get("status") != "ok":
            failed[p["mode"]] = failed.get(p["mode"], 0) + 1
    row["failed_processes"] = ";".join(f"{m} x{n}" for m, n in failed.items())
    states = [(p.get("gpu_state") or {}) for p in procs]
    row["sm_clock_min_mhz"] = min((s["sm_clock_min_mhz"] for s in states
                                   if s.get("sm_clock_min_mhz") is not None), default=None)
    row["temperature_max_c"] = max((s["temperature_max_c"] for s in states
                                    if s.get("temperature_max_c") is not None), default=None)
    return row


def input_kind(procs: List[dict]) -> str:
    """The input of the comparison: Caffe's processes' (gaussian unless run otherwise)."""
    kinds = {p.get("input") for p in procs if p["side"] == "caffe"}
    return kinds.pop() if len(kinds) == 1 else "gaussian"


def csv_text(fields: Iterable[str], rows: Iterable[dict]) -> str:
    """CSV with a header; floats as Python writes them, None as an empty cell."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


def write_tables(out: Path, processes: List[dict], points: List[dict]) -> None:
    write_text(out / "processes.csv", csv_text(PROCESS_FIELDS, map(process_row, processes)))
    write_text(out / "points.csv", csv_text(POINT_FIELDS, points))


# ------------------------------------------------------------------------------------ README

def read_points(path: Path) -> List[dict]:
    """points.csv as rows of strings (empty: missing)."""
    return list(csv.DictReader(io.StringIO(read_text(path, what="CSV"))))


def _f(v: str, digits: int = 2, suffix: str = "") -> str:
    return "-" if v in ("", None) else f"{float(v):.{digits}f}{suffix}"


def _gib(v: str) -> str:
    return "-" if v in ("", None) else f"{int(float(v)) / 2**30:.2f} GiB"


def _pct(v: str) -> str:
    return "-" if v in ("", None) else f"{float(v) * 100:+.2f} %"


def _net(r: dict) -> str:
    return f"{r['net'].split('@')[0]}, {r['batch']}"


def render_readme(points: List[dict], versions: dict) -> str:
    """The README of a baseline folder, from points.csv's rows and versions.json: every number
    in it is a cell of those files."""
    v = {k: x for k, x in versions.items() if x is not None}
    v.setdefault("gpu_name", "GPU not recorded (" + versions.get("error", "no NVML") + ")")
    torch = {k: x for k, x in (v.get("pytorch") or {}).items() if x is not None}
    timed = (v.get("options") or {}).get("modes") or FP32_MODES
    lines = [
        "# Caffe + ucudnn against every PyTorch mode, interleaved",
        "",
        "Written by `ucudnn baseline` from `points.csv` and `versions.json` (this folder); "
        "every process is in `processes.csv`.",
        "",
        f"Machine: {v['gpu_name']}, driver {v.get('driver_version', '?')} (CUDA "
        f"{v.get('cuda_driver_version', '?')}). PyTorch {torch.get('torch_version', '?')} "
        f"(CUDA {torch.get('cuda_version', '?')}, cuDNN {torch.get('cudnn_version', '?')}); "
        f"Caffe + ucudnn: Caffe {v.get('caffe_commit', '?')} with the patch series, ucudnn "
        f"{v.get('ucudnn_commit', '?')}, cuDNN {v.get('ucudnn_cudnn_version', '?')} (the "
        "core's).",
        "",
        "Scope: training iterations (forward + backward, no solver step); fp32 with TF32 "
        "convolutions and strict fp32 GEMMs on both sides (PyTorch's defaults, "
        "`cudnn.benchmark` on). The fp32 baseline is the fastest of the PyTorch modes timed: "
        + ", ".join(f"`{m}`" for m in timed) + " (Note [PyTorch's modes]); bf16 autocast "
        "with `channels_last` under the fastest compile mode is a row of its own. Input: "
        + (points[0]["input"] if points else "?") + ", drawn once with the same seed and "
        "generator on both sides (Note [Inputs drawn once]). Caffe and PyTorch processes "
        "alternate in one run (Note [Interleaved baseline]); peak memory is NVML's, whole "
        "process, on both sides.",
        "",
    ]
    runs = v.get("runs") or []
    if len(runs) > 1:
        commits = list(dict.fromkeys(r.get("ucudnn_commit") or "?" for r in runs))
        lines += [f"The processes ran in {len(runs)} commands, each going on from the last "
                  "(`--resume`, Note [Resuming a baseline]); ucudnn "
                  + ", ".join(commits) + ". `versions.json` lists each command's.", ""]
    lines += [
        "## fp32",
        "",
        "| net, batch | Caffe setting | Caffe + ucudnn | fastest PyTorch mode | Caffe / PyTorch "
        "| peak memory, Caffe / PyTorch | processes a side |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in points:
        lines.append(
            f"| {_net(r)} | `{r['caffe_setting']}` | {_f(r['caffe_ms'])} ms "
            f"({r['caffe_per_process_ms'].replace(';', ', ')}) | `{r['pytorch_mode'] or '-'}` "
            f"{_f(r['pytorch_ms'])} ms ({r['pytorch_per_process_ms'].replace(';', ', ')}) | "
            f"**{_f(r['vs_pytorch_best'], 3, 'x')}** | {_gib(r['peak_gpu_memory_bytes'])} / "
            f"{_gib(r['pytorch_peak_gpu_memory_bytes'])} ({_f(r['memory_vs_pytorch'], 2, 'x')})"
            f" | {r['caffe_processes']} / {r['pytorch_processes']} |")
    lines += ["", "Every fp32 mode, ms (median of its processes' medians; in brackets, how "
              "many processes ran):", "",
              "| net, batch | " + " | ".join(f"`{m}`" for m in FP32_MODES) + " |",
              "| --- |" + " --- |" * len(FP32_MODES)]
    for r in points:
        lines.append(f"| {_net(r)} | " + " | ".join(
            f"{_f(r[f'pytorch_{m}_ms'])} ({r.get(f'pytorch_{m}_processes') or 0})"
            for m in FP32_MODES) + " |")
    screened = [f"{_net(r)}: " + ", ".join(f"`{m}`" for m in r["screened_modes"].split(";"))
                for r in points if r.get("screened_modes")]
    if screened:
        lines += ["", "Screened (`--screen`): these modes ran one process each, in round 1; "
                  "the later rounds timed Caffe, the fastest fp32 mode of round 1, bf16 and "
                  "the control: " + "; ".join(screened) + "."]
    lines += ["", "## bf16 autocast (a precision class of its own)", "",
              "| net, batch | bf16 mode | PyTorch bf16 | Caffe + ucudnn fp32 / PyTorch bf16 "
              "| peak memory, PyTorch bf16 |", "| --- | --- | --- | --- | --- |"]
    for r in points:
        lines.append(f"| {_net(r)} | `{r['bf16_mode'] or '-'}` | "
                     f"{_f(r['bf16_ms'])} ms | {_f(r['vs_bf16'], 3, 'x')} | "
                     f"{_gib(r['bf16_peak_gpu_memory_bytes'])} |")
    lines += ["", "## Control: PyTorch on a constant input", "",
              "| net, batch | mode | gaussian | constant 1.0 | constant / gaussian - 1 |",
              "| --- | --- | --- | --- | --- |"]
    for r in points:
        lines.append(f"| {_net(r)} | `{r['control_mode'] or '-'}` | "
                     f"{_f(r['control_gaussian_ms'])} ms | {_f(r['control_constant_ms'])} ms | "
                     f"{_pct(r['control_difference'])} |")
    lines += ["", "## GPU state (NVML, every process, both sides)", "",
              "| net, batch | lowest SM clock | highest temperature |", "| --- | --- | --- |"]
    for r in points:
        lines.append(f"| {_net(r)} | {_f(r['sm_clock_min_mhz'], 0, ' MHz')} | "
                     f"{_f(r['temperature_max_c'], 0, ' C')} |")
    failed = [f"{_net(r)}: {r['failed_processes'].replace(';', ', ')}" for r in points
              if r.get("failed_processes")]
    if failed:
        lines += ["", "Failed processes (their logs are in `logs/`): " + "; ".join(failed) + "."]
    lines += ["", "## Regenerating", "", "```sh", v.get("command", "?"), "```", ""]
    return "\n".join(lines)


def write_readme(out: Path) -> Path:
    """README.md of ``out`` from its points.csv and versions.json."""
    versions = json.loads(read_text(out / "versions.json", what="JSON"))
    path = out / "README.md"
    write_text(path, render_readme(read_points(out / "points.csv"), versions))
    return path
