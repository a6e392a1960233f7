#!/usr/bin/env python3
"""ucudnn.torch on this GPU: the operators' overhead, the 3-D layer study, whole 3-D models and
a second process's start (docs/torch.md, "The 3-D study").

    python scripts/bench_torch.py overhead --out /tmp/overhead.json
    python scripts/bench_torch.py layers3d --out DIR [--quick]
    python scripts/bench_torch.py models --out DIR [--quick]
    python scripts/bench_torch.py startup --out DIR [--quick]
    python scripts/bench_torch.py memcap --out DIR [--quick] [--memory-caps 1GiB,4GiB]
    python scripts/bench_torch.py frontend --out DIR [--quick] [--compile]

``overhead``: what one convolution call costs the host, by the way it reaches the core (the
registration styles of Note [Two registration styles] in ucudnn/torch/ops.py, the eager path
of Note [Eager calls] in ucudnn/torch/eager.py, the core alone, PyTorch's own); its variants
and timing in scripts/torch_overhead.py.

``frontend``: a ResNet-50 training step through ucudnn.torch with no cap against PyTorch's own
convolutions, fp32 and bf16 autocast, channels_last (Note [Front-end overhead] in
ucudnn/experiments/torch_frontend.py, where its schedule, timing loop and medians live).

``layers3d``, ``models`` and ``startup``: the 3-D study, its layers, rows and schedule in
ucudnn/experiments/torch_study.py, its models in scripts/study3d_models.py; ``memcap``: the same
models under a per-process memory cap (ucudnn/experiments/torch_memcap.py). Each subcommand's
--help says what it measures and how long it takes. GPU only; bad arguments are refused in one
line with exit status 2 before torch is imported.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from ucudnn.experiments import torch_frontend as frontend_bench
from ucudnn.experiments import torch_memcap as memcap_study
from ucudnn.experiments import torch_study as study
from ucudnn.experiments.gpu_memory import run_watched
from ucudnn.experiments.nvml import versions as nvml_versions
from ucudnn.files import write_text
from ucudnn.vocab import ENGINES, InputError

torch = ops = F = overhead_bench = None    # bound by _load_torch() once the arguments are checked


def _load_torch() -> None:
    """Import torch and ucudnn.torch; without torch, one line and exit status 2."""
    global torch, ops, F, settings_from, config_id, planned_kernels, overhead_bench
    try:
        import torch as _torch
    except ImportError:
        print("bench_torch.py: needs PyTorch (pip install 'ucudnn[torch]')", file=sys.stderr)
        sys.exit(2)
    torch = _torch
    import torch.nn.functional as _F
    import ucudnn.torch  # noqa: F401  (registers the operators of the chosen style)
    from ucudnn.torch import ops as _ops
    from ucudnn.torch.convert import settings_from as _sf
    from ucudnn.torch.runtime import config_id as _ci, planned_kernels as _pk
    F, ops, settings_from, config_id, planned_kernels = _F, _ops, _sf, _ci, _pk
    here = str(Path(__file__).resolve().parent)       # torch_overhead, even under python -P
    if here not in sys.path:
        sys.path.insert(0, here)
    import torch_overhead
    overhead_bench = torch_overhead


def _machine() -> dict:
    return overhead_bench.machine()


def _is_oom(e: BaseException) -> bool:
    """PyTorch's out-of-memory error, or a cuDNN or cuBLAS allocation failure."""
    text = str(e).lower()
    return (isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in text
            or "status_alloc_failed" in text)


def _error_line(e: BaseException, limit: int) -> str:
    """``e`` in one line for a record: its type and the first ``limit`` characters of its
    message's first line."""
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0][:limit] if text else ''}"


# ------------------------------------------------------------------------------------ layers3d

DIL = [1, 1, 1]


def _events_ms(step, calls: int, reps: int) -> float:
    return overhead_bench.events_ms(step, calls, reps)


def _pytorch_call(op, layer, x, w, dy):
    st, pad = list(layer.stride), list(layer.pad)
    if op == "fwd":
        return lambda: F.conv3d(x, w, None, st, pad)
    mask = [op == "bwd_data", False, op == "bwd_filter"]
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, st, pad, DIL, False,
                                                       [0, 0, 0], 1, mask)


def _ucudnn_call(op, layer, x, w, dy, config):
    st, pad = list(layer.stride), list(layer.pad)
    impl = ops.IMPLS[f"conv_{op}"][0]
    if op == "fwd":
        return lambda: impl(x, w, st, pad, DIL, 1, config)
    if op == "bwd_data":
        return lambda: impl(w, dy, list(x.shape), st, pad, DIL, 1, config)
    return lambda: impl(x, dy, list(w.shape), st, pad, DIL, 1, config)


def _measure_pytorch(op, layer, x, w, dy, args) -> dict:
    """cudnn.benchmark's choice: its time, and its workspace as the peak-memory delta of a
    steady call less the result's bytes."""
    step = _pytorch_call(op, layer, x, w, dy)
    try:
        step()                                  # cudnn.benchmark searches here
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        got = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if t is not None]
        result = sum(t.numel() * t.element_size() for t in got)
        del out, got
        ms = _events_ms(step, args.calls, args.reps)
    except Exception as e:  # noqa: BLE001 - an OOM or a cuDNN error is the point's result
        torch.cuda.empty_cache()
        return {"pytorch_status": "oom" if _is_oom(e) else "failed",
                "error": f"pytorch: {_error_line(e, 200)}"}
    return {"pytorch_status": "ok", "pytorch_measured_ms": ms, "pytorch_peak_bytes": peak,
            "pytorch_workspace_bytes": max(0, peak - result)}


def _measure_ucudnn(side, op, layer, x, w, dy, family, cap, dtype, args) -> dict:
    """The plan under ``cap`` (``side`` ucudnn: the policy's; undivided: the fastest single
    algorithm): predicted by the core's benchmark, then run and timed."""
    policy = "undivided" if side == "undivided" else args.policy
    settings = settings_from(limit=cap if cap != "unlimited" else "unlimited", engines=family,
                             policy=policy)
    config = config_id(settings)
    step = _ucudnn_call(op, layer, x, w, dy, config)
    try:
        step()                                  # benchmarks through the cache, plans
        torch.cuda.synchronize()
        key = (op, tuple(layer.x_size), tuple(layer.w_size), tuple(layer.stride),
               tuple(layer.pad), tuple(DIL), 1, "NCHW", dtype, x.device.index, config)
        kern = planned_kernels()[key]
        ms = _events_ms(step, args.calls, args.reps)
    except Exception as e:  # noqa: BLE001 - recorded as the point's result
        torch.cuda.empty_cache()
        return {f"{side}_status": "oom" if _is_oom(e) else "failed",
                "error": f"{side}: {_error_line(e, 200)}"}
    row = {f"{side}_status": "ok", f"{side}_predicted_ms": kern.plan.time_ms,
           f"{side}_workspace_bytes": kern.workspace_size, f"{side}_measured_ms": ms}
    if side == "ucudnn":
        row["ucudnn_sizes"] = "+".join(map(str, kern.plan.micro_batches))
    return row


def _layer_rows(layer, dtype_name, families, caps, opsel, args):
    """Every row of one layer in one dtype; a layer whose tensors do not fit is recorded."""
    dtype = getattr(torch, dtype_name)
    base = study.layer_columns(layer, dtype_name)
    keys = [(fam, op, cap) for fam in families for op in opsel for cap, _ in caps]
    try:
        x = torch.randn(layer.x_size, device="cuda", dtype=dtype)
        w = torch.randn(layer.w_size, device="cuda", dtype=dtype)
        dy = torch.randn(layer.y_size, device="cuda", dtype=dtype)
    except Exception as e:  # noqa: BLE001
        torch.cuda.empty_cache()
        status = "oom" if _is_oom(e) else "failed"
        return [dict(base, family=f, dtype=dtype_name, op=o, cap=c,
                     cap_bytes=study.cap_bytes(c), ucudnn_status=status,
                     undivided_status=status, pytorch_status=status,
                     error=f"tensors: {type(e).__name__}") for f, o, c in keys]
    rows = []
    for op in opsel:
        torch.backends.cudnn.benchmark = True
        theirs = _measure_pytorch(op, layer, x, w, dy, args)
        for fam in families:
            for cap, _ in caps:
                row = dict(base, family=fam, dtype=dtype_name, op=op, cap=cap,
                           cap_bytes=study.cap_bytes(cap), **theirs)
                errors = [theirs.get("error")]
                for side in ("ucudnn", "undivided"):
                    got = _measure_ucudnn(side, op, layer, x, w, dy, fam, cap, dtype, args)
                    errors.append(got.pop("error", None))
                    row.update(got)
                row["error"] = "; ".join(e for e in errors if e) or None
                rows.append(row)
                print(f"{layer.name} {fam} {dtype_name} {op} {cap}: ucudnn "
                      f"{_ms(row, 'ucudnn')}, undivided {_ms(row, 'undivided')}, pytorch "
                      f"{_ms(row, 'pytorch')}", flush=True)
    del x, w, dy
    torch.cuda.empty_cache()
    return rows


def _ms(row, side) -> str:
    if row.get(f"{side}_status") != "ok":
        return row.get(f"{side}_status", "?")
    return f"{row[f'{side}_measured_ms']:.3f} ms"


def layers3d(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    done = study.read_points(out / "points.csv") if (out / "points.csv").is_file() else []
    have = {(r["layer"], r["family"], r["dtype"], r["op"], r["cap"]) for r in done}
    rows = list(done)
    for layer in args.layer_list:
        for dt in args.dtype_list:
            todo = [(f, o, c) for f in args.family_list for o in args.op_list
                    for c, _ in args.cap_list if (layer.name, f, dt, o, c) not in have]
            if not todo:                        # --out of an earlier run: kept
                continue
            rows = [r for r in rows if (r["layer"], r["dtype"]) != (layer.name, dt)]
            rows += _layer_rows(layer, dt, args.family_list, args.cap_list, args.op_list, args)
            study.write_points(out / "points.csv", rows)
    study.write_points(out / "points.csv", rows)
    write_text(out / "versions.json", json.dumps(_versions(args), indent=2) + "\n")
    try:
        n = study.plot_points(study.read_points(out / "points.csv"),
                              str(out / "workspace_vs_time.png"))
        print(f"{out / 'workspace_vs_time.png'}: {n} points")
    except InputError as e:
        print(f"bench_torch.py: no figure: {e}", file=sys.stderr)
    print(f"{out / 'points.csv'}: {len(rows)} rows")
    return 0


def _versions(args) -> dict:
    return dict(_machine(), driver=nvml_versions(), argv=sys.argv[1:],
                command=shlex.join([sys.executable] + sys.argv))


# ------------------------------------------------------------------------- models, startup

def model_process(args) -> int:
    """One process of ``models``, ``startup`` or ``memcap`` (started by them): cap its memory
    (``--memory-cap``, before any allocation), build the model, convert it for side ucudnn,
    time its first step (wall clock, benchmarks included) and then ``--iterations`` steps with
    CUDA events; the record goes to ``--json`` whatever happens."""
    import study3d_models
    rec = {"model": args.model, "dtype": args.dtype, "side": args.side, "cap": args.cap,
           "status": "failed"}
    try:
        if args.memory_cap is not None:
            rec.update(memory_cap=args.memory_cap,
                       memory_cap_bytes=study.cap_bytes(args.memory_cap))
        if rec.get("memory_cap_bytes") is not None:
            total = torch.cuda.get_device_properties(0).total_memory
            rec.update(device_total_bytes=total,
                       memory_fraction=memcap_study.fraction(rec["memory_cap_bytes"], total))
            torch.cuda.set_per_process_memory_fraction(rec["memory_fraction"], 0)
        spec = (study.QUICK_MODELS if args.quick else study.MODELS)[args.model]
        torch.manual_seed(0)
        torch.backends.cudnn.benchmark = True
        model, x, kind = study3d_models.build(spec)
        dtype = getattr(torch, args.dtype)
        model, x = model.cuda().to(dtype), x.cuda().to(dtype)
        if args.memory_format == "channels_last":
            mf = torch.channels_last_3d if x.dim() == 5 else torch.channels_last
            model, x = model.to(memory_format=mf), x.contiguous(memory_format=mf)
        if args.side == "ucudnn":
            report = ucudnn_convert(model, limit=args.cap, engines=args.engines,
                                    cache=args.cache)
            rec["converted"] = len(report.converted)
            rec["kept"] = [list(k) for k in report.kept]
            if not report.converted:    # PyTorch against itself is not a ucudnn result
                raise RuntimeError("ucudnn.torch converted no convolution ("
                                   + "; ".join(sorted({k[2] for k in report.kept})) + ")")

        def step():
            if kind == "train":
                model.zero_grad(set_to_none=True)
                model(x).float().mean().backward()
            else:
                with torch.no_grad():
                    model(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        rec["first_iteration_ms"] = (time.perf_counter() - t0) * 1000.0
        for _ in range(args.warmup):
            step()
        rec["iteration_ms"] = [_events_ms(step, 1, 1) for _ in range(args.iterations)]
        rec["median_ms"] = statistics.median(rec["iteration_ms"])
        rec["max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        rec.update(status="ok", step=kind)
    except Exception as e:  # noqa: BLE001 - the process's result, recorded
        rec.update(status="oom" if _is_oom(e) else "failed",
                   error=_error_line(e, 300))
    write_text(args.json, json.dumps(rec, indent=2) + "\n")
    return 0


def ucudnn_convert(model, **kw):
    import ucudnn.torch as ut
    return ut.convert(model, **kw)


def _spawn(args, model, dtype, side, cap, order: int, cache: Path, label: str,
           memory_cap=None) -> dict:
    """Run one model-process (under ``memory_cap`` where one is given), its whole-process peak
    memory sampled by NVML here."""
    out = Path(args.out) / "logs"
    out.mkdir(parents=True, exist_ok=True)
    mem = [] if memory_cap is None else ["--memory-cap", memory_cap]
    stem = f"{order:03d}.{model}.{dtype}.{label}.{cap}" + "".join(f".mem{m}" for m in mem[1:])
    cmd = [sys.executable, str(Path(__file__).resolve()), "model-process", "--model", model,
           "--dtype", dtype, "--side", side, "--cap", cap, "--iterations",
           str(args.iterations), "--warmup", str(args.warmup), "--engines", args.engines,
           "--memory-format", getattr(args, "memory_format", "contiguous"), "--cache",
           str(cache), "--json", str(out / f"{stem}.json"), *mem] + \
        ["--quick"] * args.quick
    env = dict(os.environ)
    if side == "wscap":
        env["CUDNN_CONV_WSCAP_DBG"] = str(study.wscap_mib(cap))
    run = run_watched(cmd, timeout=args.timeout, env=env, log_path=out / f"{stem}.log",
                      interval=0.005, states=True)
    try:
        rec = json.loads((out / f"{stem}.json").read_text())
    except (OSError, ValueError):
        rec = {"model": model, "dtype": dtype, "side": side, "cap": cap, "status": "failed",
               "error": f"exit status {run.rc}, no JSON (logs/{stem}.log)"}
    rec.update(side=label, order=order, exit_status=run.rc, log=f"logs/{stem}.log",
               wall_s=run.wall_s, peak_gpu_memory_bytes=run.peak_gpu_memory_bytes,
               nvml_error=run.nvml_error, gpu_state=run.gpu_state, command=shlex.join(cmd))
    if memory_cap is not None:
        rec.update(memory_cap=memory_cap,
                   memory_cap_bytes=study.cap_bytes(memory_cap))
    print(f"{order:3d} {model} {dtype} {label}@{cap}"
          + ("" if memory_cap is None else f" memory cap {memory_cap}") + f": {rec['status']}"
          + (f", {rec['median_ms']:.2f} ms, first {rec['first_iteration_ms']:.0f} ms"
             if rec["status"] == "ok" else f" ({rec.get('error', '')})"), flush=True)
    return rec


def _spawn_next(args, procs: list, slot, cap: str, cache: Path, memory_cap=None) -> None:
    """Run ``slot``'s process after those in ``procs`` (the next order) and append its record
    with the slot's round."""
    order = max((p["order"] for p in procs), default=0) + 1
    procs.append(_spawn(args, slot.model, slot.dtype, slot.side, cap, order, cache, slot.side,
                        memory_cap))
    procs[-1]["round"] = slot.round


def _write_runs(args, name: str, procs, rows, extra=None, text=None) -> dict:
    out = Path(args.out)
    doc = {"subcommand": name, "versions": _versions(args), "summary": rows,
           "processes": procs}
    if extra:
        doc.update(extra)
    write_text(out / f"{name}.json", json.dumps(doc, indent=2) + "\n")
    write_text(out / f"{name}.txt", (text or study.summary_text)(doc if text else rows))
    return doc


def models(args) -> int:
    out = Path(args.out)                # an earlier run's models.json: its processes kept
    slots = study.schedule(args.model_list, args.dtype_list, [c for c, _ in args.cap_list],
                           args.processes, wscap=not args.no_wscap)
    settings = {k: getattr(args, k) for k in study.MODEL_SETTINGS}
    procs, todo = study.resume_run(out / "models.json", "models", settings,
                                   study.MODEL_SETTINGS, slots, study.SLOT_FIELDS)
    for s in todo:
        _spawn_next(args, procs, s, s.cap, out / "ucudnn-cache.sqlite")
        _write_runs(args, "models", procs, study.summarize(procs), {"settings": settings})
    print(study.summary_text(study.summarize(procs)), end="")
    return 0


def startup(args) -> int:
    """Per round a fresh ucudnn cache: a ucudnn process that fills it (cold), a second one
    that plans from it (warm), and a PyTorch process with cudnn.benchmark, in an order that
    alternates by round; their first steps compared."""
    out = Path(args.out)
    cap = args.cap_list[0][0]
    procs, order = [], 0
    caches = out / "startup-caches"
    caches.mkdir(parents=True, exist_ok=True)
    for model in args.model_list:
        for dt in args.dtype_list:
            for r in range(1, args.processes + 1):
                cache = Path(tempfile.mkdtemp(prefix=f"{model}.{dt}.r{r}.", dir=caches))
                runs = [("ucudnn", "ucudnn-cold"), ("ucudnn", "ucudnn-warm"),
                        ("pytorch", "pytorch")]
                if r % 2 == 0:
                    runs = runs[2:] + runs[:2]
                for side, label in runs:
                    order += 1
                    procs.append(_spawn(args, model, dt, side, cap, order,
                                        cache / "cache.sqlite", label))
                rows = study.summarize(procs)
                _write_runs(args, "startup", procs, rows,
                            {"warm_to_pytorch_first": study.startup_ratios(rows)})
    for line in study.startup_lines(study.startup_ratios(study.summarize(procs))):
        print(line)
    return 0


def memcap(args) -> int:
    """Every process of ``args.slots``, each under its memory cap (Note [Memory-capped study]
    in ucudnn/experiments/torch_memcap.py); OUT/memcap.json and .txt after each, the figure
    at the end. The processes of an earlier run into OUT are kept and not run again."""
    out = Path(args.out)
    settings = {k: getattr(args, k) for k in ("cap", "processes", "iterations", "warmup",
                                              "engines", "quick", "device_total_bytes")}
    settings.update(models=args.model_list, dtypes=args.dtype_list,
                    memory_caps=[c for c, _ in args.memory_cap_list])
    procs, todo = memcap_study.resume(out / "memcap.json", settings, args.slots)

    def write():
        rows = memcap_study.summarize(procs)
        return _write_runs(args, "memcap", procs, rows, {
            "settings": settings, "verdicts": memcap_study.evaluate(rows)},
            memcap_study.summary_text)
    for s in todo:
        _spawn_next(args, procs, s, memcap_study.workspace_cap(s.side, args.cap),
                    out / "ucudnn-cache.sqlite", s.memory_cap)
        write()
    doc = write()
    try:
        n = memcap_study.plot(doc["summary"], str(out / "memcap.png"))
        print(f"{out / 'memcap.png'}: {n} points")
    except InputError as e:
        print(f"bench_torch.py: no figure: {e}", file=sys.stderr)
    print(memcap_study.summary_text(doc), end="")
    return 0


# ------------------------------------------------------------------------------- frontend

def frontend(args) -> int:
    script = str(Path(__file__).resolve())
    doc = frontend_bench.run(
        args, lambda slot, js: frontend_bench.process_command(sys.executable, script, args,
                                                              slot, js), _versions(args))
    print(frontend_bench.summary_text(doc), end="")
    return 0


def frontend_process(args) -> int:
    """One process of ``frontend`` (started by it): ResNet-50 v1, channels_last, in train
    mode, converted for a ucudnn variant and compiled for a compiled one; its steps timed by
    :func:`frontend_bench.time_steps`; the record goes to ``--json`` whatever happens."""
    from torch_nets import build_net
    rec = {"dtype": args.dtype, "variant": args.variant, "batch": args.batch,
           "status": "failed"}
    try:
        torch.manual_seed(0)
        torch.backends.cudnn.benchmark = True
        model, shape, _ = build_net(frontend_bench.NET, args.batch)
        model = model.cuda().train().to(memory_format=torch.channels_last)
        x = torch.randn(shape, device="cuda").contiguous(memory_format=torch.channels_last)
        labels = torch.zeros(shape[0], dtype=torch.long, device="cuda")
        if args.variant.startswith("ucudnn"):
            report = ucudnn_convert(model, limit=args.limit, engines=args.engines,
                                    cache=args.cache)
            model = report.model
            from ucudnn.torch.eager import eager_enabled
            rec.update(converted=len(report.converted), kept=[list(k) for k in report.kept],
                       style=getattr(ops.active(), "style", None), eager=eager_enabled())
        forward = torch.compile(model) if args.variant.endswith("_compile") else model
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if args.dtype == "bfloat16"
                    else contextlib.nullcontext())

        def step():
            model.zero_grad(set_to_none=True)
            with autocast:
                loss = F.cross_entropy(forward(x), labels)
            loss.backward()

        def mark():
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        rec.update(frontend_bench.time_steps(
            step, iterations=args.iterations, warmup=args.warmup, mark=mark,
            elapsed_ms=lambda a, b: a.elapsed_time(b), wait=lambda b: b.synchronize(),
            sync=torch.cuda.synchronize, on_warm=torch.cuda.reset_peak_memory_stats))
        rec["steady_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        rec.update(status="ok", cudnn_allow_tf32=torch.backends.cudnn.allow_tf32)
    except Exception as e:  # noqa: BLE001 - the process's result, recorded
        rec.update(status="oom" if _is_oom(e) else "failed",
                   error=_error_line(e, 300),
                   traceback=traceback.format_exc()[-3000:])
    if rec["status"] == "ok" and args.variant.startswith("ucudnn"):
        try:                        # what was planned: beside the timing, never instead of it
            rec["plans"] = frontend_bench.plan_facts(list(planned_kernels().values()))
        except Exception as e:  # noqa: BLE001
            rec["plans_error"] = f"{type(e).__name__}: {e}"[:300]
    write_text(args.json, json.dumps(rec, indent=2) + "\n")
    return 0


# ------------------------------------------------------------------------------ arguments

class _Parser(argparse.ArgumentParser):
    """Argument errors in one line, exit status 2."""

    def error(self, message):
        print(f"bench_torch.py {self.prog.split()[-1]}: {message}", file=sys.stderr)
        sys.exit(2)


LAYERS3D_HELP = """The 3-D layer study: for each layer of a 3-D UNet (nnU-Net) and a causal video
VAE decoder (CogVideoX-like; Note [3-D layers of the study] in ucudnn/experiments/torch_study.py),
each family, dtype, op and cap: ucudnn's plan under the cap (predicted and measured), the
fastest undivided algorithm under the cap, and PyTorch's cudnn.benchmark choice (time, and
workspace as a peak-memory delta); a point that runs out of memory is recorded as oom. Writes
OUT/points.csv (one row per layer x family x dtype x op x cap), OUT/versions.json and
OUT/workspace_vs_time.png; rows already in OUT/points.csv are kept and not measured again, so a
run can be split with --layers. --quick: 5 small layers, caps 64MiB and unlimited, about 1-2
minutes on one H100. The full study (53 layers, 2544 rows) is not timed yet: estimated 3-6 GPU
hours on one H100, the largest VAE layers' benchmarks dominating; run it by --layers prefix
(unet, vae.256p, vae.480p, vae.720p) in commands of under 10 minutes each."""
MODELS_HELP = """Whole models: nnU-Net's 3d_fullres network (128^3 patch, batch 2; training
step) and a CogVideoX-like causal decoder (480x720, 8 frames; decode), or their small versions
unet and vae, in fp32 and bf16 (model and input cast to bf16 on both sides), each in its own
process: PyTorch with cudnn.benchmark (unlimited), PyTorch under CUDNN_CONV_WSCAP_DBG at each
cap, and ucudnn.torch.convert(limit=cap) at each cap; --processes rounds, the variants' order
rotated per round. Per process: its first step (wall clock), the median of --iterations CUDA-event
timed steps, and its whole-process peak memory sampled by NVML from this process. Writes
OUT/models.json (every process and the medians), OUT/models.txt and OUT/logs/. --quick: the
small models, bf16, cap 256MiB, one round, about 1-2 minutes. Full: 96 processes, not timed
(the small pair in bf16 at caps 256MiB and unlimited, 24 processes, took 3 minutes on an H100).
"""
STARTUP_HELP = """A second process's start: per round a fresh ucudnn cache, a ucudnn process that
fills it (cold), a second that plans from it (warm), and a PyTorch process with cudnn.benchmark;
the first step of each (wall clock, benchmarks included) and warm/PyTorch. Writes
OUT/startup.json, OUT/startup.txt. --quick: the small UNet, bf16, one round, about 1 minute.
Full (the default models): 36 processes, not timed yet."""

FRONTEND_HELP = """Front-end overhead: a ResNet-50 v1 training step (forward, cross-entropy,
backward; no optimizer step) at batch 128, model and input channels_last, in fp32 (TF32
convolutions, PyTorch's default) and bf16 (autocast over fp32 parameters), each in its own
process: PyTorch eager with cudnn.benchmark, and the model after ucudnn.torch.convert(limit=
unlimited) (default registration style); --compile adds both under torch.compile;
--operators adds ucudnn with every call through the operators. --processes
rounds, the order rotated per round. Per process: the first step (wall clock), the median of
--iterations CUDA-event timed steps after --warmup, the host's time per step (not
synchronised: near the GPU's, the step is CPU-bound) and the whole-process peak memory from
NVML. Writes OUT/frontend.json (every process and the medians), OUT/frontend.txt (ucudnn/pytorch
per dtype against the target 1.03, and the versions) and OUT/logs/. --quick: batch 32, one
round, 5 steps, about 1-1.5 minutes. Full: 12 processes, estimated 3.5-6 minutes on one H200
(12-22 s a process, plus 25-40 s for each dtype's first ucudnn process benchmarking the net
from an empty cache; Note [Front-end overhead] in ucudnn/experiments/torch_frontend.py);
--compile adds about 8-15 minutes."""


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="bench_torch.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("overhead", help="per-call host cost of each way to the core")
    o.add_argument("--mode", choices=("forward", "train"), default="forward")
    o.add_argument("--n", type=int, default=1)
    o.add_argument("--c", type=int, default=8)
    o.add_argument("--k", type=int, default=8)
    o.add_argument("--hw", type=int, default=8)
    o.add_argument("--r", type=int, default=1, help="filter size")
    o.add_argument("--pad", type=int, default=0)
    o.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    o.add_argument("--limit", default="8MiB")
    o.add_argument("--engines", default="legacy")
    o.add_argument("--calls", type=int, default=200, help="calls per timing")
    o.add_argument("--reps", type=int, default=31, help="interleaved repetitions")
    o.add_argument("--warmup", type=int, default=20)
    o.add_argument("--out", help="write the JSON here too")
    dts = ",".join(study.DTYPES)
    lay = sub.add_parser("layers3d", help="the 3-D layer study", description=LAYERS3D_HELP)
    lay.add_argument("--out", required=True, help="folder for points.csv, versions, figure")
    lay.add_argument("--quick", action="store_true")
    lay.add_argument("--layers", help="comma-separated name prefixes (default: all)")
    lay.add_argument("--families", default=",".join(study.FAMILIES))
    lay.add_argument("--dtypes", default=dts)
    lay.add_argument("--ops", default=",".join(study.OPS))
    lay.add_argument("--caps", help=f"default {','.join(study.CAPS)}")
    lay.add_argument("--policy", default="powerOfTwo", help="ucudnn's policy")
    lay.add_argument("--calls", type=int, default=5, help="calls per timing")
    lay.add_argument("--reps", type=int, default=5, help="timings (median)")
    for name, text in (("models", MODELS_HELP), ("startup", STARTUP_HELP)):
        m = sub.add_parser(name, help=text.splitlines()[0], description=text)
        m.add_argument("--out", required=True)
        m.add_argument("--quick", action="store_true")
        m.add_argument("--models", default=",".join(study.DEFAULT_MODELS),
                       help=f"of {','.join(study.MODELS)} (default "
                       f"{','.join(study.DEFAULT_MODELS)}; --quick: unet,vae)")
        m.add_argument("--dtypes", default=dts)
        m.add_argument("--caps", help=f"default {','.join(study.CAPS)}" if name == "models"
                       else "the one cap of ucudnn's processes (default 256MiB)")
        m.add_argument("--processes", type=int, default=3, help="rounds")
        m.add_argument("--iterations", type=int, default=20)
        m.add_argument("--warmup", type=int, default=5)
        m.add_argument("--engines", default="both")
        m.add_argument("--timeout", type=float, default=900.0, help="per process (s)")
        m.add_argument("--memory-format", choices=study.MEMORY_FORMATS, default="contiguous",
                       help="model and input: NC[D]HW, or channels_last(_3d) on every side")
        if name == "models":
            m.add_argument("--no-wscap", action="store_true",
                           help="leave out PyTorch under CUDNN_CONV_WSCAP_DBG (which "
                           "scripts/torch_wscap.py found to change nothing)")
    mc = sub.add_parser("memcap", help="whole models under a per-process memory cap",
                        description=memcap_study.HELP)
    memcap_study.add_arguments(mc, dts)
    f = sub.add_parser("frontend", help="ResNet-50 through ucudnn.torch against PyTorch",
                       description=FRONTEND_HELP)
    f.add_argument("--out", required=True)
    f.add_argument("--quick", action="store_true")
    f.add_argument("--dtypes", default=",".join(frontend_bench.DTYPES))
    f.add_argument("--compile", action="store_true", help="also both under torch.compile")
    f.add_argument("--operators", action="store_true",
                   help="also ucudnn with every call through the operators (no eager path)")
    f.add_argument("--batch", type=int, help="default 128 (--quick: 32)")
    f.add_argument("--processes", type=int, help="rounds (default 3; --quick: 1)")
    f.add_argument("--iterations", type=int, help="timed steps (default 50; --quick: 5)")
    f.add_argument("--warmup", type=int, help="steps after the first (default 10; --quick: 2)")
    f.add_argument("--limit", default="unlimited", help="ucudnn's workspace per call")
    f.add_argument("--engines", default="both", choices=ENGINES)
    f.add_argument("--cache", help="ucudnn's benchmark cache (default OUT/ucudnn-cache.sqlite)")
    f.add_argument("--timeout", type=float, default=900.0, help="per process (s)")
    fp = sub.add_parser("frontend-process", help="one process of frontend (internal)")
    for flag in ("--dtype", "--variant", "--limit", "--engines", "--cache", "--json"):
        fp.add_argument(flag, required=True)
    for flag in ("--batch", "--iterations", "--warmup"):
        fp.add_argument(flag, type=int, required=True)
    p = sub.add_parser("model-process", help="one process of models/startup (internal)")
    for flag in ("--model", "--dtype", "--side", "--cap", "--engines", "--cache", "--json"):
        p.add_argument(flag, required=True)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--memory-cap", help="this process's memory cap (memcap)")
    p.add_argument("--memory-format", choices=study.MEMORY_FORMATS, default="contiguous")
    p.add_argument("--quick", action="store_true")
    return ap


def _check(args) -> None:
    """Turn the study's list arguments into lists; InputError naming the flag."""
    if args.cmd == "frontend":
        frontend_bench.resolve(args)
        return
    if args.cmd == "memcap":
        if Path(args.out).is_file():
            raise InputError(f"--out: {args.out} is a file, not a folder")
        memcap_study.resolve(args)
        return
    for flag in ("calls", "reps", "processes", "iterations"):
        if getattr(args, flag, 1) < 1:
            raise InputError(f"--{flag}: must be at least 1, got {getattr(args, flag)}")
    if getattr(args, "warmup", 0) < 0:
        raise InputError(f"--warmup: must not be negative, got {args.warmup}")
    if args.cmd in ("layers3d", "models", "startup") and Path(args.out).is_file():
        raise InputError(f"--out: {args.out} is a file, not a folder")
    if args.cmd == "layers3d":
        args.layer_list = study.select(study.QUICK_LAYERS if args.quick
                                       else study.study_layers(), args.layers)
        args.family_list = study.parse_choice("families", args.families, study.FAMILIES)
        args.op_list = study.parse_choice("ops", args.ops, study.OPS)
    if args.cmd in ("layers3d", "models", "startup"):
        quick = args.quick and not args.caps
        caps = args.caps or {"layers3d": ",".join(study.QUICK_CAPS if quick else study.CAPS),
                             "models": "256MiB" if quick else ",".join(study.CAPS),
                             "startup": "256MiB"}[args.cmd]
        args.cap_list = study.parse_caps(caps)
        if args.cmd == "startup" and len(args.cap_list) != 1:
            raise InputError(f"--caps: startup takes one cap, got {caps!r}")
        if args.quick and args.cmd != "layers3d":
            quick_dtypes = {"models": "bfloat16", "startup": "bfloat16"}[args.cmd]
            if args.dtypes == ",".join(study.DTYPES):
                args.dtypes = quick_dtypes
            if args.models == ",".join(study.DEFAULT_MODELS):
                args.models = "unet" if args.cmd == "startup" else ",".join(study.SMALL_MODELS)
            args.processes, args.iterations, args.warmup = 1, 3, 1
        args.dtype_list = study.parse_choice("dtypes", args.dtypes, study.DTYPES)
    if args.cmd in ("models", "startup"):
        args.model_list = study.parse_choice("models", args.models, tuple(study.MODELS))


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        _check(args)
    except InputError as e:
        print(f"bench_torch.py {args.cmd}: {e}", file=sys.stderr)
        return 2
    _load_torch()
    if not torch.cuda.is_available():
        print("bench_torch.py: no CUDA device visible", file=sys.stderr)
        return 2
    if args.cmd == "memcap":
        args.device_total_bytes = torch.cuda.get_device_properties(0).total_memory
        try:            # a cap above this device, or an earlier run's memcap.json in --out
            memcap_study.check_device(args.memory_cap_list, args.device_total_bytes)
            return memcap(args)
        except InputError as e:
            print(f"bench_torch.py memcap: {e}", file=sys.stderr)
            return 2
    if args.cmd == "layers3d":
        return layers3d(args)
    if args.cmd == "models":
        return models(args)
    if args.cmd == "startup":
        return startup(args)
    if args.cmd == "model-process":
        return model_process(args)
    if args.cmd == "frontend":
        return frontend(args)
    if args.cmd == "frontend-process":
        return frontend_process(args)
    doc = overhead_bench.overhead(args)
    if args.out:
        write_text(args.out, json.dumps(doc, indent=2) + "\n")
    print(overhead_bench.summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
