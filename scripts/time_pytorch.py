#!/usr/bin/env python3
"""PyTorch baseline: the networks timed in PyTorch in three modes, each in processes of its own.

The networks of prototxt/ and ResNet-50, with cudnn.benchmark on. Compares to the Caffe runs of
`ucudnn reproduce` (ucudnn/experiments/reproduce.py: `caffe time` "Forward-Backward" on
prototxt/ (alexnet, resnet18, cifar10), with and without μ-cuDNN). The same networks are
written layer for layer in torch.nn and one iteration does the same work: forward, softmax
cross-entropy against constant labels 0 (DummyData), backward; grads zeroed (set to None)
before, no optimizer step.

Modes (--mode, repeatable; default all three), fp32, cudnn.benchmark on in each:

    eager          NCHW, the layout of Caffe's blobs.
    channels_last  model and input .to(memory_format=torch.channels_last) (NHWC): cuDNN's
                   tensor-core convolution kernels read and write NHWC, so NCHW convolutions
                   pay for layout transposes around them.
    compile        torch.compile(model), default mode, NCHW: Inductor fuses BatchNorm, ReLU and
                   the residual adds into Triton kernels; the convolutions stay cuDNN's.

The baseline a ucudnn result is compared with is the fastest mode that ran (``pytorch_mode``,
``pytorch_ms``): the best PyTorch gives without hand-tuning, not one configuration of it.

Why cudnn.benchmark is the fair baseline: PyTorch then times every cuDNN algorithm for each
convolution shape on first use and keeps the fastest, with no workspace limit beyond what the
caching allocator can give -- the "fastest undivided algorithm" that micro-batching must beat.

Method: each (net, mode) runs in --processes fresh processes (the script runs itself with the
hidden --worker; the worker writes its results as JSON to a file the parent names, and nothing
is read from its log). A process runs --warmup iterations -- the first, which holds the
algorithm search and, for compile, the compilation, timed on its own with a wall clock
(``first_iteration_s``) -- then --iterations iterations, each bracketed by CUDA events and
synchronized at its end, as `caffe time` times its whole iterations (Note [Whole iterations]
in caffe_patch/0006). A process's time is the median of its iterations, a mode's
the median over its processes (``per_process_ms``). Every process compiles from empty caches
(a TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR of its own), so compile's first iteration is
the whole cold compilation in each. The modes' processes alternate (eager, channels_last,
compile, eager, ...) so that a drift of the GPU's clocks falls on all modes alike; after a
process of a mode fails, the mode runs no more. TF32 switches are left at PyTorch's defaults
and recorded. Known differences from Caffe: the input is made once (DummyData refills it each
forward); nn.LocalResponseNorm is built from elementwise ops and pooling (Caffe uses cuDNN's
LRN); the CIFAR-10 net's train-phase Accuracy layer (forward only) is not run.

Memory, measured as Caffe's is (Note [Measured memory] in ucudnn/experiments/gpu_memory.py):
the worker's whole-process GPU memory from NVML (nvmlDeviceGetComputeRunningProcesses, what
nvidia-smi shows: CUDA context, weights, activations, workspaces, the caching allocator's free
blocks), sampled every 5 ms by a thread of the parent while the worker runs. The largest sample
is the process's peak, and a mode's ``peak_gpu_memory_bytes`` is the largest of its processes'
(``memory_method`` "nvml"). A peak shorter than the interval can be missed: PyTorch empties its
caching allocator after each cudnn.benchmark search, so the trial workspaces of the search are
held for milliseconds; the allocator's own peak (``max_memory_reserved_bytes``) is recorded
beside it. Where NVML is missing (no nvidia-ml-py) or never lists the worker (in a container
with its own PID namespace NVML reports the host's PIDs), the worker's
torch.cuda.max_memory_reserved stands in and ``memory_method`` says so: it leaves out the CUDA
context and what is allocated outside PyTorch's caching allocator, so it reads lower.

Profile (--profile): one more process per mode runs --warmup iterations and then
--profile-iterations iterations under torch.profiler (CPU and CUDA activity) and gives the GPU
kernel time per iteration by kind: convolution, batch_norm, pooling, relu/elementwise, other.
A kernel counts for the outermost op above it whose name names a kind (:func:`op_kind`): the
cuDNN kernels of aten::cudnn_convolution, and the bias add under aten::convolution, are
convolution, as are those under the autograd node ConvolutionBackward0; a Triton kernel that
Inductor fused from batch norm and ReLU is batch_norm (even where its name, which lists the ops
around it too, has "convolution_backward" in it). Kernels under no op of a kind, and any
the profiler tied to no op, are other. Kernel time only: unlike Caffe's per-layer timer it
leaves out the gaps between kernels, so the kinds add up to less than the iteration. The
profiled process is not timed (the profiler slows the host side).

ResNet-50 (no prototxt/ net; 3x224x224, 1000 classes, batch 128 by default) is built as the
Caffe ResNet-50 of He et al. 2016: bottleneck v1, a downsampling block's stride on its first
1x1 convolution (branch2a) and its projection shortcut. torchvision's resnet50 is "v1.5", the
stride on the 3x3. This net is torchvision's resnet50(weights=None) with, in each Bottleneck
that has a downsample, conv1.stride = (s, s) and conv2.stride = (1, 1): the same layers and
parameters; v1 does less work (those blocks' 3x3 convolutions run at the lower resolution).

JSON (--json): ``{"meta": {torch, CUDA and cuDNN versions, GPU, driver, TF32 switches, the
command line, the options}, "nets": {net: {"batch", "input_shape", "modes": {mode:
{"median_ms", "per_process_ms", "first_iteration_s", "peak_gpu_memory_bytes",
"memory_method", "max_memory_reserved_bytes", "processes": [each process's own record],
"profile"?: {"per_iteration_ms": {kind: ms}, ...}, "error"?: str}}, "pytorch_mode",
"pytorch_ms", "median_ms" (= pytorch_ms: what `ucudnn reproduce` reads),
"peak_gpu_memory_bytes" (pytorch_mode's), "by_type_ms"? (pytorch_mode's profile in the kinds
of Caffe's layers, for ucudnn's layer-type plot)}}}``, written again after every net. One
summary line per net on stdout; each process's result, as it ends, on stderr.

    python scripts/time_pytorch.py --net resnet18 --net resnet50 --profile --json pytorch.json

GPU by default; --device cpu (timed with time.perf_counter, no NVML) is only for a smoke test:
compile needs a C++ compiler there, and where it fails its error is recorded as any mode's is.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError:       # the parent and the pure functions need no torch; main() says so
    torch = nn = F = None

#: the base of the networks' blocks: nn.Module, or object where torch is missing (the module
#: then still imports, for its argument parsing and JSON assembly)
_Module = nn.Module if nn is not None else object

NETS = ("alexnet", "resnet18", "cifar10", "resnet50")
MODES = ("eager", "channels_last", "compile")
#: the kinds of GPU time of a profile, in the order of :func:`op_kind`'s tests
KINDS = ("convolution", "batch_norm", "pooling", "relu/elementwise", "other")
#: NVML sampling interval (s)
NVML_INTERVAL = 0.005


# ---------------------------------------------------------------------------------------------
# The networks, layer for layer as in prototxt/. Caffe pools with ceil-mode output sizes.

def alexnet():
    """bvlc_alexnet train_val. 227 -> conv1 55 -> pool1 27 -> pool2 13 -> pool5 6: 256x6x6 = 9216
    features into fc6; fc6, fc7 4096, fc8 1000. conv2, conv4 and conv5 have group 2."""
    def lrn():
        return nn.LocalResponseNorm(size=5, alpha=1e-4, beta=0.75, k=1.0)   # Caffe: k = 1

    def pool():
        return nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True)

    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(inplace=True), lrn(), pool(),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(inplace=True), lrn(), pool(),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(inplace=True), pool(),
        nn.Flatten(),
        nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 1000),
    )


def conv_bn(cin, cout, kernel, stride, pad):
    """Convolution without bias, then BatchNorm + Scale (Caffe) = affine BatchNorm2d."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=pad, bias=False),
                         nn.BatchNorm2d(cout))


class BasicBlock(_Module):
    """Two 3x3 convolutions; a 1x1 projection shortcut (branch1) where the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.branch2a = conv_bn(cin, cout, 3, stride, 1)
        self.branch2b = conv_bn(cout, cout, 3, 1, 1)
        self.branch1 = conv_bn(cin, cout, 1, stride, 0) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        y = self.branch2b(F.relu(self.branch2a(x), inplace=True))
        shortcut = x if self.branch1 is None else self.branch1(x)
        return F.relu(y + shortcut, inplace=True)


class Bottleneck(_Module):
    """1x1 reduce to ``width`` (branch2a), 3x3 (branch2b), 1x1 expand to 4 x ``width``
    (branch2c); a 1x1 projection shortcut (branch1) where the shape changes. v1: the stride is
    on branch2a and branch1, as in Caffe's ResNet-50 (torchvision's v1.5 puts it on the 3x3)."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = 4 * width
        self.branch2a = conv_bn(cin, width, 1, stride, 0)
        self.branch2b = conv_bn(width, width, 3, 1, 1)
        self.branch2c = conv_bn(width, cout, 1, 1, 0)
        self.branch1 = conv_bn(cin, cout, 1, stride, 0) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        y = F.relu(self.branch2a(x), inplace=True)
        y = self.branch2c(F.relu(self.branch2b(y), inplace=True))
        shortcut = x if self.branch1 is None else self.branch1(x)
        return F.relu(y + shortcut, inplace=True)


def _stem():
    """conv1 7x7/2 pad 3 -> 112, pool1 3x3/2 pad 0 ceil -> 56 (3x224x224 in)."""
    return [conv_bn(3, 64, 7, 2, 3), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True)]


def resnet18():
    """3x224x224: conv1 7x7/2 -> 112, pool1 3x3/2 pad 0 ceil -> 56, res2..res5 -> 7, global avg."""
    stages, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(
        *_stem(),
        *stages,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000),
    )


def resnet50():
    """He et al. 2016 ResNet-50 (Caffe's, bottleneck v1), 3x224x224: conv1 and pool1 as
    ResNet-18's -> 56; res2 3 blocks of width 64 (256 out) at 56, res3 4 x 128 (512) at 28,
    res4 6 x 256 (1024) at 14, res5 3 x 512 (2048) at 7; global avg, fc 1000. The first block of
    res3..res5 downsamples with stride 2 on its first 1x1 (:class:`Bottleneck`)."""
    stages, cin = [], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        stages.append(Bottleneck(cin, width, stride))
        stages += [Bottleneck(4 * width, width, 1) for _ in range(blocks - 1)]
        cin = 4 * width
    return nn.Sequential(
        *_stem(),
        *stages,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000),
    )


def cifar10():
    """cifar10_quick: 3x32x32 -> 32 -> pool1 16 -> pool2 8 -> pool3 4; 64x4x4 = 1024 -> 64 -> 10."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2),
        nn.MaxPool2d(3, stride=2, ceil_mode=True), nn.ReLU(inplace=True),   # pool1 before relu1
        nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(inplace=True),
        nn.AvgPool2d(3, stride=2, ceil_mode=True),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(inplace=True),
        nn.AvgPool2d(3, stride=2, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 64),                           # no ReLU between ip1 and ip2
        nn.Linear(64, 10),
    )


# name: (constructor, batch (the prototxt's; resnet50 has none there), input C x H x W, classes)
SPECS = {
    "alexnet": (alexnet, 256, (3, 227, 227), 1000),
    "resnet18": (resnet18, 256, (3, 224, 224), 1000),
    "cifar10": (cifar10, 1024, (3, 32, 32), 10),
    "resnet50": (resnet50, 128, (3, 224, 224), 1000),
}


def build_net(name, batch=None):
    """(model, input_shape, num_classes) for a net of :data:`SPECS`; batch None = its default."""
    make, default_batch, chw, classes = SPECS[name]
    return make(), (batch or default_batch, *chw), classes


def net_batch(name, batch=None):
    return batch or SPECS[name][1]


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


def prepare(name, batch, mode, device):
    """``iteration() -> (total ms, forward ms)`` of ``name`` in ``mode`` on ``device``."""
    model, shape, _ = build_net(name, batch)
    model = model.to(device).train()                       # train phase: dropout, batch statistics
    data = torch.randn(shape, device=device)               # DummyData: gaussian std 1
    labels = torch.zeros(shape[0], dtype=torch.long, device=device)   # constant 0
    if mode == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        data = data.to(memory_format=torch.channels_last)
    forward = torch.compile(model) if mode == "compile" else model
    mark, ms = timer(device)

    def iteration():
        model.zero_grad(set_to_none=True)
        start = mark()
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


def time_mode(name, batch, mode, iterations, warmup, device):
    """One process's timing of one mode (module docstring, Method)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    iteration, shape = prepare(name, batch, mode, device)
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


def self_time_us(evt, clock):
    """An event's own time in µs: on the device (kernels it launched itself; the attribute is
    ``self_device_time_total`` in newer torch, ``self_cuda_time_total`` in older) or, for
    ``clock`` "cpu", on the host."""
    if clock == "cpu":
        return evt.self_cpu_time_total
    us = getattr(evt, "self_device_time_total", None)
    return us if us is not None else getattr(evt, "self_cuda_time_total", 0)


def _on_cpu(evt):
    return str(getattr(evt, "device_type", "DeviceType.CPU")).endswith("CPU")


def profile_mode(name, batch, mode, iterations, warmup, device):
    """The raw profile of ``iterations`` iterations after ``warmup``: per stack of host ops
    (outermost first) the time of what its innermost op ran itself (``rows``, for
    :func:`group_profile`), the device's whole kernel time (``kernel_total_us``: the kernels'
    own events, less the GPU user annotations that span them), and the ops of most time from
    key_averages (``top_ops_us``)."""
    from torch.profiler import ProfilerActivity, profile
    iteration, _ = prepare(name, batch, mode, device)
    for _ in range(warmup):
        iteration()
    clock = "cuda" if device.type == "cuda" else "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if clock == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(iterations):
            iteration()
        sync(device)
    stacks, kernel_total = {}, 0.0
    for evt in prof.events():
        if getattr(evt, "is_async", False):
            continue
        if not _on_cpu(evt):                               # a kernel, copy or memset
            if not getattr(evt, "is_user_annotation", False):
                kernel_total += self_time_us(evt, clock)
            continue
        us = self_time_us(evt, clock)
        if not us:
            continue
        stack, up = [], evt
        while up is not None:
            stack.append(up.name)
            up = up.cpu_parent
        key = tuple(reversed(stack))
        stacks[key] = stacks.get(key, 0.0) + us
    top = {}
    for evt in prof.key_averages():
        if _on_cpu(evt):
            us = self_time_us(evt, clock)
            if us:
                top[evt.key] = top.get(evt.key, 0.0) + us
    return {
        "clock": clock,
        "iterations": iterations,
        "rows": [{"stack": list(k), "us": v} for k, v in stacks.items()],
        "kernel_total_us": kernel_total if clock == "cuda" else None,
        "top_ops_us": dict(sorted(top.items(), key=lambda kv: -kv[1])[:25]),
    }


def worker_main(args):
    """Run one task (time or profile) of one mode of one net; its result, or its error, as
    JSON in ``args.worker``. Exit status 0: it ran; 1: the JSON holds the error."""
    result = {"pid": os.getpid(), "task": args.worker_task}
    try:
        device = worker_device(args.device)
        result["env"] = worker_env(device)
        task = profile_mode if args.worker_task == "profile" else time_mode
        iterations = args.profile_iterations if args.worker_task == "profile" else args.iterations
        result.update(task(args.net[0], args.batch, args.mode[0], iterations, args.warmup,
                           device))
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

def _peak_gpu_memory():
    """:class:`ucudnn.experiments.gpu_memory.PeakGpuMemory`, the sampler that measures Caffe's
    processes, so that both sides are measured alike; from the checkout this script lives in
    where the running Python lacks ucudnn (the module is plain Python)."""
    try:
        from ucudnn.experiments.gpu_memory import PeakGpuMemory
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from ucudnn.experiments.gpu_memory import PeakGpuMemory
    return PeakGpuMemory(interval=NVML_INTERVAL)


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
           "--profile-iterations", str(args.profile_iterations)]
    return cmd + (["--batch", str(args.batch)] if args.batch else [])


def run_worker(args, net, mode, task, tmp, tag):
    """One worker process; its JSON result with ``peak_gpu_memory_bytes`` and
    ``memory_method`` (time tasks) added, or ``error`` (and ``log_tail``) where it failed."""
    base = os.path.join(tmp, f"{net}.{mode}.{task}.{tag}")
    out = base + ".json"
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=base + ".inductor",
               TRITON_CACHE_DIR=base + ".triton")
    cuda = not args.device.startswith("cpu")
    measure = cuda and task == "time"                      # a profiled process's memory: no
    cmd = worker_command(args, net, mode, task, out)
    timed_out, t0 = False, time.perf_counter()
    with open(base + ".log", "w+") as log, \
            (_peak_gpu_memory() if measure else contextlib.nullcontext()) as mem:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env)
        if mem is not None:
            mem.watch(proc.pid)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            timed_out = True
        log.seek(0)
        log_tail = log.read()[-3000:]
    try:
        with open(out) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {}
    result.setdefault("pid", proc.pid)
    result["wall_s"] = time.perf_counter() - t0            # the whole process, start to exit
    if timed_out:
        result["error"] = f"timed out after {args.timeout:g} s"
    elif "error" not in result and (rc != 0 or not result):
        result["error"] = f"worker exited with status {rc} and no result"
    if "error" in result:
        result["log_tail"] = log_tail
    if task == "time":
        result["peak_gpu_memory_bytes"], result["memory_method"] = process_memory(
            mem and mem.peak_bytes, mem and mem.error, result.get("max_memory_reserved_bytes"),
            cuda)
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


def profile_record(raw):
    """The ``profile`` of a mode from its profile worker's result (:func:`profile_mode`)."""
    if "error" in raw:
        return {"error": raw["error"]}
    n, total = raw["iterations"], raw.get("kernel_total_us")
    attributed = sum(row["us"] for row in raw["rows"])
    return {
        "per_iteration_ms": group_profile(raw["rows"], n, total),
        "clock": "GPU kernels" if raw["clock"] == "cuda" else "host (cpu)",
        "iterations": n,
        # kernel time the profiler tied to no op (in other)
        "unattributed_ms": None if total is None else max(0.0, total - attributed) / 1e3 / n,
        "top_ops_ms": {k: v / 1e3 / n for k, v in raw.get("top_ops_us", {}).items()},
    }


#: op-name tokens of elementwise work (names split at non-alphanumerics; an autograd node's
#: "Backward<n>" split off: MulBackward0 -> mul)
ELEMENTWISE = frozenset(("relu", "threshold", "add", "sub", "mul", "div", "clamp", "where",
                         "pow", "neg", "sqrt", "rsqrt", "exp", "dropout", "bernoulli"))


def op_kind(name):
    """The kind (:data:`KINDS`, not ``other``) an op's name says, or None: convolution (any
    name with "convolution": aten::convolution, aten::cudnn_convolution,
    aten::convolution_backward, ConvolutionBackward0), batch_norm, pooling ("pool"), then
    relu/elementwise (:data:`ELEMENTWISE`, or a Triton pointwise kernel, triton_poi_*).
    Inductor names a Triton kernel after the ops it fused and their neighbours (BatchNorm's
    backward fused with ReLU's is triton_poi_fused_convolution_backward_native_batch_norm_
    backward_threshold_backward_38), and its default mode leaves convolutions to cuDNN: a
    Triton kernel is convolution only as a template (triton_tem_*, max-autotune's).
    Inductor's "## Call CompiledFxGraph <hash> ##" says none (its hash could spell a name)."""
    low = name.lower()
    if low.startswith("##"):
        return None
    if "convolution" in low and (not low.startswith("triton_") or low.startswith("triton_tem")):
        return "convolution"
    if "batch_norm" in low or "batchnorm" in low:
        return "batch_norm"
    if "pool" in low:
        return "pooling"
    tokens = set(re.split(r"[^a-z0-9]+", re.sub(r"backward\d*", " ", low)))
    if tokens & ELEMENTWISE or low.startswith("triton_poi"):
        return "relu/elementwise"
    return None


def stack_kind(stack):
    """The kind of the time of a stack of ops (outermost first): the outermost op's that names
    one, else other. aten::convolution > aten::_convolution > aten::add_ (the bias) is
    convolution; aten::adaptive_avg_pool2d > aten::mean is pooling."""
    for name in stack:
        kind = op_kind(name)
        if kind is not None:
            return kind
    return "other"


def group_profile(rows, iterations, kernel_total_us=None):
    """ms per iteration of each kind (:data:`KINDS`) from a profile's ``rows`` (``{"stack":
    [op names, outermost first], "us": the innermost op's own time}``) over ``iterations``.
    Given the device's whole kernel time, what no op accounts for (kernels the profiler tied
    to none) is other too."""
    out = {k: 0.0 for k in KINDS}
    for row in rows:
        out[stack_kind(row["stack"])] += row["us"]
    if kernel_total_us is not None:
        out["other"] += max(0.0, kernel_total_us - sum(out.values()))
    return {k: v / 1e3 / iterations for k, v in out.items()}


def fastest_mode(modes):
    """The name of the mode of least ``median_ms`` among those that ran without error; None
    when none did."""
    ran = {m: r for m, r in modes.items() if "error" not in r and r.get("median_ms") is not None}
    return min(ran, key=lambda m: ran[m]["median_ms"]) if ran else None


#: the kinds of a profile in those of Caffe's per-layer times (ucudnn.experiments.results
#: TYPE_GROUPS, the layer-type plot's bars): BatchNorm2d is Caffe's BatchNorm + Scale; pooling
#: counts as other there; the elementwise work (residual adds, dropout) goes with relu
CAFFE_KINDS = {"convolution": "convolution", "batch_norm": "batchnorm",
               "relu/elementwise": "relu", "pooling": "other", "other": "other"}


def net_record(name, batch, modes):
    """A net's record: its modes' records, the fastest (``pytorch_mode``, ``pytorch_ms`` and,
    for ``ucudnn reproduce``, ``median_ms``), its peak memory and its profile in Caffe's
    kinds (``by_type_ms``)."""
    b = net_batch(name, batch)
    best = fastest_mode(modes)
    rec = {"batch": b, "input_shape": [b, *SPECS[name][2]], "modes": modes,
           "pytorch_mode": best,
           "pytorch_ms": modes[best]["median_ms"] if best else None}
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
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:  # noqa: BLE001 - no NVML: ask nvidia-smi
        pass
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
                    "processes": args.processes, "iterations": args.iterations,
                    "warmup": args.warmup, "profile": args.profile,
                    "profile_iterations": args.profile_iterations if args.profile else 0,
                    "nvml_interval_s": NVML_INTERVAL},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json_atomic(path, document):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".time_pytorch.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", action="append", choices=NETS,
                        help="network to time (repeatable; default: all four)")
    parser.add_argument("--mode", action="append", choices=MODES,
                        help="eager, channels_last or compile (repeatable; default: all three)")
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
    args.mode = list(dict.fromkeys(args.mode or MODES))
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
            results[net] = net_record(net, args.batch, modes)
            print(summary_line(net, results[net]), flush=True)
            if args.json:
                document["meta"] = meta(args, env, driver, argv)
                write_json_atomic(args.json, document)
    if args.json:
        print(f"wrote {args.json}")
    return 0 if all(r["pytorch_mode"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
