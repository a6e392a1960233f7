"""``bench_torch.py overhead``: what one convolution call through ucudnn.torch costs the host,
by the way it reaches the core (imported by scripts/bench_torch.py once torch is loaded).

A convolution so small that the GPU waits for the host (default N=1, 8 -> 8 channels, 8x8, 1x1
filter) is called ``--calls`` times back to back, CUDA events around the batch: the time per
call is the host's per call. Variants, in one process with one planned kernel per operation
(planned before timing, the same plans for all):

    pytorch     torch.nn.functional.conv2d (cuDNN through PyTorch, cudnn.benchmark on)
    function    the same convolution and its native gradients behind a Python
                torch.autograd.Function: what a Python autograd node alone costs (the floor of
                any front end written in Python)
    core        the planned kernel's Kernel.run alone (handle, workspace and output made once)
    direct      the operator's implementation called as a Python function (no dispatcher)
    eager       what a converted module calls in eager mode (Note [Eager calls] in
                ucudnn/torch/eager.py): native where it loads
    functions   the eager path's Python autograd Functions ($UCUDNN_TORCH_NATIVE=0)
    native      the eager path's C++ calls alone (Note [Native calls]; left out where the
                extension does not load)
    custom_op   torch.ops.ucudnn.conv_fwd... registered with torch.library.custom_op
    library     the same registered with a torch.library.Library fragment (define/impl)

``--mode forward`` calls the forward under no_grad; ``--mode train`` runs forward and backward
(input and weight gradients: three core calls; ``core`` and ``direct`` call the three without
autograd). The variants are interleaved: each of ``--reps`` repetitions times every variant
once, in a rotated order, and the result is each variant's median over the repetitions, in
microseconds per call, with its ratio to ``pytorch`` and to ``custom_op``. The cheaper
registration style is DEFAULT_STYLE in ucudnn/torch/ops.py.
"""
from __future__ import annotations

import platform
import statistics
import sys

import torch

from ucudnn.torch import eager, ops, runtime
from ucudnn.torch.convert import settings_from
from ucudnn.torch.runtime import config_id

VARIANTS = ("pytorch", "function", "core", "direct", "eager", "functions", "native",
            "custom_op", "library")
OPS = ("fwd", "bwd_data", "bwd_filter")


def machine() -> dict:
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "torch_cudnn": torch.backends.cudnn.version(),
            "python": platform.python_version()}


def events_ms(step, calls: int, reps: int) -> float:
    """Median over ``reps`` of the milliseconds per call of ``calls`` calls between events."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def _core_calls(x, w, y, config, ops_used):
    """``Kernel.run`` of each planned kernel of ``ops_used`` on ready buffers."""
    dev, dtype = x.device, x.dtype
    twin = runtime.call_config(config, dtype)
    calls = []
    for op in ops_used:
        kern = next(k for key, k in runtime.planned_kernels().items()
                    if key[0] == op and key[1] == tuple(x.shape) and key[-1] == twin)
        a, b, out = {"fwd": (x, w, y), "bwd_data": (w, y, torch.empty_like(x)),
                     "bwd_filter": (x, y, torch.empty_like(w))}[op]
        need = kern.workspace_size
        ws = torch.empty(max(need, 1), dtype=torch.uint8, device=dev)
        calls.append((kern, a.data_ptr(), b.data_ptr(), out.data_ptr(), ws.data_ptr(), need))
    handle = runtime._handle(dev)

    def step():
        for kern, a, b, out, ws, need in calls:
            kern.run(handle, a, b, out, ws, need)
    return step


class _PythonNode(torch.autograd.Function):
    """PyTorch's convolution with PyTorch's gradients, behind a Python autograd node."""

    @staticmethod
    def forward(ctx, x, w, stride, padding, dilation, groups):
        ctx.save_for_backward(x, w)
        ctx.geometry = (stride, padding, dilation, groups)
        return torch.nn.functional.conv2d(x, w, None, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.geometry
        dx, dw, _ = torch.ops.aten.convolution_backward(
            gy, x, w, None, stride, padding, dilation, False, [0] * len(stride), groups,
            [ctx.needs_input_grad[0], ctx.needs_input_grad[1], False])
        return dx, dw, None, None, None, None


def callables(args):
    """{variant: step}: ``step()`` makes one call (forward, or forward and backward)."""
    config = config_id(settings_from(limit=args.limit, engines=args.engines))
    geo = ([1, 1], [args.pad, args.pad], [1, 1], 1, config)
    dev = torch.device("cuda")
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.n, args.c, args.hw, args.hw, device=dev, dtype=dtype)
    w = torch.randn(args.k, args.c, args.r, args.r, device=dev, dtype=dtype)
    train = args.mode == "train"
    if train:
        x.requires_grad_(True)
        w.requires_grad_(True)
    impl = {n: f for n, (f, _) in ops.IMPLS.items()}

    def direct():               # the implementations, no autograd, no dispatcher
        y = impl["conv_fwd"](x.detach(), w.detach(), *geo)
        if train:
            impl["conv_bwd_data"](w.detach(), y, list(x.shape), *geo)
            impl["conv_bwd_filter"](x.detach(), y, list(w.shape), *geo)
        return y
    y = direct()                # plans the kernels the core variant runs
    fns = {"pytorch": lambda: torch.nn.functional.conv2d(x, w, None, *geo[:4]),
           "function": lambda: _PythonNode.apply(x, w, *geo[:4]),
           "eager": lambda: eager.conv_fwd(x, w, *geo),
           "functions": lambda: eager._ConvFwd.apply(x, w, *geo),
           "custom_op": lambda: ops.registered("custom_op").fwd(x, w, *geo),
           "library": lambda: ops.registered("library").fwd(x, w, *geo)}

    def with_backward(f):
        def step():
            f().sum().backward()
        return step
    native = eager._native_module()
    if native is not None:
        fns["native"] = lambda: native.conv_fwd(x, w, *geo)
    steps = {v: with_backward(f) if train else f for v, f in fns.items()}
    steps["direct"] = direct
    steps["core"] = _core_calls(x.detach(), w.detach(), y, config,
                                OPS if train else OPS[:1])
    return steps


def overhead(args) -> dict:
    torch.backends.cudnn.benchmark = True
    ctx = torch.no_grad() if args.mode == "forward" else torch.enable_grad()
    with ctx:
        steps = callables(args)
        for step in steps.values():             # plans, cudnn.benchmark, warm caches
            for _ in range(args.warmup):
                step()
        torch.cuda.synchronize()
        variants = tuple(v for v in VARIANTS if v in steps)
        times = {v: [] for v in variants}
        for rep in range(args.reps):
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            for v in order:
                times[v].append(events_ms(steps[v], args.calls, 1) * 1000.0)
    med = {v: statistics.median(t) for v, t in times.items()}
    return {
        "subcommand": "overhead", "argv": sys.argv[1:], "mode": args.mode,
        "shape": {"n": args.n, "c": args.c, "k": args.k, "hw": args.hw, "r": args.r,
                  "pad": args.pad, "dtype": args.dtype},
        "calls_per_timing": args.calls, "reps": args.reps,
        "median_us_per_call": med,
        "native": eager.native_status()[1],
        "ratio_to_pytorch": {v: med[v] / med["pytorch"] for v in med},
        "ratio_to_custom_op": {v: med[v] / med["custom_op"] for v in med},
        "cheaper_style": min(ops.STYLES, key=lambda s: med[s]),
        "samples_us_per_call": times,
        "machine": machine(),
    }


def summary(doc: dict) -> str:
    med = doc["median_us_per_call"]
    return (f"{doc['mode']} {doc['shape']['dtype']}: "
            + ", ".join(f"{v} {t:.1f} us" for v, t in med.items())
            + f"; cheaper style: {doc['cheaper_style']} (library/custom_op "
            f"{doc['ratio_to_custom_op']['library']:.3f}); eager/pytorch "
            f"{doc['ratio_to_pytorch']['eager']:.2f}")
