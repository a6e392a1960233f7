"""The front-end overhead benchmark of ``scripts/bench_torch.py frontend`` (Note [Front-end
overhead]): its variants, its process schedule, the timing loop of one process, the records,
the medians and the text. Pure: no torch at import; the script's process passes its step and
the CUDA clock in.

Note [Front-end overhead]
    The question: with no workspace cap, what does a CNN's training step cost when its
    convolutions run through ``ucudnn.torch`` rather than through PyTorch's own? The target:
    ResNet-50 at batch 128, channels_last, fp32 and bf16, at most :data:`TARGET` times
    PyTorch's step.

    * The net: ResNet-50 v1 of scripts/torch_nets.py (the one scripts/time_pytorch.py times),
      in train mode, model and input in ``torch.channels_last``, input drawn once.
    * The step: time_pytorch.py's iteration: gradients set to None, forward, softmax
      cross-entropy against labels 0, backward; no optimizer step.
    * Data types (:data:`DTYPES`): ``float32``, parameters and input in fp32 and PyTorch's
      default math (TF32 convolutions allowed; the core's ``default`` math allows them too);
      ``bfloat16``, ``torch.autocast("cuda", torch.bfloat16)`` around the forward over fp32
      parameters, as PyTorch users train (``models`` casts the model instead).
    * Variants (:data:`VARIANTS`): ``pytorch``, eager with ``cudnn.benchmark`` on, PyTorch's
      own convolutions; ``ucudnn``, the same model after ``ucudnn.torch.convert(model,
      limit="unlimited")`` with the default registration style, policy and optimizer. With
      ``--compile`` also ``pytorch_compile`` and ``ucudnn_compile``: the same two under
      ``torch.compile(model)`` (default mode), whose Inductor and Triton caches the run's
      processes share (:func:`process_env`). With ``--operators`` also ``ucudnn_operators``:
      ``ucudnn`` with ``$UCUDNN_TORCH_EAGER=0``, every call through the dispatcher's operators
      (Note [Eager calls] in ucudnn/torch/eager.py), so that one run shows what the eager
      path gains. Every process is the same script and imports ``ucudnn.torch``; a PyTorch
      process never calls it.
    * Processes: each (dtype, variant) runs once per round in a process of its own, the
      round's order rotated by the round (:func:`schedule`), so that a drift of the GPU's
      clocks falls on every variant alike. The run's ucudnn processes share one benchmark
      cache: the first of each dtype benchmarks its convolutions in its first step, the others
      plan from the cache.
    * Per process (:func:`time_steps`): the first step's wall clock (cudnn.benchmark's search,
      ucudnn's benchmarks or plans, compilation), ``warmup`` steps, then ``iterations`` steps,
      each between two CUDA events and synchronised after; the process's time is their
      median. Beside each, the host's time for the same step: ``time.perf_counter`` from
      before its first launch to the return of ``backward()``, not synchronised. Where the
      host's time is close to the GPU's (``host_to_gpu`` near 1), the GPU waited for the host
      and the step is CPU-bound; well below 1, the host ran ahead (a host that fills CUDA's
      launch queue waits there too, so near 1 can also mean a long queue). The whole
      process's peak GPU memory is NVML's, sampled by the parent
      (:func:`.gpu_memory.run_watched`); the process adds its caching allocator's peak over
      the timed steps (``steady_max_allocated_bytes``).
    * Result (:func:`summarize`): per (dtype, variant) the median of the process medians; per
      dtype ``ucudnn`` / ``pytorch`` (and ``ucudnn_compile`` / ``pytorch_compile``) of those
      medians against :data:`TARGET`, with the same ratio per round beside it as a spread.

    Duration of the default run on one H200, estimated from the H200 results of the same net
    (not yet timed as a whole): PyTorch's ResNet-50 v1 step at batch 128 channels_last fp32 is
    40.8 ms and its first step 3.7-12.2 s (results/h200/engines, fusions, whole-iterations,
    time_pytorch.py); a bf16 autocast step should take less. A process is then about 5-8 s of start (Python,
    torch, CUDA context, the model), 4-12 s of first step and 60 steps of at most ~2.5 s:
    12-22 s, and 12 processes (2 dtypes x 2 variants x 3 rounds) 2.5-4.5 minutes. The first
    ucudnn process of each dtype also benchmarks the net from an empty cache: Caffe's cold
    benchmark of the same ResNet-50 (NHWC, powerOfTwo, both families) took 24-26 s on the H200
    (results/h200/nhwc-kernels), so about 25-40 s each without a cap. In all 3.5-6 minutes.
    --quick (batch 32, 4 processes of 5 steps) is about 1-1.5 minutes.
    --compile adds two variants whose first step compiles (47-65 s for ResNet-50 on the H200;
    the run's shared Inductor cache makes later processes faster): about 8-15 minutes more at
    3 rounds.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ..files import write_text
from ..vocab import InputError, format_size, parse_size
from .gpu_memory import WatchedRun, run_watched
from .torch_study import resume_run, rotated

#: the settings a run into an earlier run's folder must share with it (more rounds may differ)
RESUME_SETTINGS = ("batch", "iterations", "warmup", "limit", "engines", "quick", "dtypes",
                   "variants")
#: the target of the question: ucudnn's step at most this many times PyTorch's
TARGET = 1.03
NET = "resnet50"
DTYPES = ("float32", "bfloat16")
#: how each dtype runs, as the text says it
DTYPE_TEXT = {"float32": "fp32 parameters and input; TF32 convolutions, PyTorch's default",
              "bfloat16": "bf16 autocast over fp32 parameters"}
VARIANTS = ("pytorch", "ucudnn")
#: ``--operators``: ucudnn with every call through the operators
OPERATORS_VARIANT = "ucudnn_operators"
COMPILE_VARIANTS = ("pytorch_compile", "ucudnn_compile")
#: (variant, its baseline): the ratios the summary reports
PAIRS = (("ucudnn", "pytorch"), (OPERATORS_VARIANT, "pytorch"),
         ("ucudnn_compile", "pytorch_compile"))
#: the full run's defaults, and what --quick takes instead
DEFAULTS = {"batch": 128, "processes": 3, "iterations": 50, "warmup": 10}
QUICK = {"batch": 32, "processes": 1, "iterations": 5, "warmup": 2}
#: NVML's sampling interval (s) for a process's peak memory
NVML_INTERVAL = 0.005


@dataclasses.dataclass(frozen=True)
class Slot:
    """One process of a run: ``order`` its place in the run (from 1), ``round`` (from 1)."""
    order: int
    round: int
    dtype: str
    variant: str

    @property
    def stem(self) -> str:
        return f"{self.order:03d}.{self.dtype}.{self.variant}"

    @property
    def compiled(self) -> bool:
        return self.variant.endswith("_compile")


def variants(compile_too: bool, operators: bool = False) -> tuple:
    return (VARIANTS + ((OPERATORS_VARIANT,) if operators else ())
            + (COMPILE_VARIANTS if compile_too else ()))


def schedule(dtypes: Sequence[str], variant_names: Sequence[str], processes: int) -> List[Slot]:
    """Every process of a run: each round runs every (dtype, variant) once, in the order of
    the first round rotated by the round's index (:func:`.torch_study.rotated`)."""
    cells = [(dt, v) for dt in dtypes for v in variant_names]
    return [Slot(i, r, dt, v) for i, (r, (dt, v)) in enumerate(rotated(cells, processes), 1)]


def fill_run_counts(args, base: Mapping[str, int], counts: Sequence[str]) -> None:
    """Give the flags of ``base`` that ``args`` leaves None their value there, then check
    ``counts`` (at least 1), ``warmup`` (not negative) and ``timeout`` (positive);
    InputError naming the flag."""
    for flag, value in base.items():
        if getattr(args, flag) is None:
            setattr(args, flag, value)
    for flag in counts:
        if getattr(args, flag) < 1:
            raise InputError(f"--{flag}: must be at least 1, got {getattr(args, flag)}")
    if args.warmup < 0:
        raise InputError(f"--warmup: must not be negative, got {args.warmup}")
    if args.timeout <= 0:
        raise InputError(f"--timeout: must be positive, got {args.timeout}")


def resolve(args) -> None:
    """Check ``frontend``'s arguments and fill in the defaults (--quick's where it is given
    and the flag is not); InputError naming the flag. Sets ``args.dtype_list``,
    ``args.variant_list`` and ``args.slots``."""
    fill_run_counts(args, QUICK if args.quick else DEFAULTS, ("batch", "processes",
                                                             "iterations"))
    parse_size(args.limit, "--limit")
    names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    bad = [d for d in names if d not in DTYPES]
    if bad or not names:
        raise InputError(f"--dtypes: {','.join(bad) or repr(args.dtypes)} (expected some of "
                         f"{','.join(DTYPES)})")
    if len(set(names)) != len(names):
        raise InputError(f"--dtypes: {args.dtypes!r} names a dtype twice")
    if Path(args.out).is_file():
        raise InputError(f"--out: {args.out} is a file, not a folder")
    if args.cache and Path(args.cache).is_dir():
        raise InputError(f"--cache: {args.cache} is a folder, not a cache file")
    args.dtype_list = names
    args.variant_list = list(variants(args.compile, args.operators))
    args.slots = schedule(names, args.variant_list, args.processes)


# --------------------------------------------------------------------------- one process

def time_steps(step: Callable[[], None], *, iterations: int, warmup: int,
               mark: Callable[[], object], elapsed_ms: Callable[[object, object], float],
               wait: Callable[[object], None], sync: Callable[[], None],
               on_warm: Optional[Callable[[], None]] = None) -> dict:
    """One process's timing (Note [Front-end overhead]): the first step by the wall clock,
    ``warmup`` steps, ``on_warm()``, then ``iterations`` steps. ``mark()`` records a point on
    the GPU's timeline, ``elapsed_ms(a, b)`` is the time between two, ``wait(b)`` blocks until
    ``b`` has passed, ``sync()`` until the device is idle (the script passes CUDA events and
    ``torch.cuda.synchronize``)."""
    sync()
    t0 = time.perf_counter()
    step()
    sync()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(warmup):
        step()
    sync()
    if on_warm is not None:
        on_warm()
    gpu, host = [], []
    for _ in range(iterations):
        h0 = time.perf_counter()
        a = mark()
        step()
        b = mark()
        h1 = time.perf_counter()
        wait(b)
        gpu.append(elapsed_ms(a, b))
        host.append((h1 - h0) * 1e3)
    return step_times(first_ms, gpu, host)


def step_times(first_ms: float, gpu_ms: Sequence[float], host_ms: Sequence[float]) -> dict:
    """The record of one process's steps: each step's GPU and host milliseconds and their
    medians, and host over GPU."""
    med, host_med = statistics.median(gpu_ms), statistics.median(host_ms)
    return {"first_step_ms": first_ms, "median_ms": med, "min_ms": min(gpu_ms),
            "max_ms": max(gpu_ms), "host_median_ms": host_med,
            "host_to_gpu": host_med / med if med > 0 else None,
            "step_ms": list(gpu_ms), "host_ms": list(host_ms)}


def plan_facts(kernels: Sequence[object]) -> dict:
    """What a ucudnn process planned: its kernels, how many of them run in micro-batches
    (more than one), and the largest workspace of one."""
    sizes = [list(k.plan.micro_batches) for k in kernels]
    return {"kernels": len(sizes), "micro_batched": sum(len(s) > 1 for s in sizes),
            "max_workspace_bytes": max((int(k.workspace_size) for k in kernels), default=0)}


# ------------------------------------------------------------------------------ the parent

def process_command(python: str, script: str, args, slot: Slot, json_path: Path) -> List[str]:
    """The command line of ``slot``'s process (the script's hidden ``frontend-process``)."""
    return [python, script, "frontend-process", "--dtype", slot.dtype, "--variant",
            slot.variant, "--batch", str(args.batch), "--iterations", str(args.iterations),
            "--warmup", str(args.warmup), "--limit", args.limit, "--engines", args.engines,
            "--cache", str(cache_path(args)), "--json", str(json_path)]


def cache_path(args) -> Path:
    """The benchmark cache of the run's ucudnn processes: --cache, or one in --out."""
    return Path(args.cache) if args.cache else Path(args.out) / "ucudnn-cache.sqlite"


def process_env(slot: Slot, out: Path, base: Mapping[str, str]) -> Dict[str, str]:
    """``base`` with, for a compiled variant, Inductor's and Triton's caches in ``out`` (one
    pair for the run: the first compiled process of a kind compiles cold), and for
    ``ucudnn_operators`` the eager path turned off."""
    env = dict(base)
    if slot.variant == OPERATORS_VARIANT:
        env["UCUDNN_TORCH_EAGER"] = "0"         # ucudnn.torch.eager.EAGER_ENV
    if slot.compiled:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(out) / "inductor-cache")
        env["TRITON_CACHE_DIR"] = str(Path(out) / "triton-cache")
    return env


def process_record(slot: Slot, json_path: Path, run: WatchedRun, command: Sequence[str],
                   out: Path) -> dict:
    """The process's own JSON (a failed record where it wrote none) with what the parent saw:
    its place in the run, exit status, wall clock, NVML peak memory and GPU state."""
    try:
        rec = json.loads(Path(json_path).read_text())
    except (OSError, ValueError):
        rec = {"status": "failed", "error": f"exit status {run.rc}, no JSON "
               f"({Path(run.log_path).relative_to(out)})"}
    rec.update(dtype=slot.dtype, variant=slot.variant, order=slot.order, round=slot.round,
               exit_status=run.rc, timed_out=run.timed_out, wall_s=run.wall_s,
               log=str(Path(run.log_path).relative_to(out)),
               peak_gpu_memory_bytes=run.peak_gpu_memory_bytes, nvml_error=run.nvml_error,
               gpu_state=run.gpu_state, command=shlex.join(command))
    return rec


def process_line(rec: dict) -> str:
    head = f"{rec['order']:3d} r{rec['round']} {rec['dtype']} {rec['variant']}: {rec['status']}"
    if rec["status"] != "ok":
        return f"{head} ({rec.get('error', '')})"
    return (f"{head}, {rec['median_ms']:.2f} ms/step, host {rec['host_median_ms']:.2f} ms, "
            f"first {rec['first_step_ms'] / 1e3:.1f} s, wall {rec['wall_s']:.0f} s")


def _say(line: str) -> None:
    print(line, flush=True)


def run(args, command: Callable[[Slot, Path], List[str]], versions: dict,
        say: Optional[Callable[[str], None]] = None) -> dict:
    """Run every process of ``args.slots`` that OUT/frontend.json lacks (an earlier run's are
    kept: :func:`.torch_study.resume_run`) in turn, each watched by NVML; write
    OUT/frontend.json and OUT/frontend.txt after each; each process's line to ``say`` (default:
    stdout, flushed). Returns the document."""
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    settings = {"net": NET, "batch": args.batch, "memory_format": "channels_last",
                "dtypes": args.dtype_list, "dtype_runs_as": {d: DTYPE_TEXT[d] for d in
                                                             args.dtype_list},
                "variants": args.variant_list,
                "processes": args.processes, "iterations": args.iterations,
                "warmup": args.warmup, "limit": args.limit, "engines": args.engines,
                "cache": str(cache_path(args)), "quick": args.quick}
    procs, todo = resume_run(out / "frontend.json", "frontend", settings, RESUME_SETTINGS,
                             args.slots, ("dtype", "variant", "round"))
    if procs:
        (say or _say)(f"{out / 'frontend.json'}: {len(procs)} processes kept, "
                      f"{len(todo)} to run")
    t0 = time.perf_counter()
    earlier_s = sum(p.get("wall_s") or 0.0 for p in procs)
    doc: dict = {}
    for slot in todo:
        js = logs / f"{slot.stem}.json"
        js.unlink(missing_ok=True)          # an earlier run's into the same --out
        cmd = command(slot, js)
        watched = run_watched(cmd, timeout=args.timeout, log_path=logs / f"{slot.stem}.log",
                              env=process_env(slot, out, os.environ),
                              interval=NVML_INTERVAL, states=True)
        procs.append(process_record(slot, js, watched, cmd, out))
        (say or _say)(process_line(procs[-1]))
        doc = _write(out, versions, settings, procs, earlier_s + time.perf_counter() - t0)
    return doc or _write(out, versions, settings, procs, earlier_s)


def _write(out: Path, versions: dict, settings: dict, procs: List[dict], wall_s: float) -> dict:
    """OUT/frontend.json and OUT/frontend.txt of ``procs``; the document."""
    doc = {"subcommand": "frontend", "versions": versions, "settings": settings,
           "summary": summarize(procs), "wall_s": wall_s, "processes": procs}
    write_text(out / "frontend.json", json.dumps(doc, indent=2) + "\n")
    write_text(out / "frontend.txt", summary_text(doc))
    return doc


# ------------------------------------------------------------------------------- summary

def _median(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(procs: Sequence[dict]) -> dict:
    """``rows``: per (dtype, variant) the median over its ok processes of their medians (GPU
    and host), their range, the median first step and NVML peak (and the largest), and for
    a ucudnn variant what its first process planned (:func:`plan_facts`);
    ``ratios``: per dtype and :data:`PAIRS` pair with both sides, the ratio of the medians
    against :data:`TARGET` and the same ratio per round where both ran."""
    groups: Dict[tuple, List[dict]] = {}
    for p in procs:
        groups.setdefault((p["dtype"], p["variant"]), []).append(p)
    rows = []
    for (dt, v), ps in groups.items():
        ok = [p for p in ps if p.get("status") == "ok"]
        med = _median(p["median_ms"] for p in ok)
        host = _median(p["host_median_ms"] for p in ok)
        peaks = [p.get("peak_gpu_memory_bytes") for p in ok]
        rows.append({
            "dtype": dt, "variant": v, "processes": len(ps), "ok": len(ok),
            "statuses": ",".join(sorted({p.get("status", "?") for p in ps})),
            "median_ms": med,
            "process_min_ms": min((p["median_ms"] for p in ok), default=None),
            "process_max_ms": max((p["median_ms"] for p in ok), default=None),
            "host_median_ms": host,
            "host_to_gpu": host / med if host is not None and med else None,
            "first_step_ms": _median(p["first_step_ms"] for p in ok),
            "first_step_max_ms": max((p["first_step_ms"] for p in ok), default=None),
            "peak_gpu_memory_bytes": _median(peaks),
            "peak_gpu_memory_max_bytes": max((b for b in peaks if b is not None),
                                             default=None),
            "plans": next((p["plans"] for p in ok if p.get("plans")), None)})
    order = {d: i for i, d in enumerate(DTYPES)}
    vorder = {v: i for i, v in enumerate(variants(True, True))}
    rows.sort(key=lambda r: (order.get(r["dtype"], 99), vorder.get(r["variant"], 99)))
    by = {(r["dtype"], r["variant"]): r for r in rows}
    ratios = []
    for dt in sorted({r["dtype"] for r in rows}, key=lambda d: order.get(d, 99)):
        for v, base in PAIRS:
            ours, theirs = by.get((dt, v)), by.get((dt, base))
            if ours is None or theirs is None:
                continue
            ratio = (ours["median_ms"] / theirs["median_ms"]
                     if ours["median_ms"] and theirs["median_ms"] else None)
            ratios.append({"dtype": dt, "variant": v, "baseline": base, "ratio": ratio,
                           "target": TARGET, "met": None if ratio is None else ratio <= TARGET,
                           "per_round": _round_ratios(procs, dt, v, base)})
    return {"rows": rows, "ratios": ratios}


def _round_ratios(procs: Sequence[dict], dtype: str, variant: str, base: str) -> List[float]:
    """``variant`` / ``base`` of each round where both ran (ok), by round."""
    def medians(v):
        return {p["round"]: p["median_ms"] for p in procs if p["dtype"] == dtype
                and p["variant"] == v and p.get("status") == "ok"}
    ours, theirs = medians(variant), medians(base)
    return [ours[r] / theirs[r] for r in sorted(set(ours) & set(theirs)) if theirs[r]]


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f} ms"


def _bytes(v) -> str:
    return "-" if v is None else format_size(int(v))


def version_line(versions: dict) -> str:
    """The GPU, driver, CUDA, cuDNN and torch versions of ``bench_torch.py``'s record."""
    drv = versions.get("driver") or {}
    driver = drv.get("driver_version") or f"? ({drv.get('error', 'no NVML record')})"
    cuda_drv = drv.get("cuda_driver_version")
    return (f"GPU {versions.get('gpu', '?')}, driver {driver}"
            + (f" (CUDA {cuda_drv})" if cuda_drv else "")
            + f", CUDA {versions.get('cuda', '?')} (torch's), cuDNN "
            f"{versions.get('torch_cudnn', '?')} (torch's), torch {versions.get('torch', '?')}")


def summary_text(doc: dict) -> str:
    """OUT/frontend.txt: what was run on what, per dtype each variant's medians and the
    ratios against the target."""
    s, summary = doc["settings"], doc["summary"]
    lines = [f"Front-end overhead: ResNet-50 v1 training step (forward, cross-entropy, "
             f"backward; no optimizer step), batch {s['batch']}, channels_last model and "
             f"input, {s['processes']} round(s) x {s['iterations']} steps after "
             f"{s['warmup']} + 1; ucudnn: convert(limit={s['limit']}, engines={s['engines']})"
             + (" [--quick]" if s.get("quick") else ""),
             version_line(doc.get("versions") or {})]
    if doc.get("wall_s") is not None:
        n = sum(r["processes"] for r in summary["rows"])
        lines.append(f"{n} processes in {doc['wall_s']:.0f} s")
    for dt in s["dtypes"]:
        lines.append(f"{dt} ({DTYPE_TEXT[dt]}):")
        for r in (r for r in summary["rows"] if r["dtype"] == dt):
            rng = ("" if r["process_min_ms"] is None else
                   f"; processes {r['process_min_ms']:.2f}-{r['process_max_ms']:.2f}")
            h2g = "" if r["host_to_gpu"] is None else f" (host/GPU {r['host_to_gpu']:.2f})"
            first = ("-" if r["first_step_ms"] is None else
                     f"{r['first_step_ms'] / 1e3:.1f} s (max {r['first_step_max_ms'] / 1e3:.1f} s)")
            plans = r.get("plans")
            planned = ("" if not plans else f"; {plans['kernels']} kernels planned, "
                       f"{plans['micro_batched']} micro-batched")
            lines.append(f"  {r['variant']:<16} {_ms(r['median_ms'])}/step{rng}; host "
                         f"{_ms(r['host_median_ms'])}/step{h2g}; first step {first}; peak "
                         f"{_bytes(r['peak_gpu_memory_bytes'])}; {r['ok']}/{r['processes']} ok"
                         f"{planned}")
        for q in (q for q in summary["ratios"] if q["dtype"] == dt):
            if q["ratio"] is None:
                lines.append(f"  {q['variant']}/{q['baseline']}: - (a side did not run)")
                continue
            rounds = ", ".join(f"{x:.3f}" for x in q["per_round"])
            lines.append(f"  {q['variant']}/{q['baseline']} {q['ratio']:.3f} (target <= "
                         f"{q['target']}: {'met' if q['met'] else 'not met'}); per round "
                         f"{rounds or '-'}")
    return "\n".join(lines) + "\n"
