"""Both families of choices on a GPU, in both layouts and in every dtype: micro-batched results
equal undivided ones, and both equal a float64 reference from PyTorch.

Each case benchmarks one family at sizes 4..32 of a mini-batch of 32, then runs the undivided
plan (the fastest choice at 32) and a forced split 16 + 8 + 4 + 4 whose chunks take the
second-fastest choice where one exists, so that different choices meet in one result. The
reference is PyTorch's convolution in float64 of the same (rounded) inputs; the tolerance is
the dtype's (TF32 for float32 with the default math), relative to the largest reference value.
"""
import math

import pytest

from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import Chunk, Plan
from ucudnn.vocab import GRAPH_ALGO, InputError, parse_engine

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="the GPU tests use PyTorch for buffers")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)
from ucudnn import _core  # noqa: E402  (a GPU host builds the core)
from gpu_kernels import handle as _handle, run_kernel as _run  # noqa: E402
from ucudnn.measure.bench import _perfs  # noqa: E402

F = torch.nn.functional
N = 32
SIZES = [4, 8, 16, 32]
SPLIT = [16, 8, 4, 4]
#: (C, H, W, K, R, S, pad, stride)
SHAPES = {"3x3": (64, 28, 28, 64, 3, 3, 1, 1), "1x1s2": (64, 28, 28, 128, 1, 1, 0, 2)}
TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: relative to max |reference|: TF32 products for float32; 8 units in the last place of the
#: largest value for float16 and bfloat16 (float accumulation; the legacy bfloat16
#: backward-filter algorithm 0 was measured 1.7e-2 off undivided, 4.4 bfloat16 ulps)
TOLERANCE = {"float32": 5e-3, "float16": 8 * 2.0 ** -11, "bfloat16": 8 * 2.0 ** -8}




def _layout(t, layout):
    return t.contiguous(memory_format=torch.channels_last) if layout == "NHWC" else t.contiguous()


def _case(name, layout, dtype, seed=0):
    C, H, W, K, R, S, pad, stride = SHAPES[name]
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = TORCH_DTYPE[dtype]
    x = torch.randn(N, C, H, W, device="cuda", generator=g).to(dt)
    w = (torch.randn(K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)).to(dt)
    y64 = F.conv2d(x.double(), w.double(), stride=stride, padding=pad)
    dy = torch.randn(y64.shape, device="cuda", generator=g).to(dt)
    shape = ConvShape(C, H, W, K, R, S, pad, pad, stride, stride, layout=layout)
    return shape, _layout(x, layout), _layout(w, layout), _layout(dy, layout), y64, pad, stride


def _plans(kern, family):
    kern.max_graph_configs = 8          # a pruned search keeps the tier short
    bench = {b: _perfs(r) for b, r in
             kern.benchmark(SIZES, 1, None, None, 5, (family,)).items()}
    for b, perfs in bench.items():
        assert perfs, f"{kern.name}: no {family} choice ran at micro-batch {b} " \
                      f"({kern.last_graph_error})"
        for p in perfs:
            assert (p.engine != "") == (family == "graph")
            if p.engine:
                assert p.algo == GRAPH_ALGO
                parse_engine(p.engine)
    best = bench[N][0]
    undivided = Plan(N, (Chunk(N, best.algo, best.math, best.time_ms, best.ws_bytes, best.engine),))
    chunks = []
    for i, b in enumerate(SPLIT):
        p = bench[b][min(1, len(bench[b]) - 1) if i % 2 else 0]
        chunks.append(Chunk(b, p.algo, p.math, p.time_ms, p.ws_bytes, p.engine))
    return undivided, Plan(N, tuple(chunks))


def _err(out, ref):
    return (out.double() - ref).abs().max().item() / max(1e-30, ref.abs().max().item())


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("family", ["legacy", "graph"])
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_filter"])
def test_micro_batched_equals_undivided_and_reference(op, family, layout, dtype, name):
    shape, x, w, dy, y64, pad, stride = _case(name, layout, dtype)
    kern = _core.Kernel(shape, op, N, dtype, "default", f"{name}/{op}")
    with torch.enable_grad():
        if op == "fwd":
            ref = y64
        elif op == "bwd_data":
            xr = x.double().requires_grad_(True)
            (ref,) = torch.autograd.grad(F.conv2d(xr, w.double(), stride=stride, padding=pad),
                                         xr, dy.double())
        else:
            wr = w.double().requires_grad_(True)
            (ref,) = torch.autograd.grad(F.conv2d(x.double(), wr, stride=stride, padding=pad),
                                         wr, dy.double())
    a, b, like = {"fwd": (x, w, dy), "bwd_data": (w, dy, x), "bwd_filter": (x, dy, w)}[op]
    tol = TOLERANCE[dtype]
    results = {}
    for plan in _plans(kern, family):
        kern.set_plan(plan)
        out = _layout(torch.full(like.shape, float("nan"), device="cuda", dtype=like.dtype),
                      layout)
        _run(kern, a, b, out)
        results[plan.describe()] = out
        err = _err(out, ref)
        assert err <= tol, f"{kern.name} {family} {layout} {dtype} plan {plan.describe()}: " \
                           f"relative error {err:.3g} > {tol:.3g}"
    undivided, split = results.values()
    assert _err(split, undivided.double()) <= 2 * tol


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_graph_backward_filter_accumulates_with_beta_one(layout):
    """Backward-filter with the caller's beta 1 adds every chunk's gradient to what dw held
    (Note [Graph plans and beta] in cython/ucudnn/graph.h)."""
    shape, x, w, dy, y64, pad, stride = _case("3x3", layout, "float32", seed=3)
    kern = _core.Kernel(shape, "bwd_filter", N, "float32", "default", "acc")
    _, split = _plans(kern, "graph")
    kern.set_plan(split)
    init = _layout(torch.randn(w.shape, device="cuda"), layout)
    out = init.clone()
    _run(kern, x, dy, out, beta=1.0)
    zero = _layout(torch.zeros(w.shape, device="cuda"), layout)
    _run(kern, x, dy, zero, beta=0.0)
    assert _err(out - init, zero.double()) <= 1e-5


def test_graph_choice_refuses_another_alpha():
    shape, x, w, dy, *_ = _case("3x3", "NHWC", "float32")
    kern = _core.Kernel(shape, "fwd", N, "float32", "default", "alpha")
    undivided, _ = _plans(kern, "graph")
    kern.set_plan(undivided)
    ws = torch.empty(max(1, kern.workspace_size), dtype=torch.uint8, device="cuda")
    y = torch.empty_like(dy)
    with pytest.raises(InputError, match="alpha 1 and beta 0 or 1"):
        kern.run(_handle(), x.data_ptr(), w.data_ptr(), y.data_ptr(), ws.data_ptr(),
                 kern.workspace_size, 2.0, 0.0)


def test_both_families_in_one_benchmark():
    shape, *_ = _case("3x3", "NHWC", "float16")
    kern = _core.Kernel(shape, "fwd", N, "float16", "default", "both")
    recs = kern.benchmark([32], 1, None, None, 5, ("legacy", "graph"))[32]
    ok = [r for r in recs if r[1] == 0]
    assert any(r[5] == "" for r in ok) and any(r[5] for r in ok), recs
    assert kern.graph_stats["built"] > 0


def test_graph_plans_of_a_grouped_5x5_backward_filter_are_exact_under_fma():
    """Note [Graph results checked]: AlexNet conv2's backward-filter (two groups, each a
    strided view into the whole blobs, as Caffe runs it) under FMA math. cuDNN 9.14 proposes
    an engine config there, without a numerical note, that is the fastest at every size and
    1e-3 to 1.6e-2 off; the benchmark's check must refuse it, so that every plan the DP makes
    is within strict float32's 1e-4 of float64, undivided, micro-batched, and with beta 1."""
    from ucudnn.plan.dp import plan_kernel
    from ucudnn.plan.layers import LayerSpec
    from ucudnn.vocab import UNLIMITED
    n, G, C, K = 64, 2, 48, 128
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(n, G * C, 27, 27, device="cuda", generator=g)
    w = torch.randn(G * K, C, 5, 5, device="cuda", generator=g) / math.sqrt(C * 25)
    dy = torch.randn(n, G * K, 27, 27, device="cuda", generator=g)
    with torch.enable_grad():
        wr = w.double().requires_grad_(True)
        (ref,) = torch.autograd.grad(F.conv2d(x.double(), wr, padding=2, groups=G), wr,
                                     dy.double())
    shape = ConvShape.from_layer(LayerSpec("conv2", n, G * C, 27, 27, G * K, 5, 5, 2, groups=G))
    kern = _core.Kernel(shape, "bwd_filter", n, "float32", "fma", "conv2/bwd_filter")
    data = {b: _perfs(r) for b, r in
            kern.benchmark([8, 16, 32, 64], 1, None, None, 5, ("graph",)).items()}
    assert kern.graph_stats["checked"] > 0 and kern.graph_stats["unchecked"] == 0
    steps = (C * 27 * 27 * 4, K * C * 25 * 4, K * 27 * 27 * 4)    # one group, in bytes
    for policy in ("undivided", "powerOfTwo"):
        plan = plan_kernel(data, n, policy, UNLIMITED, strict=False, name=kern.name)
        kern.set_plan(plan)
        init = torch.randn(w.shape, device="cuda", generator=g)
        out = init.clone()
        ws = torch.empty(max(1, kern.workspace_size), dtype=torch.uint8, device="cuda")
        for grp in range(G):
            kern.run(_handle(), x.data_ptr() + grp * steps[0], dy.data_ptr() + grp * steps[2],
                     out.data_ptr() + grp * steps[1], ws.data_ptr(), kern.workspace_size,
                     1.0, 1.0)
        torch.cuda.synchronize()
        err = _err(out.double() - init.double(), ref)
        assert err <= 1e-4, f"{policy} plan {plan.describe()}: relative error {err:.3g}"


def test_engines_refused_before_are_refused_and_their_sizes_measured_again():
    """Note [Refused engines]: a kernel given the refusal of an engine (as the cache gives
    another process's) marks its configs refused at every size and never accepts them;
    ``measure_kernel`` returns no config of a refused engine, and measures again the sizes
    whose front a refusal later in a call had hidden (``last_unchecked_sizes``)."""
    from ucudnn.measure.bench import holds_refused, measure_kernel
    shape, *_ = _case("3x3", "NCHW", "float32")
    kern = _core.Kernel(shape, "fwd", N, "float32", "fma", "probe")
    first = kern.benchmark([8, 16], 1, None, None, 5, ("graph",))
    fastest = min((r for r in first[16] if r[1] == 0), key=lambda r: r[2])
    engine = parse_engine(fastest[5])[0]
    again = _core.Kernel(shape, "fwd", N, "float32", "fma", "probe")
    again.refuse_engines({engine: "refused elsewhere"})
    assert again.refused_engines == {engine: "refused elsewhere"}
    assert kern.refused_engines.get(engine) is None
    raw = again.benchmark([8, 16], 1, None, None, 5, ("graph",))
    mine = [r for recs in raw.values() for r in recs if parse_engine(r[5])[0] == engine]
    assert mine and all(r[1] == _core.STATUS_INACCURATE for r in mine), mine
    assert any(r[1] == 0 for recs in raw.values() for r in recs)
    got = measure_kernel(again, [4, 8, 16, 32], engines="graph")
    assert got and not any(holds_refused(p, again.refused_engines) for p in got.values())
    assert again.last_unchecked_sizes == []
