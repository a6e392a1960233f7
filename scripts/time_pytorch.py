#!/usr/bin/env python3
"""PyTorch baseline: the networks timed in PyTorch in every mode a user would pick, each in
processes of its own.

The networks of prototxt/ and ResNet-50 v1 (scripts/torch_nets.py), with cudnn.benchmark on.
Compares to the Caffe runs of `ucudnn reproduce` and `ucudnn baseline` (`caffe time`
"Forward-Backward" whole iterations of the same nets). One iteration does the same work as
Caffe's: forward, softmax cross-entropy against constant labels 0, backward; grads zeroed
(set to None) before, no optimizer step.

Modes (--mode, repeatable; default the six fp32 ones), Note [PyTorch's modes] in
ucudnn/experiments/pytorch_modes.py: eager, channels_last, compile (default mode; Inductor's
layout optimisation runs its convolutions channels-last), compile_channels_last, max_autotune
and reduce_overhead (both replay CUDA graphs), and bf16 autocast on a channels-last model
under a compile mode (bf16_compile, bf16_max_autotune, bf16_reduce_overhead). The baseline a
ucudnn result is compared with is the fastest fp32 mode that ran (``pytorch_mode``,
``pytorch_ms``); the fastest bf16 mode timed is a row of its own (``bf16_mode``, ``bf16_ms``).

Input (--input): gaussian (default), drawn once with numpy's PCG64 from the seed Caffe's
drawn-once input uses (Note [Inputs drawn once] in ucudnn/experiments/caffe_input.py), so both
sides get the same numbers; constant, every value 1.0, the input of a net whose DummyData is
constant (`ucudnn reproduce`'s), as a control.

Method: each (net, mode) runs in --processes fresh processes (the script runs itself with the
hidden --worker; the worker writes its results as JSON to a file the parent names). A process
runs --warmup iterations -- the first, which holds the algorithm search and the compilation,
timed on its own with a wall clock (``first_iteration_s``) -- then --iterations iterations,
each bracketed by CUDA events and synchronized at its end, as `caffe time` times its whole
iterations (Note [Whole iterations] in caffe_patch/0006). A process's time is the median of
its iterations, a mode's the median over its processes (``per_process_ms``). Every process
compiles from empty caches (a TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR of its own), unless
--compile-cache DIR names caches that a (net, batch, mode)'s processes share, across runs too
(then only the first compiles cold; the iterations timed are the same). The
modes' processes alternate (eager, channels_last, ..., eager, ...) so that a drift of the
GPU's clocks falls on all modes alike; after a process of a mode fails, the mode runs no
more. Known differences from Caffe: nn.LocalResponseNorm is built from elementwise ops and
pooling (Caffe uses cuDNN's LRN); the CIFAR-10 net's Accuracy layer is not run.

Memory and GPU state, measured as Caffe's are (Note [Measured memory] in
ucudnn/experiments/gpu_memory.py, Note [GPU state of a process] in
ucudnn/experiments/nvml.py): the worker's whole-process GPU memory from NVML, sampled every
5 ms by a thread of the parent, its largest sample the process's ``peak_gpu_memory_bytes``;
the same samples give the SM clock, power and temperature at the process's start and end
(``gpu_state``). Where NVML is missing or never lists the worker (a container with its own
PID namespace), the worker's torch.cuda.max_memory_reserved stands in and ``memory_method``
says so: it leaves out the CUDA context and allocations outside the caching allocator.

Profile (--profile): scripts/torch_profile.py, GPU kernel time per iteration by kind.

JSON (--json): ``{"meta": {torch, CUDA and cuDNN versions, GPU, driver, TF32 switches, the
command line, the options}, "nets": {net: {"batch", "input_shape", "input", "modes": {mode:
{"median_ms", "per_process_ms", "first_iteration_s", "peak_gpu_memory_bytes",
"memory_method", "max_memory_reserved_bytes", "processes": [each process's own record],
"profile"?: {...}, "error"?: str}}, "pytorch_mode", "pytorch_ms", "median_ms" (=
pytorch_ms: what `ucudnn reproduce --merge-pytorch` reads), "peak_gpu_memory_bytes"
(pytorch_mode's), "bf16_mode"?, "bf16_ms"?, "bf16_peak_gpu_memory_bytes"?, "by_type_ms"?
(pytorch_mode's profile in the kinds of Caffe's layers)}}}``, written again after every net.
One summary line per net on stdout; each process's result, as it ends, on stderr.

    python scripts/time_pytorch.py --net resnet18 --net resnet50 --profile --json pytorch.json

GPU by default; --device cpu (timed with time.perf_counter, no NVML) is only for a smoke test:
compile needs a C++ compiler there, and where it fails its error is recorded as any mode's is.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

try:
    import torch
    import torch.nn.functional as F
except ImportError:       # the parent and the pure functions need no torch; main() says so
    torch = F = None

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)                               # torch_nets, torch_profile

import torch_nets  # noqa: E402
import torch_profile  # noqa: E402
from torch_nets import NETS, SPECS, build_net, net_batch  # noqa: E402,F401
from torch_profile import (CAFFE_KINDS, KINDS, group_profile, op_kind,  # noqa: E402,F401
                           profile_record, stack_kind)


def _ucudnn(module):
    """``ucudnn.<module>`` (plain Python), from the checkout this script lives in where the
    running Python lacks ucudnn."""
    name = "ucudnn." + module
    try:
        return importlib.import_module(name)
    except ImportError:
        sys.path.insert(0, os.path.dirname(HERE))
        return importlib.import_module(name)


pytorch_modes = _ucudnn("experiments.pytorch_modes")
MODES = tuple(pytorch_modes.MODES)
FP32_MODES = pytorch_modes.FP32_MODES
INPUTS = ("gaussian", "constant")
#: NVML sampling interval (s)
NVML_INTERVAL = 0.005
Bottleneck = torch_nets.Bottleneck


# ---------------------------------------------------------------------------------------------
# The worker: one mode of one net in this process

def timer(device):
    """mark() -> a point in time on the device's timeline; ms(a, b) -> milliseconds from a to b."""
    if device.type == "cuda":
        def mark():
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return mark, lambda a, b: a.elapsed_time(b)
    return time.perf_counter, lambda a, b: (b - a) * 1e3


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def input_data(shape, kind, device):
    """The net's input: gaussian drawn once as Caffe's is, or the constant 1.0."""
    if kind == "constant":
        return torch.ones(shape, device=device)
    return torch.from_numpy(_ucudnn("experiments.caffe_input").gaussian(shape)).to(device)


def prepare(name, batch, mode, device, kind="gaussian"):
    """``iteration() -> (total ms, forward ms)`` of ``name`` in ``mode`` (a name of
    :data:`MODES`) on ``device``, with input ``kind``."""
    spec = pytorch_modes.MODES[mode]
    model, shape, _ = build_net(name, batch)
    model = model.to(device).train()                       # train phase: dropout, batch statistics
    data = input_data(shape, kind, device)
    labels = torch.zeros(shape[0], dtype=torch.long, device=device)   # constant 0
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)
        data = data.to(memory_format=torch.channels_last)
    forward = model
    if spec.compile:
        forward = torch.compile(model, mode=None if spec.compile == "default" else spec.compile)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if spec.dtype == "bf16"
                else contextlib.nullcontext())
    mark, ms = timer(device)

    def iteration():
        if spec.cuda_graphs:                               # a new step of the graphs' outputs
            torch.compiler.cudagraph_mark_step_begin()
        model.zero_grad(set_to_none=True)
        start = mark()
        with autocast:
            loss = F.cross_entropy(forward(data), labels)
        forward_done = mark()
        loss.backward()
        end = mark()
        sync(device)
        return ms(start, end), ms(start, forward_done)

    return iteration, shape


def worker_device(spec):
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available (no GPU or a CPU-only torch); "
                               "pass --device cpu for a smoke test")
        if device.index is not None:
            torch.cuda.set_device(device)                  # CUDA events record on this device
    torch.backends.cudnn.benchmark = True                  # TF32 switches: left at their defaults
    return device


def worker_env(device):
    """What this interpreter's torch is and runs on (the parent records one worker's)."""
    cuda = device.type == "cuda"
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": (torch.backends.cudnn.version()
                          if torch.backends.cudnn.is_available() else None),
        "gpu_name": torch.cuda.get_device_name(device) if cuda else None,
        "device": str(device),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "python_version": platform.python_version(),
    }


def time_mode(iteration, shape, iterations, warmup, device):
    """One process's timing of one mode (module docstring, Method)."""
    sync(device)
    t0 = time.perf_counter()
    iteration()                                            # algorithm search, compilation
    first_s = time.perf_counter() - t0
    for _ in range(warmup - 1):
        iteration()
    total, forward = zip(*(iteration() for _ in range(iterations)))
    cuda = device.type == "cuda"
    return {
        "batch": shape[0],
        "input_shape": list(shape),
        "median_ms": statistics.median(total),
        "min_ms": min(total),
        "max_ms": max(total),
        "forward_median_ms": statistics.median(forward),
        "first_iteration_s": first_s,
        "times_ms": list(total),
        "max_memory_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else None,
        "max_memory_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
    }


def worker_main(args):
    """Run one task (time or profile) of one mode of one net; its result, or its error, as
    JSON in ``args.worker``. Exit status 0: it ran; 1: the JSON holds the error."""
    result = {"pid": os.getpid(), "task": args.worker_task}
    try:
        device = worker_device(args.device)
        result["env"] = worker_env(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        iteration, shape = prepare(args.net[0], args.batch, args.mode[0], device, args.input)
        if args.worker_task == "profile":
            result.update(torch_profile.profile_mode(iteration, args.profile_iterations,
                                                     args.warmup, device))
        else:
            result.update(time_mode(iteration, shape, args.iterations, args.warmup, device))
    except Exception as e:  # noqa: BLE001 - any failure is the mode's result, told to the parent
        result["error"] = error_text(e)
        result["traceback"] = traceback.format_exc()[-4000:]
        if torch is not None and isinstance(e, torch.cuda.OutOfMemoryError):
            result["error"] = "out of memory: " + result["error"]
    write_json_atomic(args.worker, result)
    return 1 if "error" in result else 0


def error_text(e, limit=1500):
    """``Type: message``, cut to ``limit`` characters (compile errors run to pages)."""
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= limit else text[:limit] + " [...]"


# ---------------------------------------------------------------------------------------------
# The parent: workers, their memory, the results

def process_memory(nvml_peak, nvml_error, reserved, cuda=True):
    """(peak_gpu_memory_bytes, memory_method) of one process: NVML's whole-process peak, else
    the worker's torch.cuda.max_memory_reserved (and why), else None."""
    if not cuda:
        return None, "none: not a CUDA device"
    if nvml_peak is not None:
        return nvml_peak, "nvml"
    why = nvml_error or "NVML never listed the worker's pid"
    if reserved is not None:
        return reserved, (f"torch.cuda.max_memory_reserved ({why}): the caching allocator's "
                          "peak, without the CUDA context and allocations outside it")
    return None, f"none ({why})"


def worker_command(args, net, mode, task, out):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", out, "--worker-task", task,
           "--net", net, "--mode", mode, "--device", args.device,
           "--iterations", str(args.iterations), "--warmup", str(args.warmup),
           "--profile-iterations", str(args.profile_iterations), "--input", args.input]
    return cmd + (["--batch", str(args.batch)] if args.batch else [])


def run_worker(args, net, mode, task, tmp, tag):
    """One worker process; its JSON result with ``peak_gpu_memory_bytes`` and
    ``memory_method`` (time tasks) added, or ``error`` (and ``log_tail``) where it failed."""
    base = os.path.join(tmp, f"{net}.{mode}.{task}.{tag}")
    out = base + ".json"
    cache = (os.path.join(args.compile_cache, f"{net}.b{net_batch(net, args.batch)}.{mode}")
             if args.compile_cache else base)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache + ".inductor",
               TRITON_CACHE_DIR=cache + ".triton")
    cuda = not args.device.startswith("cpu")
    # the sampler that measures Caffe's processes, so that both sides are measured alike, with
    # the GPU's state; a profiled process's memory: not measured
    run = _ucudnn("experiments.gpu_memory").run_watched(
        worker_command(args, net, mode, task, out), timeout=args.timeout, env=env,
        log_path=base + ".log", interval=NVML_INTERVAL, states=True,
        memory=cuda and task == "time")
    try:
        with open(out) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {}
    result.setdefault("pid", run.pid)
    result["wall_s"] = run.wall_s                          # the whole process, start to exit
    if run.timed_out:
        result["error"] = f"timed out after {args.timeout:g} s"
    elif "error" not in result and (run.rc != 0 or not result):
        result["error"] = f"worker exited with status {run.rc} and no result"
    if "error" in result:
        result["log_tail"] = run.log_text()[-3000:]
    if task == "time":
        result["peak_gpu_memory_bytes"], result["memory_method"] = process_memory(
            run.peak_gpu_memory_bytes, run.nvml_error, result.get("max_memory_reserved_bytes"),
            cuda)
        result["gpu_state"] = run.gpu_state
    return result


def summarize_mode(processes, profile=None):
    """A mode's record from its processes' results (and its profile process's raw result)."""
    ok = [p for p in processes if "error" not in p]
    per_ms = [p["median_ms"] for p in ok]
    peaks = [p.get("peak_gpu_memory_bytes") for p in ok]
    methods = list(dict.fromkeys(p.get("memory_method") for p in ok))
    rec = {
        "median_ms": statistics.median(per_ms) if per_ms else None,
        "per_process_ms": per_ms,
        "first_iteration_s": (statistics.median(p["first_iteration_s"] for p in ok)
                              if ok else None),
        "per_process_first_iteration_s": [p["first_iteration_s"] for p in ok],
        "forward_median_ms": (statistics.median(p["forward_median_ms"] for p in ok)
                              if ok else None),
        "peak_gpu_memory_bytes": max((b for b in peaks if b is not None), default=None),
        "per_process_peak_gpu_memory_bytes": peaks,
        "memory_method": "; ".join(m for m in methods if m) or None,
        "max_memory_reserved_bytes": max((p["max_memory_reserved_bytes"] for p in ok
                                          if p.get("max_memory_reserved_bytes") is not None),
                                         default=None),
        "processes": processes,
    }
    failed = [p for p in processes if "error" in p]
    if failed:
        rec["error"] = failed[0]["error"]
    if profile is not None:
        rec["profile"] = profile_record(profile)
    return rec



def medians(modes):
    """mode -> median ms of the modes that ran without error (None for the others)."""
    return {m: None if "error" in r else r.get("median_ms") for m, r in modes.items()}


def fastest_mode(modes):
    """The fp32 mode of least ``median_ms`` among those that ran without error (Note
    [PyTorch's modes]); None when none did."""
    return pytorch_modes.fastest(medians(modes), [m for m in modes if m in FP32_MODES])


def net_record(name, batch, modes, kind="gaussian"):
    """A net's record: its modes' records, the fastest fp32 one (``pytorch_mode``,
    ``pytorch_ms`` and, for ``ucudnn reproduce``, ``median_ms``), its peak memory, the fastest
    bf16 mode timed (``bf16_mode``, ``bf16_ms``) and the fp32 profile in Caffe's kinds
    (``by_type_ms``)."""
    b = net_batch(name, batch)
    best = fastest_mode(modes)
    rec = {"batch": b, "input_shape": [b, *SPECS[name][2]], "input": kind, "modes": modes,
           "pytorch_mode": best,
           "pytorch_ms": modes[best]["median_ms"] if best else None}
    bf16 = pytorch_modes.fastest(medians(modes), pytorch_modes.BF16_MODES)
    if bf16 is not None:
        rec.update(bf16_mode=bf16, bf16_ms=modes[bf16]["median_ms"],
                   bf16_peak_gpu_memory_bytes=modes[bf16]["peak_gpu_memory_bytes"])
    if best is None:
        rec["error"] = "; ".join(f"{m}: {r.get('error')}" for m, r in modes.items())
        return rec
    rec["median_ms"] = rec["pytorch_ms"]
    rec["peak_gpu_memory_bytes"] = modes[best]["peak_gpu_memory_bytes"]
    per_kind = modes[best].get("profile", {}).get("per_iteration_ms")
    if per_kind:
        by_type = {}
        for kind, ms in per_kind.items():
            by_type[CAFFE_KINDS[kind]] = by_type.get(CAFFE_KINDS[kind], 0.0) + ms
        rec["by_type_ms"] = by_type
    return rec


def summary_line(name, rec):
    """``resnet18 b256: eager 47.3 ms | channels_last 28.1 ms | compile 25.6 ms -> fastest
    compile 25.6 ms (peak 9.8 GiB)``."""
    parts = []
    for mode, r in rec["modes"].items():
        parts.append(f"{mode} failed" if "error" in r or r.get("median_ms") is None
                     else f"{mode} {r['median_ms']:.1f} ms")
    best = rec["pytorch_mode"]
    if best is None:
        tail = "no mode ran"
    else:
        peak = rec.get("peak_gpu_memory_bytes")
        tail = (f"fastest {best} {rec['pytorch_ms']:.1f} ms (peak "
                + ("n/a" if peak is None else f"{peak / 2**30:.1f} GiB") + ")")
    return f"{name} b{rec['batch']}: " + " | ".join(parts) + " -> " + tail


def process_line(net, mode, i, n, r):
    if "error" in r:
        first = (r["error"].splitlines() or [""])[0]
        return f"{net} {mode} process {i}/{n}: failed: {first[:300]}"
    peak = r.get("peak_gpu_memory_bytes")
    mem = "-" if peak is None else f"{peak / 2**30:.2f} GiB ({r['memory_method'].split(' ')[0]})"
    return (f"{net} {mode} process {i}/{n}: median {r['median_ms']:.2f} ms, min"
            f" {r['min_ms']:.2f}, fwd {r['forward_median_ms']:.2f}, first iteration"
            f" {r['first_iteration_s']:.1f} s, peak {mem}")


def env_line(env, driver):
    return (f"torch {env['torch_version']}  CUDA {env['cuda_version']}"
            f"  cuDNN {env['cudnn_version']}  {env['gpu_name'] or env['device']}"
            f"  driver {driver}  TF32 cudnn={env['cudnn_allow_tf32']}"
            f" matmul={env['matmul_allow_tf32']}")


def nvidia_driver():
    """The driver's version from NVML, else nvidia-smi; None without either."""
    got = _ucudnn("experiments.nvml").versions()
    if "driver_version" in got:
        return got["driver_version"]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
        return lines[0] if lines else None
    except (OSError, subprocess.SubprocessError):
        return None


def meta(args, env, driver, argv):
    """The run's environment (a worker's :func:`worker_env`), the driver, the command line
    (``argv``: main's, None for sys.argv) and the options."""
    command = ([sys.executable] + sys.argv if argv is None
               else [sys.executable, os.path.abspath(__file__), *argv])
    return {
        **(env or {"device": args.device}),
        "driver_version": driver,
        "command_line": shlex.join(command),
        "options": {"nets": args.net, "modes": args.mode, "batch": args.batch,
                    "input": args.input, "compile_cache": args.compile_cache,
                    "processes": args.processes, "iterations": args.iterations,
                    "warmup": args.warmup, "profile": args.profile,
                    "profile_iterations": args.profile_iterations if args.profile else 0,
                    "nvml_interval_s": NVML_INTERVAL},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json_atomic(path, document):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _ucudnn("files").write_text(path, json.dumps(document, indent=2) + "\n")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--net", action="append", choices=NETS,
                        help="network to time (repeatable; default: all four)")
    parser.add_argument("--mode", action="append", choices=MODES, metavar="MODE",
                        help="one of " + ", ".join(MODES) + " (repeatable; default: the fp32 "
                        "ones, " + ", ".join(FP32_MODES) + ")")
    parser.add_argument("--input", choices=INPUTS, default="gaussian",
                        help="the input: gaussian, drawn once as Caffe's (default), or the "
                        "constant 1.0 (a control)")
    parser.add_argument("--batch", type=int,
                        help="batch size (default: the prototxt's; resnet50: 128)")
    parser.add_argument("--processes", type=int, default=3,
                        help="processes per mode and net; a mode's time is their median (3)")
    parser.add_argument("--iterations", type=int, default=20,
                        help="timed iterations per process (20)")
    parser.add_argument("--warmup", type=int, default=5,
                        help="warm-up iterations per process, >= 1; the first is timed on its "
                        "own (5)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (smoke test only)")
    parser.add_argument("--json", metavar="OUT.json", help="also write the results here")
    parser.add_argument("--profile", action="store_true",
                        help="one more process per mode and net under torch.profiler: GPU time "
                        "per iteration by kind (convolution, batch_norm, pooling, "
                        "relu/elementwise, other)")
    parser.add_argument("--profile-iterations", type=int, default=5,
                        help="iterations profiled, after --warmup ones (5)")
    parser.add_argument("--compile-cache", metavar="DIR",
                        help="Inductor's and Triton's caches under DIR, shared by the processes "
                        "of a net, batch and mode (default: empty caches for every process)")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds one process may take before it is killed (1800)")
    parser.add_argument("--worker", metavar="OUT.json", help=argparse.SUPPRESS)
    parser.add_argument("--worker-task", choices=("time", "profile"), default="time",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.warmup, args.iterations, args.processes, args.profile_iterations) < 1 \
            or (args.batch is not None and args.batch < 1):
        parser.error("--warmup, --iterations, --processes, --profile-iterations and --batch "
                     "must be at least 1")
    if args.worker and (len(args.net or ()) != 1 or len(args.mode or ()) != 1):
        parser.error("--worker takes one --net and one --mode")
    args.net = list(dict.fromkeys(args.net or NETS))
    args.mode = list(dict.fromkeys(args.mode or FP32_MODES))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker_main(args)
    if importlib.util.find_spec("torch") is None:
        print("time_pytorch.py needs PyTorch: pip install torch (no torchvision)", file=sys.stderr)
        return 2
    results, env = {}, None
    driver = nvidia_driver() if not args.device.startswith("cpu") else None
    document = {"meta": meta(args, None, driver, argv), "nets": results}
    with tempfile.TemporaryDirectory(prefix="time_pytorch.") as tmp:
        for net in args.net:
            runs = {m: [] for m in args.mode}
            for i in range(1, args.processes + 1):
                for mode in args.mode:
                    if any("error" in r for r in runs[mode]):
                        continue                           # a failed mode runs no more
                    r = run_worker(args, net, mode, "time", tmp, i)
                    runs[mode].append(r)
                    if env is None and r.get("env"):
                        env = r["env"]
                        print(env_line(env, driver), file=sys.stderr)
                    r.pop("env", None)                     # the same in every worker: in meta
                    print(process_line(net, mode, i, args.processes, r), file=sys.stderr,
                          flush=True)
            profiles = {}
            if args.profile:
                for mode in args.mode:
                    if not any("error" in r for r in runs[mode]):
                        profiles[mode] = run_worker(args, net, mode, "profile", tmp, "p")
                        profiles[mode].pop("env", None)
            modes = {m: summarize_mode(runs[m], profiles.get(m)) for m in args.mode}
            results[net] = net_record(net, args.batch, modes, args.input)
            print(summary_line(net, results[net]), flush=True)
            if args.json:
                document["meta"] = meta(args, env, driver, argv)
                write_json_atomic(args.json, document)
    if args.json:
        print(f"wrote {args.json}")
    return 0 if all(r["pytorch_mode"] or r.get("bf16_mode") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
