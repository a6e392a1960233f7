#!/usr/bin/env python3
"""PyTorch baseline: the networks of prototxt/ timed in PyTorch with cudnn.benchmark on.

Compares to the Caffe runs of `ucudnn reproduce` (ucudnn/reproduce.py: `caffe time`
"Forward-Backward" on prototxt/ (alexnet, resnet18, cifar10), with and without μ-cuDNN). The
same networks are written layer for layer in torch.nn and one iteration does the same work:
forward, softmax cross-entropy against constant labels 0 (DummyData), backward; grads zeroed
before, no optimizer step.

Why cudnn.benchmark is the fair baseline: PyTorch then times every cuDNN algorithm for each
convolution shape on first use and keeps the fastest, with no workspace limit beyond what the
caching allocator can give -- the "fastest undivided algorithm" that micro-batching must beat.

Method: --warmup iterations (the first, which includes the algorithm search, is timed on its own
with a wall clock), then --iterations iterations, each bracketed by CUDA events and synchronized
as Caffe's timer is. fp32, TF32 switches left at PyTorch's defaults and recorded. Known
differences from Caffe: the input is made once (DummyData refills it each forward);
nn.LocalResponseNorm is built from elementwise ops and pooling (Caffe uses cuDNN's LRN); the
CIFAR-10 net's train-phase Accuracy layer (forward only) is not run.

    python scripts/time_pytorch.py --net alexnet --net resnet18 --json results/h200/pytorch.json

GPU by default; --device cpu (timed with time.perf_counter) is only for a smoke test.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError:
    print("time_pytorch.py needs PyTorch: pip install torch (no torchvision)", file=sys.stderr)
    sys.exit(2)

NETS = ("alexnet", "resnet18", "cifar10")


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


class BasicBlock(nn.Module):
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


def resnet18():
    """3x224x224: conv1 7x7/2 -> 112, pool1 3x3/2 pad 0 ceil -> 56, res2..res5 -> 7, global avg."""
    stages, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(
        conv_bn(3, 64, 7, 2, 3), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True),
        *stages,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000),
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


# name: (constructor, prototxt batch, input C x H x W, classes)
SPECS = {
    "alexnet": (alexnet, 256, (3, 227, 227), 1000),
    "resnet18": (resnet18, 256, (3, 224, 224), 1000),
    "cifar10": (cifar10, 1024, (3, 32, 32), 10),
}


def build_net(name, batch=None):
    """(model, input_shape, num_classes) for a net of prototxt/; batch None = the prototxt's."""
    make, default_batch, chw, classes = SPECS[name]
    return make(), (batch or default_batch, *chw), classes


# ---------------------------------------------------------------------------------------------
# Timing

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


#: Kinds of work in the profile (Caffe's layer types in ucudnn.experiments.results.TYPE_GROUPS;
#: PyTorch's BatchNorm2d is Caffe's BatchNorm + Scale), by the aten op that launches the kernels.
OP_GROUPS = (("convolution", ("convolution",)), ("batchnorm", ("batch_norm",)),
             ("relu", ("relu", "threshold", "clamp_min")))


def op_group(op):
    for group, keys in OP_GROUPS:
        if any(k in op for k in keys):
            return group
    return "other"


def profile_by_type(iteration, iterations, device):
    """GPU time per kind of work (:data:`OP_GROUPS`, else ``other``), ms per iteration: the
    device time of the kernels each aten op launched (the ops' self time, so nothing counts
    twice; the profiler's rows of the kernels themselves are skipped, they repeat it),
    from torch.profiler over ``iterations`` iterations. Kernel time only: unlike Caffe's
    per-layer timer it leaves out the gaps between kernels."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            iteration()
        sync(device)
    out = {g: 0.0 for g, _ in OP_GROUPS}
    out["other"] = 0.0
    ops = {}
    for evt in prof.key_averages():
        if not evt.key.startswith("aten::"):
            continue        # a kernel's own row: its time is already its aten op's self time
        us = getattr(evt, "self_device_time_total", None)
        if us is None:
            us = getattr(evt, "self_cuda_time_total", 0.0)
        if us:
            out[op_group(evt.key)] += us / 1e3 / iterations
            ops[evt.key] = us / 1e3 / iterations
    return out, dict(sorted(ops.items(), key=lambda kv: -kv[1])[:25])


def time_net(name, batch, iterations, warmup, device, profile_iterations=0):
    """Time one net; the peak memory counts everything it allocates (weights and input too)."""
    if device.type == "cuda":                              # the previous net's memory is gone
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model, shape, _ = build_net(name, batch)
    model = model.to(device).train()                       # train phase: dropout, batch statistics
    data = torch.randn(shape, device=device)               # DummyData: gaussian std 1
    labels = torch.zeros(shape[0], dtype=torch.long, device=device)   # constant 0
    mark, ms = timer(device)

    def iteration():
        model.zero_grad(set_to_none=True)
        start = mark()
        loss = F.cross_entropy(model(data), labels)
        forward_done = mark()
        loss.backward()
        end = mark()
        sync(device)
        return ms(start, end), ms(start, forward_done)

    sync(device)
    t0 = time.perf_counter()
    iteration()                                            # cudnn.benchmark searches here
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(warmup - 1):
        iteration()
    total, forward = zip(*(iteration() for _ in range(iterations)))
    by_type = top_ops = None
    if profile_iterations and device.type == "cuda":
        by_type, top_ops = profile_by_type(iteration, profile_iterations, device)
    return {
        "by_type_ms": by_type,
        "top_ops_ms": top_ops,
        "profiled_iterations": profile_iterations if by_type else 0,
        "batch": shape[0],
        "input_shape": list(shape),
        "median_ms": statistics.median(total),
        "min_ms": min(total),
        "max_ms": max(total),
        "forward_median_ms": statistics.median(forward),
        "first_iteration_ms": first_ms,
        "iterations": iterations,
        "warmup": warmup,
        "times_ms": list(total),
        "max_memory_bytes": (torch.cuda.max_memory_allocated(device)
                             if device.type == "cuda" else None),
    }


# ---------------------------------------------------------------------------------------------
# Reporting

def nvidia_driver():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
        return lines[0] if lines else None
    except (OSError, subprocess.SubprocessError):
        return None


def meta(device):
    cuda = device.type == "cuda"
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": (torch.backends.cudnn.version()
                          if torch.backends.cudnn.is_available() else None),
        "gpu_name": torch.cuda.get_device_name(device) if cuda else None,
        "driver_version": nvidia_driver() if cuda else None,
        "device": str(device),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "python_version": platform.python_version(),
        "command_line": shlex.join([sys.executable] + sys.argv),
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", action="append", choices=NETS,
                        help="network to time (repeatable; default: all three)")
    parser.add_argument("--batch", type=int, help="batch size (default: the prototxt's)")
    parser.add_argument("--iterations", type=int, default=20, help="timed iterations (20)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up iterations, >= 1 (5)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (smoke test only)")
    parser.add_argument("--json", metavar="OUT.json", help="also write the results here")
    parser.add_argument("--profile-iterations", type=int, default=5,
                        help="iterations profiled after timing for GPU time per kind of work "
                        "(convolution, batchnorm, relu, other); 0: none (5)")
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.iterations < 1 or (args.batch is not None and args.batch < 1):
        parser.error("--warmup, --iterations and --batch must be at least 1")
    if args.profile_iterations < 0:
        parser.error("--profile-iterations must be at least 0")

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("time_pytorch.py: CUDA is not available (no GPU or a CPU-only torch); "
              "pass --device cpu for a smoke test", file=sys.stderr)
        return 2
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)                      # CUDA events record on this device
    torch.backends.cudnn.benchmark = True                  # TF32 switches: left at their defaults
    info = meta(device)
    print(f"torch {info['torch_version']}  CUDA {info['cuda_version']}"
          f"  cuDNN {info['cudnn_version']}"
          f"  {info['gpu_name'] or device}  TF32 cudnn={info['cudnn_allow_tf32']}"
          f" matmul={info['matmul_allow_tf32']}")
    print(f"{'net':<9} {'batch':>5} {'median':>9} {'min':>9} {'max':>9} {'fwd med':>9}"
          f" {'1st iter':>9} {'peak mem':>10}   (ms; fwd+bwd unless 'fwd')")

    results = {}
    for name in args.net or NETS:
        try:
            r = time_net(name, args.batch, args.iterations, args.warmup, device,
                         args.profile_iterations)
        except torch.cuda.OutOfMemoryError as e:               # record it, go on to the next net
            results[name] = {"batch": args.batch or SPECS[name][1], "error": f"out of memory: {e}"}
            print(f"{name:<9} out of memory")
            continue
        results[name] = r
        mem = "-" if r["max_memory_bytes"] is None else f"{r['max_memory_bytes'] / 2**30:.2f} GiB"
        print(f"{name:<9} {r['batch']:>5} {r['median_ms']:>9.2f} {r['min_ms']:>9.2f}"
              f" {r['max_ms']:>9.2f} {r['forward_median_ms']:>9.2f}"
              f" {r['first_iteration_ms']:>9.1f} {mem:>10}")
        if r["by_type_ms"]:
            print(f"{'':<9} GPU time by kind (ms/iteration): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in r["by_type_ms"].items()))
    if args.json:
        write_json_atomic(args.json, {"meta": info, "nets": results})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
