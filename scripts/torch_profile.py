"""GPU kernel time per iteration by kind of op, from torch.profiler (scripts/time_pytorch.py
--profile).

One more process per mode runs --warmup iterations and then --profile-iterations iterations
under torch.profiler (CPU and CUDA activity) and gives the GPU kernel time per iteration by
kind: convolution, batch_norm, pooling, relu/elementwise, other. A kernel counts for the
outermost op above it whose name names a kind (:func:`op_kind`): the cuDNN kernels of
aten::cudnn_convolution, and the bias add under aten::convolution, are convolution, as are
those under the autograd node ConvolutionBackward0; a Triton kernel that Inductor fused from
batch norm and ReLU is batch_norm (even where its name, which lists the ops around it too, has
"convolution_backward" in it). Kernels under no op of a kind, and any the profiler tied to no
op, are other. Kernel time only: unlike Caffe's per-layer timer it leaves out the gaps between
kernels, so the kinds add up to less than the iteration. The profiled process is not timed
(the profiler slows the host side).
"""
from __future__ import annotations

import re

#: the kinds of GPU time of a profile, in the order of :func:`op_kind`'s tests
KINDS = ("convolution", "batch_norm", "pooling", "relu/elementwise", "other")


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


def profile_mode(iteration, iterations, warmup, device):
    """The raw profile of ``iterations`` calls of ``iteration`` after ``warmup``: per stack of
    host ops (outermost first) the time of what its innermost op ran itself (``rows``, for
    :func:`group_profile`), the device's whole kernel time (``kernel_total_us``: the kernels'
    own events, less the GPU user annotations that span them), and the ops of most time from
    key_averages (``top_ops_us``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    for _ in range(warmup):
        iteration()
    clock = "cuda" if device.type == "cuda" else "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if clock == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(iterations):
            iteration()
        if clock == "cuda":
            torch.cuda.synchronize(device)
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



#: the kinds of a profile in those of Caffe's per-layer times (ucudnn.experiments.results
#: TYPE_GROUPS, the layer-type plot's bars): BatchNorm2d is Caffe's BatchNorm + Scale; pooling
#: counts as other there; the elementwise work (residual adds, dropout) goes with relu
CAFFE_KINDS = {"convolution": "convolution", "batch_norm": "batchnorm",
               "relu/elementwise": "relu", "pooling": "other", "other": "other"}
