#!/usr/bin/env python3
"""ucudnn.torch on this GPU. Subcommand ``overhead``: what one operator call costs in each
registration style (Note [Two registration styles] in ucudnn/torch/ops.py).

    python scripts/bench_torch.py overhead --out /tmp/overhead.json

A convolution so small that the GPU waits for the host (default N=1, 8 -> 8 channels, 8x8, 1x1
filter) is called ``--calls`` times back to back, CUDA events around the batch: the time per
call is the host's per call. Variants, in one process with one planned kernel (planned before
timing, the same plan for all):

    pytorch     torch.nn.functional.conv2d (cuDNN through PyTorch, cudnn.benchmark on)
    direct      the CUDA implementation called as a Python function (no dispatcher): the floor
    custom_op   torch.ops.ucudnn.conv_fwd... registered with torch.library.custom_op
    library     the same registered with a torch.library.Library fragment (define/impl)

``--mode forward`` calls the forward under no_grad; ``--mode train`` runs forward and backward
through autograd (input and weight gradients: three operator calls). The variants are
interleaved: each of ``--reps`` repetitions times every variant once, in a rotated order, and
the result is each variant's median over the repetitions, in microseconds per call, with its
ratio to ``custom_op``. The cheaper of the two styles becomes DEFAULT_STYLE in ops.py.
GPU only.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys

try:
    import torch
except ImportError:
    print("bench_torch.py: needs PyTorch (pip install 'ucudnn[torch]')", file=sys.stderr)
    sys.exit(2)

import ucudnn.torch  # noqa: F401  (registers the operators of the chosen style)
from ucudnn.files import write_text
from ucudnn.torch import ops
from ucudnn.torch.convert import settings_from
from ucudnn.torch.runtime import config_id

VARIANTS = ("pytorch", "direct", "custom_op", "library")


def _callables(args):
    """{variant: (step, inputs)}: ``step()`` makes one call (forward or forward+backward)."""
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
    fns = {"pytorch": lambda: torch.nn.functional.conv2d(x, w, None, *geo[:4]),
           "direct": lambda: ops.IMPLS["conv_fwd"][0](x.detach(), w.detach(), *geo),
           "custom_op": lambda: ops.registered("custom_op").fwd(x, w, *geo),
           "library": lambda: ops.registered("library").fwd(x, w, *geo)}
    if not train:
        return fns
    direct = ops.IMPLS

    def direct_train():             # the three implementations, no autograd, no dispatcher
        y = direct["conv_fwd"][0](x.detach(), w.detach(), *geo)
        direct["conv_bwd_data"][0](w.detach(), y, list(x.shape), *geo)
        direct["conv_bwd_filter"][0](x.detach(), y, list(w.shape), *geo)

    def with_backward(f):
        def step():
            f().sum().backward()
        return step
    return {v: (direct_train if v == "direct" else with_backward(f)) for v, f in fns.items()}


def _time(step, calls: int) -> float:
    """Microseconds per call of ``calls`` calls back to back between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def overhead(args) -> dict:
    torch.backends.cudnn.benchmark = True
    steps = _callables(args)
    ctx = torch.no_grad() if args.mode == "forward" else torch.enable_grad()
    with ctx:
        for step in steps.values():             # plans, cudnn.benchmark, warm caches
            for _ in range(args.warmup):
                step()
        torch.cuda.synchronize()
        times = {v: [] for v in VARIANTS}
        for rep in range(args.reps):
            order = VARIANTS[rep % len(VARIANTS):] + VARIANTS[:rep % len(VARIANTS)]
            for v in order:
                times[v].append(_time(steps[v], args.calls))
    med = {v: statistics.median(t) for v, t in times.items()}
    return {
        "subcommand": "overhead", "argv": sys.argv[1:], "mode": args.mode,
        "shape": {"n": args.n, "c": args.c, "k": args.k, "hw": args.hw, "r": args.r,
                  "pad": args.pad, "dtype": args.dtype},
        "calls_per_timing": args.calls, "reps": args.reps,
        "median_us_per_call": med,
        "ratio_to_custom_op": {v: med[v] / med["custom_op"] for v in VARIANTS},
        "cheaper_style": min(ops.STYLES, key=lambda s: med[s]),
        "samples_us_per_call": times,
        "machine": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "cuda": torch.version.cuda, "torch_cudnn": torch.backends.cudnn.version(),
                    "python": platform.python_version()},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("overhead", help="per-call cost of each registration style")
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
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_torch.py: no CUDA device visible", file=sys.stderr)
        return 2
    doc = overhead(args)
    text = json.dumps(doc, indent=2) + "\n"
    if args.out:
        write_text(args.out, text)
    med = doc["median_us_per_call"]
    print(f"{doc['mode']}: " + ", ".join(f"{v} {med[v]:.1f} us" for v in VARIANTS)
          + f"; cheaper style: {doc['cheaper_style']} "
          f"(library/custom_op {doc['ratio_to_custom_op']['library']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
