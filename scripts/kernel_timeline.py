#!/usr/bin/env python3
"""Where a training iteration's GPU time goes: the kernels' own time, and the GPU's idle time
between them, of a Caffe net (through pycaffe) or of a PyTorch mode, from one trace format.

    python scripts/kernel_timeline.py caffe NET.prototxt [--out F.json]
    python scripts/kernel_timeline.py pytorch resnet50 --mode compile [--batch 128]

Both run in this process under torch.profiler, whose CUPTI activity trace records every kernel,
copy and memset the process starts, whoever launches it (Caffe's layers, cuDNN, cuBLAS,
Inductor's Triton kernels) with its start and end on the GPU's clock. PyTorch is imported
before pycaffe so that both use the one cuDNN this environment has (the wheel Caffe was built
against on the GPU host).

An iteration is what each side's timer times: Caffe's Net::Forward + Net::Backward (pycaffe's
``net.forward(); net.backward()``, as `caffe time`'s whole iterations, Note [Whole
iterations] in caffe_patch/0006), PyTorch's forward, loss and backward with gradients set to
None (scripts/time_pytorch.py's iteration). Method:

* ``--warmup`` iterations (plans, algorithm searches, compilation), then ``--iterations``
  timed ones without the profiler, each between CUDA events on the default stream and
  synchronized: ``wall_ms`` (median). The default stream here is the legacy one, which waits
  for and is waited for by every blocking stream (Caffe's convolution streams), so an event
  pair spans all of an iteration's work.
* ``--profile-iterations`` more under the profiler, synchronized before and after. Over their
  span (first kernel start to last kernel end): ``busy_ms``, the union of the kernels', copies'
  and memsets' intervals (kernels that overlap on two streams count once), and ``idle_ms`` =
  span - busy, both per iteration. ``kernel_ms`` is the plain sum of their durations per
  iteration (more than busy where streams overlap). The profiler slows the host, so a span
  can be longer than ``wall_ms``; the kernels' durations are the GPU's own.
* Kernel time by kind (:func:`kind`, from the kernel's name), the kernels of most time, and
  the gaps: every idle interval longer than ``--gap-us``, grouped by the kernels on either
  side, largest total first.

Prints a summary and writes the whole record as JSON (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))

#: (kind, pattern of a kernel's name), first match wins
KINDS = (
    ("batch_norm", r"BatchNorm|batch_norm|bn_fw|bn_bw"),
    ("softmax/loss", r"[Ss]oftmax|nll|cross|Loss"),
    ("pooling", r"pool|Pool"),
    ("convolution", r"conv|xmma|cutlass|implicit|winograd|fft|dgrad|wgrad|gemm|sm90|sm80"
                    r"|cudnn|nchwToNhwc|nhwcToNchw|Layout|transpose"),
    ("elementwise", r"Eltwise|ReLU|relu|Split|Sum|add|triton_poi|elementwise|vectorized"),
    ("reduction", r"reduce|Reduce|triton_red|triton_per"),
)


def kind(name):
    for k, pattern in KINDS:
        if re.search(pattern, name):
            return k
    return "other"


def short(name, n=90):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= n else name[:n] + "..."


def analyse(trace_path, iterations, gap_us):
    """The profile's kernels, copies and memsets from a Chrome trace: busy, idle and kernel
    time per iteration, time by kind, top kernels and gaps (module docstring)."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    ops = sorted(((e["ts"], e["ts"] + e.get("dur", 0), e["name"], e.get("cat", ""))
                  for e in events
                  if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy",
                                                             "gpu_memset")),
                 key=lambda o: o[0])
    if not ops:
        raise SystemExit("the profile holds no kernels: is CUPTI there?")
    span = ops[-1][1] - ops[0][0]
    busy, end = 0.0, ops[0][0]
    gaps = defaultdict(lambda: [0, 0.0])
    prev = None                                             # the op that ends at `end`
    for t0, t1, name, _ in ops:
        if t0 > end:
            if prev is not None and t0 - end > gap_us:
                g = gaps[(short(prev, 60), short(name, 60))]
                g[0] += 1
                g[1] += t0 - end
            busy += t1 - t0
        elif t1 > end:
            busy += t1 - end
        if t1 > end:
            end, prev = t1, name
    by_kind = defaultdict(float)
    by_name = defaultdict(lambda: [0, 0.0])
    for t0, t1, name, _ in ops:
        by_kind[kind(name)] += t1 - t0
        k = by_name[short(name)]
        k[0] += 1
        k[1] += t1 - t0
    per = 1e3 * iterations                                  # µs -> ms per iteration
    return {
        "span_ms": span / per,
        "busy_ms": busy / per,
        "idle_ms": (span - busy) / per,
        "kernel_ms": sum(by_kind.values()) / per,
        "launches": len(ops) / iterations,
        "by_kind_ms": {k: v / per for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"name": n, "per_iteration": c / iterations, "ms": t / per,
                         "mean_us": t / c}
                        for n, (c, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:40]],
        "gaps_over_us": gap_us,
        "gaps": [{"after": a, "before": b, "per_iteration": c / iterations, "ms": t / per}
                 for (a, b), (c, t) in sorted(gaps.items(), key=lambda kv: -kv[1][1])[:25]],
    }


def caffe_subject(model):
    import caffe                                            # after torch (module docstring)
    caffe.set_device(0)
    caffe.set_mode_gpu()
    net = caffe.Net(model, caffe.TRAIN)

    def iteration():
        net.forward()
        net.backward()
    return iteration


def pytorch_subject(net_name, mode, batch):
    sys.path.insert(0, HERE)
    import time_pytorch
    device = time_pytorch.worker_device("cuda")
    iteration, _ = time_pytorch.prepare(net_name, batch, mode, device)
    return iteration


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("side", choices=("caffe", "pytorch"))
    p.add_argument("subject", help="Caffe: a prototxt; PyTorch: a net of time_pytorch.py")
    p.add_argument("--mode", default="compile", help="PyTorch: eager, channels_last, compile")
    p.add_argument("--batch", type=int, default=None, help="PyTorch: the batch")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--profile-iterations", type=int, default=5)
    p.add_argument("--gap-us", type=float, default=5.0)
    p.add_argument("--out", help="the record as JSON")
    args = p.parse_args(argv)
    if args.side == "caffe" and not os.path.isfile(args.subject):
        p.error(f"{args.subject}: no such prototxt")
    try:
        import torch                                        # first (module docstring)
        from torch.profiler import ProfilerActivity, profile
    except ImportError as e:
        p.error(f"needs PyTorch with CUDA for its profiler ({e})")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    if args.side == "caffe":
        try:
            iteration = caffe_subject(args.subject)
        except ImportError as e:
            p.error(f"needs pycaffe on PYTHONPATH (scripts/gpu_node.sh setup builds it in "
                    f"third_party/caffe/src/python): {e}")
    else:
        iteration = pytorch_subject(args.subject, args.mode, args.batch)
    for _ in range(args.warmup):
        iteration()
    torch.cuda.synchronize()
    wall = []
    for _ in range(args.iterations):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        iteration()
        b.record()
        torch.cuda.synchronize()
        wall.append(a.elapsed_time(b))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.profile_iterations):
            iteration()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(trace)
        rec = analyse(trace, args.profile_iterations, args.gap_us)
    rec = {"side": args.side, "subject": args.subject,
           "mode": args.mode if args.side == "pytorch" else None,
           "wall_ms": statistics.median(wall), "wall_all_ms": wall, **rec}
    name = (os.path.basename(args.subject) if args.side == "caffe"
            else f"{args.subject} {args.mode}")
    print(f"{name}: wall {rec['wall_ms']:.2f} ms; profiled span {rec['span_ms']:.2f}, busy "
          f"{rec['busy_ms']:.2f}, idle {rec['idle_ms']:.2f}, kernel sum {rec['kernel_ms']:.2f} "
          f"ms, {rec['launches']:.0f} launches per iteration")
    print("  by kind: " + ", ".join(f"{k} {v:.2f}" for k, v in rec["by_kind_ms"].items()))
    for k in rec["top_kernels"][:25]:
        print(f"  {k['ms']:7.3f} ms {k['per_iteration']:5.0f}x {k['mean_us']:8.1f} us  {k['name']}")
    print(f"  gaps over {args.gap_us:g} us:")
    for g in rec["gaps"][:12]:
        print(f"  {g['ms']:7.3f} ms {g['per_iteration']:5.0f}x  {g['after']}  ->  {g['before']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
