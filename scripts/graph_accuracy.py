#!/usr/bin/env python3
"""Every choice of one kernel against a float64 reference: which are exact enough for strict
fp32 (Note [Winograd in both families] in ucudnn/plan/dp.py).

For every choice the core's benchmark finds at each micro-batch size (graph engine configs,
``--max-configs`` of them, 0: all the heuristics propose; with ``--families legacy graph``
cuDNN's algorithms too), the kernel runs its whole mini-batch as micro-batches of that size
with that choice, and the result is compared with PyTorch's float64 convolution of the same
inputs, relative to the largest reference value. ``--beta 1`` runs as Caffe's backward-filter
does (gradients added to what the output held). The configs the benchmark's own check refused
(Note [Graph results checked] in cython/ucudnn/_check.pyx) are listed after the others. ``--groups G`` runs as Caffe's grouped layers
do (Note [Grouped layers] in ucudnn/plan/conv.py): the blobs hold G times the shape's channels,
and the kernel runs once per group on a strided view into them; with ``--concurrent`` each
group runs on its own stream, cuDNN handle and workspace, at once, as Caffe's cuDNN layer
runs them. One line per size and choice: the relative
error, within ``--tolerance`` or not, and the engine's numerical notes.

Needs a GPU and PyTorch. The default kernel is AlexNet's conv2 (two groups)
at batch 128, backward-filter with FMA math, which the Caffe comparison found off with graph
engines:

    python3 -P scripts/graph_accuracy.py --shape 48,27,27,128,5,5,2,1 --groups 2 \\
        --op bwd_filter --batch 128 --math fma --max-configs 0
"""
import argparse
import math
import sys

from ucudnn.vocab import FAMILIES, MATH_MODES, OPS, note_names

#: C, H, W, K, R, S, pad, stride
SHAPE_FIELDS = ("C", "H", "W", "K", "R", "S", "pad", "stride")


def parse_shape(text):
    """``C,H,W,K,R,S,pad,stride`` as eight integers; ValueError naming the option."""
    parts = text.split(",")
    if len(parts) != len(SHAPE_FIELDS) or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--shape: expected {','.join(SHAPE_FIELDS)} (eight integers), "
                         f"got {text!r}")
    return tuple(int(p) for p in parts)


def sizes_dividing(n):
    """The powers of two that divide ``n``, and ``n``: plans of equal micro-batches."""
    out, b = [], 1
    while b < n:
        if n % b == 0:
            out.append(b)
        b *= 2
    return out + [n]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="48,27,27,128,5,5,2,1",
                    help="C,H,W,K,R,S,pad,stride (default: a group of AlexNet's conv2)")
    ap.add_argument("--op", default="bwd_filter", choices=OPS)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--math", default="fma", choices=sorted(MATH_MODES))
    ap.add_argument("--families", nargs="+", default=["graph"], choices=FAMILIES)
    ap.add_argument("--max-configs", type=int, default=0,
                    help="graph engine configs per size (0: every one the heuristics propose)")
    ap.add_argument("--groups", type=int, default=2,
                    help="Caffe groups: the kernel runs on strided views into blobs of this "
                         "many times its channels (default 2, AlexNet's conv2; 1: packed)")
    ap.add_argument("--concurrent", action="store_true",
                    help="run the groups at once, each on its own stream, handle and workspace")
    ap.add_argument("--beta", type=float, default=0.0, choices=(0.0, 1.0))
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args(argv)
    try:
        C, H, W, K, R, S, pad, stride = parse_shape(args.shape)
    except ValueError as e:
        ap.error(str(e))
    if args.groups < 1:
        ap.error(f"--groups: must be >= 1, got {args.groups}")
    G = args.groups
    try:
        import torch
    except ImportError:
        print("graph_accuracy: needs PyTorch (for the buffers and the reference)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("graph_accuracy: no CUDA device visible", file=sys.stderr)
        return 2
    from ucudnn import _core
    from ucudnn.measure.bench import _perfs
    from ucudnn.plan.conv import ConvShape
    from ucudnn.plan.dp import Chunk, Plan
    from ucudnn.plan.layers import LayerSpec
    from ucudnn.vocab import choice_name
    F = torch.nn.functional
    n = args.batch
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, G * C, H, W, device="cuda", generator=g)
    w = torch.randn(G * K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)
    conv = dict(stride=stride, padding=pad, groups=G)
    y64 = F.conv2d(x.double(), w.double(), **conv)
    dy = torch.randn(y64.shape, device="cuda", generator=g)
    with torch.enable_grad():
        if args.op == "fwd":
            ref = y64
        elif args.op == "bwd_data":
            xr = x.double().requires_grad_(True)
            (ref,) = torch.autograd.grad(F.conv2d(xr, w.double(), **conv), xr, dy.double())
        else:
            wr = w.double().requires_grad_(True)
            (ref,) = torch.autograd.grad(F.conv2d(x.double(), wr, **conv), wr, dy.double())
    a, b, like = {"fwd": (x, w, dy), "bwd_data": (w, dy, x), "bwd_filter": (x, dy, w)}[args.op]
    layer = LayerSpec("probe", n, G * C, H, W, G * K, R, S, (pad, pad), (stride, stride),
                      groups=G)
    shape = ConvShape.from_layer(layer)
    kern = _core.Kernel(shape, args.op, n, "float32", args.math, "probe")
    kern.max_graph_configs = args.max_configs
    # group g's view starts g groups of channels (or of filters) into each blob
    group_bytes = {id(x): C * H * W * 4, id(w): K * C * R * S * 4,
                   id(dy): K * shape.out_h * shape.out_w * 4}
    main_stream = torch.cuda.current_stream()
    handle = _core.Handle(main_stream.cuda_stream)
    streams = [torch.cuda.Stream() for _ in range(G)] if args.concurrent else [main_stream] * G
    handles = [_core.Handle(st.cuda_stream) for st in streams] if args.concurrent else [handle] * G
    sizes = sizes_dividing(n)
    raw = kern.benchmark(sizes, 1, None, None, 5, tuple(args.families))
    bench = {s: _perfs(r) for s, r in raw.items()}
    # the configs the benchmark's own check refused (Note [Graph results checked])
    refused = {s: [r for r in recs if r[1] == _core.STATUS_INACCURATE] for s, recs in raw.items()}
    scale = max(1e-30, ref.abs().max().item())
    init = torch.randn(like.shape, device="cuda", generator=g) if args.beta else None
    bad = 0
    print(f"{args.op} C={C} {H}x{W} K={K} {R}x{S} pad {pad} stride {stride}, groups {G}"
          f"{' at once' if args.concurrent else ''}, "
          f"batch {n}, math {args.math}, beta {args.beta:g}, tolerance {args.tolerance:g}")
    for s in sizes:
        for p in bench[s]:
            plan = Plan(n, tuple(Chunk(s, p.algo, p.math, p.time_ms, p.ws_bytes, p.engine)
                                 for _ in range(n // s)))
            try:
                kern.set_plan(plan)
            except Exception as e:      # noqa: BLE001 - one choice's failure is reported
                print(f"  {s:4d} x{n // s:<4d} {choice_name(args.op, p.algo, p.math, p.engine):28s}"
                      f" plan failed: {e}")
                continue
            wss = [torch.empty(max(1, kern.workspace_size), dtype=torch.uint8, device="cuda")
                   for _ in range(G if args.concurrent else 1)]
            out = init.clone() if init is not None else torch.full_like(like, float("nan"))
            for grp in range(G):
                streams[grp].wait_stream(main_stream)
                kern.run(handles[grp], a.data_ptr() + grp * group_bytes[id(a)],
                         b.data_ptr() + grp * group_bytes[id(b)],
                         out.data_ptr() + grp * group_bytes[id(like)],
                         wss[grp % len(wss)].data_ptr(), kern.workspace_size, 1.0, args.beta)
            torch.cuda.synchronize()
            got = out.double() - (init.double() if init is not None else 0.0)
            err = (got - ref).abs().max().item() / scale
            ok = err <= args.tolerance
            bad += not ok
            notes = ",".join(note_names(kern.engine_notes(p.engine))) if p.engine else ""
            print(f"  {s:4d} x{n // s:<4d} {choice_name(args.op, p.algo, p.math, p.engine):28s}"
                  f" error {err:9.3g} {'ok ' if ok else 'OFF'} {p.time_ms:8.3f} ms  {notes}")
    for s in sizes:
        for r in refused[s]:
            print(f"  {s:4d} x{n // s:<4d} {r[5]:28s} refused by the benchmark's check "
                  f"{r[2]:8.3f} ms")
    print(f"{bad} choice(s) off by more than {args.tolerance:g}; the benchmark's check "
          f"refused {sum(map(len, refused.values()))} ({kern.graph_stats})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
