"""The memory-capped study of ``scripts/bench_torch.py memcap`` (Note [Memory-capped study]):
its arguments, process schedule, the rows of a run, the target per memory cap, the text and the
figure. Pure: no torch at import; the script's model processes (``model-process``, shared with
``models``) set the cap and time the steps.

Note [Memory-capped study]
    The question: under a per-process memory cap at which PyTorch's default fails or falls
    back to a slow algorithm, does ``ucudnn.torch`` run the same model at close to its
    unlimited speed? The models are ``models``'s, by default its small pair (a small 3-D
    UNet's training step and a CogVideoX-like decode, :data:`.torch_study.SMALL_MODELS`), in
    fp32 and bf16.

    * The cap: ``torch.cuda.set_per_process_memory_fraction(cap / total)``, set in the model
      process before it allocates anything, ``total`` the device's memory as PyTorch reports
      it. It bounds PyTorch's caching allocator: every tensor, PyTorch's cuDNN workspaces and
      ``ucudnn.torch``'s workspaces (taken from that allocator). It does not bound the CUDA
      context, the cuDNN and cuBLAS handles, or the buffers of ucudnn's own benchmarks (the
      core allocates those itself, in the first step of a shape the cache lacks); the NVML
      whole-process peak of every process is recorded beside it to show what it held.
    * Sides (:data:`SIDES`): ``pytorch``, the model as it is with ``cudnn.benchmark`` on
      (PyTorch's benchmark leaves out algorithms whose workspace it cannot allocate, so a
      cap can make it choose a slower one, or a step runs out of memory); ``ucudnn``,
      ``ucudnn.torch.convert(model, limit=--cap)``, a per-call workspace cap (default
      :data:`DEFAULT_CAP`). Each side runs at every memory cap and once without one (the
      unlimited references, :data:`UNLIMITED`).
    * Processes: one per (model, dtype, side, memory cap), ``--processes`` rounds; each round
      runs every variant of a (model, dtype) once, its order rotated by the round
      (:func:`schedule`). The run's ucudnn processes share one benchmark cache. A process
      records ``ok``, ``oom`` (PyTorch's out-of-memory error, or a cuDNN or cuBLAS
      allocation failure) or ``failed`` with its error in one line; an OOM is a result.
    * Per process: the median of ``--iterations`` CUDA-event timed steps after the first
      step and ``--warmup`` more, and the NVML peak. Per variant (:func:`summarize`): the
      median of its ok processes' medians, and its processes' statuses.
    * The target per memory cap (:func:`evaluate`): the cap *binds* where a PyTorch process
      ran out of memory at it, or PyTorch's median there is at least :data:`BINDS_AT` times
      its unlimited median. Where it binds, the target is met when every ucudnn process at
      the cap ran ok and ucudnn's median there is at most :data:`TARGET` times ucudnn's
      unlimited median. Where it does not bind, no claim is made; where a side failed or a
      reference is missing, the verdict is undetermined and says why.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from ..vocab import UNLIMITED, InputError, format_size, parse_size
from . import torch_study as study
from .plots import _plt, _save
from .torch_frontend import fill_run_counts, version_line

SIDES: Tuple[str, ...] = ("pytorch", "ucudnn")
#: the label of no memory cap (the references)
UNLIMITED_CAP = "unlimited"
#: PyTorch at a cap this many times slower than unlimited: the cap binds
BINDS_AT = 1.5
#: ucudnn at a binding cap at most this many times its unlimited time: the target
TARGET = 1.10
DEFAULT_CAP = "256MiB"
DEFAULT_MEMORY_CAPS = "1GiB,2GiB,4GiB,8GiB"
#: --quick: the small models of ``models --quick`` under two caps
QUICK_MEMORY_CAPS = "256MiB,1GiB"
DEFAULTS = {"processes": 3, "iterations": 20, "warmup": 5}
QUICK = {"processes": 1, "iterations": 3, "warmup": 1}
VERDICTS = ("met", "not met", "does not bind", "undetermined")

HELP = """Whole models under a per-process memory cap (Note [Memory-capped study] in
ucudnn/experiments/torch_memcap.py): the models of `models` (by default the small 3-D UNet's
training step and CogVideoX-like decode) in fp32 and bf16, each process under
torch.cuda.set_per_process_memory_fraction(cap / device memory) set before any allocation:
PyTorch with cudnn.benchmark, and ucudnn.torch.convert(limit=--cap); both also without a memory
cap (the references). --processes rounds, the order rotated per round. Per process: ok, oom or
failed, the median of --iterations CUDA-event timed steps, the NVML whole-process peak. Per
memory cap: the cap binds where PyTorch ran out of memory or is >= 1.5x its unlimited time;
there the target is ucudnn <= 1.10x its unlimited time. Writes OUT/memcap.json (every process,
the rows, the verdicts), OUT/memcap.txt, OUT/memcap.png and OUT/logs/; the processes of an earlier run
into OUT with the same settings are kept, so a run cut short goes on where it stopped, and
--models, --dtypes or --memory-caps can split one into commands. --quick: the small
models, bf16, memory caps 256MiB and 1GiB, one round, 3 steps: 12 processes, a few minutes.
Full (default memory caps 1GiB,2GiB,4GiB,8GiB): 120 processes, not timed yet (models's 96
take an estimated 1-2 GPU hours)."""


def add_arguments(p, dtypes: str) -> None:
    """``memcap``'s flags on the subparser ``p``."""
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--models", default=",".join(study.SMALL_MODELS))
    p.add_argument("--dtypes", default=dtypes)
    p.add_argument("--memory-caps", help=f"per-process memory caps (default "
                   f"{DEFAULT_MEMORY_CAPS}; --quick: {QUICK_MEMORY_CAPS})")
    p.add_argument("--cap", default=DEFAULT_CAP, help="ucudnn's workspace per call")
    p.add_argument("--processes", type=int, help="rounds (default 3; --quick: 1)")
    p.add_argument("--iterations", type=int, help="timed steps (default 20; --quick: 3)")
    p.add_argument("--warmup", type=int, help="steps after the first (default 5; --quick: 1)")
    p.add_argument("--engines", default="both")
    p.add_argument("--timeout", type=float, default=900.0, help="per process (s)")


def parse_memory_caps(text: str) -> List[Tuple[str, int]]:
    """``[(label, bytes)]`` of a comma-separated list of memory caps, smallest first;
    InputError naming ``--memory-caps`` for a size that does not parse, zero, unlimited (the
    references run anyway) or a cap given twice."""
    out: List[Tuple[str, int]] = []
    for part in (s.strip() for s in text.split(",")):
        if not part:
            continue
        n = parse_size(part, "--memory-caps")
        if n == 0:
            raise InputError(f"--memory-caps: {part!r}: a memory cap must be more than 0")
        if n >= UNLIMITED:
            raise InputError(f"--memory-caps: {part!r}: give sizes; the unlimited references "
                             "run anyway")
        same = next((label for label, b in out if b == n), None)
        if same is not None:
            raise InputError(f"--memory-caps: {part!r} is {same!r} again")
        out.append((part, n))
    if not out:
        raise InputError("--memory-caps: no memory cap given")
    return sorted(out, key=lambda c: c[1])


def check_device(caps: Sequence[Tuple[str, int]], total_bytes: int) -> None:
    """InputError for a memory cap larger than the device's ``total_bytes``."""
    for label, n in caps:
        if n > total_bytes:
            raise InputError(f"--memory-caps: {label} is more than this device's memory, "
                             f"{format_size(total_bytes)} ({total_bytes} bytes)")


def fraction(cap_bytes: int, total_bytes: int) -> float:
    """The fraction of the device's memory that caps a process at ``cap_bytes``; ValueError
    where the cap is not within (0, total]."""
    if not 0 < cap_bytes <= total_bytes:
        raise ValueError(f"memory cap {cap_bytes} bytes is not within this device's "
                         f"{total_bytes} bytes")
    return cap_bytes / total_bytes


def resolve(args) -> None:
    """Check ``memcap``'s arguments and fill in the defaults (--quick's where it is given);
    InputError naming the flag. Sets ``memory_cap_list``, ``model_list``, ``dtype_list`` and
    ``slots``."""
    fill_run_counts(args, QUICK if args.quick else DEFAULTS, ("processes", "iterations"))
    parse_size(args.cap, "--cap")
    args.memory_cap_list = parse_memory_caps(
        args.memory_caps or (QUICK_MEMORY_CAPS if args.quick else DEFAULT_MEMORY_CAPS))
    if args.quick and args.dtypes == ",".join(study.DTYPES):
        args.dtypes = "bfloat16"
    args.model_list = study.parse_choice("models", args.models, tuple(study.MODELS))
    args.dtype_list = study.parse_choice("dtypes", args.dtypes, study.DTYPES)
    args.slots = schedule(args.model_list, args.dtype_list,
                          [c for c, _ in args.memory_cap_list], args.processes)


# ------------------------------------------------------------------------------- schedule

@dataclasses.dataclass(frozen=True)
class Slot:
    """One process of a run: ``side`` under ``memory_cap`` (a size, or unlimited)."""
    model: str
    dtype: str
    round: int
    side: str
    memory_cap: str


def variants(memory_caps: Sequence[str]) -> List[Tuple[str, str]]:
    """The (side, memory cap) of one round: the references, then both sides per cap."""
    return [(s, m) for m in [UNLIMITED_CAP] + list(memory_caps) for s in SIDES]


def schedule(models: Sequence[str], dtypes: Sequence[str], memory_caps: Sequence[str],
             processes: int) -> List[Slot]:
    """Every process of a run: per (model, dtype) ``processes`` rounds of every variant, in
    an order rotated by the round (:func:`.torch_study.rotated`)."""
    return [Slot(m, dt, r, s, c) for m in models for dt in dtypes
            for r, (s, c) in study.rotated(variants(memory_caps), processes)]


#: the settings that a run's processes must share for a later run into the same folder to
#: keep them (:func:`resume`)
SHARED_SETTINGS = ("cap", "iterations", "warmup", "engines", "quick", "device_total_bytes")


#: the fields that name a process of the study
SLOT_FIELDS = ("model", "dtype", "round", "side", "memory_cap")


def slot_key(rec) -> tuple:
    """The (model, dtype, round, side, memory cap) of a process record or a :class:`Slot`."""
    return study.record_key(rec, SLOT_FIELDS)


def resume(path, settings: dict, slots: Sequence[Slot]) -> Tuple[List[dict], List[Slot]]:
    """``(kept, todo)`` of :func:`.torch_study.resume_run` for memcap.json at ``path``: its
    processes all kept, the slots it lacks to run; the earlier run's
    :data:`SHARED_SETTINGS` must be these."""
    return study.resume_run(path, "memcap", settings, SHARED_SETTINGS, slots, SLOT_FIELDS)


def workspace_cap(side: str, cap: str) -> str:
    """The per-call workspace cap of a side's process: ucudnn's ``cap``; PyTorch none."""
    return cap if side == "ucudnn" else "unlimited"


# -------------------------------------------------------------------------------- summary

def _status(ps: Sequence[dict]) -> str:
    """A variant's status over its processes: failed where one failed, else oom where one
    ran out of memory, else ok; missing where it has none."""
    got = {p.get("status") for p in ps}
    if not ps:
        return "missing"
    return next((s for s in ("failed", "oom") if s in got), "ok" if got == {"ok"} else "failed")


def summarize(procs: Sequence[dict]) -> List[dict]:
    """Per (model, dtype, side, memory cap): the processes by status, the median of the ok
    processes' medians and their range, the largest NVML peak of any process, the
    convolutions converted and the first error."""
    groups: Dict[tuple, List[dict]] = {}
    for p in procs:
        groups.setdefault((p["model"], p["dtype"], p["side"], p["memory_cap"]), []).append(p)
    rows = []
    for (m, dt, side, mc), ps in groups.items():
        ok = [p for p in ps if p.get("status") == "ok"]
        meds = [p["median_ms"] for p in ok]
        peaks = [p["peak_gpu_memory_bytes"] for p in ps if p.get("peak_gpu_memory_bytes")]
        rows.append({
            "model": m, "dtype": dt, "side": side, "memory_cap": mc,
            "memory_cap_bytes": study.cap_bytes(mc), "cap": ps[0].get("cap"),
            "processes": len(ps), "ok": len(ok),
            "oom": sum(p.get("status") == "oom" for p in ps),
            "failed": sum(p.get("status") not in ("ok", "oom") for p in ps),
            "status": _status(ps),
            "median_ms": statistics.median(meds) if meds else None,
            "process_min_ms": min(meds, default=None),
            "process_max_ms": max(meds, default=None),
            "peak_gpu_memory_bytes": max(peaks, default=None),
            "converted": next((p["converted"] for p in ok if "converted" in p), None),
            "error": next((p.get("error") for p in ps if p.get("status") != "ok"), None)})
    return sorted(rows, key=lambda r: (r["model"], r["dtype"], r["side"],
                                       -1 if r["memory_cap_bytes"] is None
                                       else r["memory_cap_bytes"]))


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def _said(row: dict) -> str:
    """A variant's status, with its first error where it has one."""
    return row["status"] + (f" ({row['error']})" if row.get("error") else "")


def evaluate(rows: Sequence[dict]) -> List[dict]:
    """Per (model, dtype, memory cap) of :func:`summarize`'s rows: whether the cap binds
    PyTorch and, where it does, whether ucudnn meets the target (Note [Memory-capped
    study]); ``verdict`` one of :data:`VERDICTS`, ``why`` in words."""
    by = {(r["model"], r["dtype"], r["side"], r["memory_cap"]): r for r in rows}
    out = []
    cells = sorted({(r["model"], r["dtype"], r["memory_cap"], r["memory_cap_bytes"])
                    for r in rows if r["memory_cap"] != UNLIMITED_CAP},
                   key=lambda c: (c[0], c[1], c[3]))
    for m, dt, mc, nbytes in cells:
        def get(side, cap):
            return by.get((m, dt, side, cap)) or {"status": "missing", "median_ms": None,
                                                   "processes": 0, "oom": 0, "error": None}
        theirs, theirs_ref = get("pytorch", mc), get("pytorch", UNLIMITED_CAP)
        ours, ours_ref = get("ucudnn", mc), get("ucudnn", UNLIMITED_CAP)
        slowdown = (_ratio(theirs["median_ms"], theirs_ref["median_ms"])
                    if theirs["status"] == "ok" and theirs_ref["status"] == "ok" else None)
        ratio = (_ratio(ours["median_ms"], ours_ref["median_ms"])
                 if ours["status"] == "ok" and ours_ref["status"] == "ok" else None)
        binds, by_what, why = None, None, None
        if theirs_ref["status"] != "ok":        # PyTorch without a cap: nothing to bind
            why = f"pytorch unlimited reference {_said(theirs_ref)}"
        elif theirs["oom"]:
            binds, by_what = True, "oom"
        elif theirs["status"] != "ok":
            why = f"pytorch at the cap {_said(theirs)}"
        elif slowdown is not None:
            binds, by_what = slowdown >= BINDS_AT, "slowdown"
        else:
            why = "pytorch has no time at the cap"
        if binds is None:
            verdict = "undetermined"
        elif not binds:
            verdict = "does not bind"
            why = (f"pytorch {slowdown:.2f}x its unlimited time (< {BINDS_AT}): no claim")
        elif ours["status"] != "ok":
            verdict = "not met"
            why = f"ucudnn at the cap {_said(ours)}"
        elif ratio is None:
            verdict = "undetermined"
            why = f"ucudnn unlimited reference {_said(ours_ref)}"
        else:
            verdict = "met" if ratio <= TARGET else "not met"
            why = f"ucudnn {ratio:.3f}x its unlimited time (target <= {TARGET:.2f})"
        out.append({"model": m, "dtype": dt, "memory_cap": mc, "memory_cap_bytes": nbytes,
                    "pytorch_status": theirs["status"], "pytorch_oom": theirs["oom"],
                    "pytorch_processes": theirs["processes"],
                    "pytorch_ms": theirs["median_ms"],
                    "pytorch_unlimited_ms": theirs_ref["median_ms"],
                    "pytorch_slowdown": slowdown,
                    "pytorch_peak_bytes": theirs.get("peak_gpu_memory_bytes"),
                    "binds": binds, "binds_by": by_what,
                    "ucudnn_status": ours["status"], "ucudnn_oom": ours["oom"],
                    "ucudnn_processes": ours["processes"], "ucudnn_ms": ours["median_ms"],
                    "ucudnn_peak_bytes": ours.get("peak_gpu_memory_bytes"),
                    "ucudnn_unlimited_ms": ours_ref["median_ms"], "ucudnn_ratio": ratio,
                    "ucudnn_to_pytorch_unlimited": _ratio(ours["median_ms"],
                                                          theirs_ref["median_ms"]),
                    "target": TARGET, "binds_at": BINDS_AT, "verdict": verdict, "why": why})
    return out


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f} ms"


def _size(n: Optional[int]) -> str:
    return "-" if n is None else format_size(n)


def _side_text(status: str, ms: Optional[float], oom: int = 0, n: int = 0) -> str:
    if status == "ok":
        return _ms(ms)
    if status == "oom" and ms is not None:
        return f"oom in {oom}/{n} processes, {_ms(ms)} in the others"
    return status if status != "oom" else f"oom in {oom}/{n} processes"


def verdict_line(e: dict) -> str:
    """One line of a (model, dtype, memory cap): both sides at the cap and the verdict."""
    theirs = _side_text(e["pytorch_status"], e["pytorch_ms"], e["pytorch_oom"],
                        e["pytorch_processes"])
    slow = "" if e["pytorch_slowdown"] is None else f" ({e['pytorch_slowdown']:.2f}x unlimited)"
    ours = _side_text(e["ucudnn_status"], e["ucudnn_ms"], e["ucudnn_oom"],
                      e["ucudnn_processes"])
    ratio = "" if e["ucudnn_ratio"] is None else f" ({e['ucudnn_ratio']:.3f}x unlimited)"
    binds = f"binds ({e['binds_by']}), " if e["binds"] else ""
    return (f"{e['model']} {e['dtype']} memory cap {e['memory_cap']}: pytorch {theirs}{slow}, "
            f"peak {_size(e['pytorch_peak_bytes'])}; ucudnn {ours}{ratio}, peak "
            f"{_size(e['ucudnn_peak_bytes'])}; {binds}{e['verdict']}: {e['why']}")


def summary_text(doc: dict) -> str:
    """OUT/memcap.txt: what ran on what, the references, and a line per (model, dtype,
    memory cap)."""
    s, rows = doc["settings"], doc["summary"]
    total = s.get("device_total_bytes")
    caps = sorted({(r["memory_cap_bytes"], r["memory_cap"]) for r in rows
                   if r["memory_cap_bytes"] is not None})

    def names(field):
        return ", ".join(dict.fromkeys(r[field] for r in rows)) or "-"
    lines = [f"Memory-capped models: {names('model')}; {names('dtype')}; memory caps "
             f"{', '.join(c for _, c in caps) or '-'}"
             + (f" of {format_size(total)}" if total else ""),
             f"{s['processes']} round(s) x {s['iterations']} steps after {s['warmup']} + 1; "
             f"pytorch: cudnn.benchmark; ucudnn: convert(limit={s['cap']}, "
             f"engines={s['engines']})" + (" [--quick]" if s.get("quick") else ""),
             version_line(doc.get("versions") or {})]
    for r in rows:
        if r["memory_cap"] == UNLIMITED_CAP:
            lines.append(f"{r['model']} {r['dtype']} {r['side']} unlimited: "
                         f"{_side_text(r['status'], r['median_ms'], r['oom'], r['processes'])}"
                         f", peak {_size(r['peak_gpu_memory_bytes'])}, "
                         f"{r['ok']}/{r['processes']} ok")
    lines += [verdict_line(e) for e in doc["verdicts"]]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[dict], out: str) -> int:
    """Median step time against the memory cap, one panel per (model, dtype), a line per
    side, its unlimited reference dashed; a cap where a side had no ok process is marked x at
    the panel's foot. Returns the points drawn; InputError where there is nothing to draw."""
    panels = sorted({(r["model"], r["dtype"]) for r in rows})
    if not any(r["median_ms"] for r in rows):
        raise InputError(f"{out}: no process ran ok: nothing to draw")
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    drawn = 0
    for ax, (m, dt) in zip(axes[0], panels):
        for side, color in zip(SIDES, ("#ee6677", "#4477aa")):
            mine = [r for r in rows if (r["model"], r["dtype"], r["side"]) == (m, dt, side)]
            pts = [(r["memory_cap_bytes"] / 2 ** 30, r["median_ms"]) for r in mine
                   if r["memory_cap_bytes"] and r["median_ms"]]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=color, label=side)
                drawn += len(pts)
            ref = next((r["median_ms"] for r in mine if r["memory_cap"] == UNLIMITED_CAP), None)
            if ref:
                ax.axhline(ref, color=color, linestyle="--", linewidth=1,
                           label=f"{side} unlimited")
                drawn += 1
            failed = [r["memory_cap_bytes"] / 2 ** 30 for r in mine
                      if r["memory_cap_bytes"] and r["ok"] == 0]
            if failed:
                ax.scatter(failed, [0] * len(failed), marker="x", color=color, zorder=3,
                           label=f"{side}: no ok process")
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("per-process memory cap (GiB)")
        ax.set_ylabel("median step (ms)")
        ax.set_title(f"{m}, {dt}")
        ax.legend(fontsize=7)
    _save(fig, out)
    return drawn
