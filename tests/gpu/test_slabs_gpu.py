"""Slab choices on a GPU (Note [Slabs below one sample] in ucudnn/plan/slabs.py, Note [Slab
plans] in cython/ucudnn/_graph.pyx): a plan whose micro-batches run an engine config over
pieces of the depth axis equals the convolution in float64, for each op, float32 and
bfloat16, NCDHW and NDHWC, with padding, stride and dilation along the split axis; and a
benchmark under a cap below the fastest configs offers slab choices within the cap, each of
which the core's check accepted, and the plan of one is right.
"""
import math

import pytest

from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import Chunk, Plan
from ucudnn.vocab import slab_choice, split_slabs

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="the GPU tests use PyTorch for buffers")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)
from ucudnn import _core  # noqa: E402  (a GPU host builds the core)
from gpu_kernels import conv3d_reference, run_kernel as _run  # noqa: E402
from ucudnn.measure.bench import _perfs  # noqa: E402

F = torch.nn.functional
TORCH_DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: as tests/gpu/test_core3d_gpu.py
TOLERANCE = {"float32": 5e-3, "bfloat16": 8 * 2.0 ** -8}
#: (C, (D, H, W), K, kernel, pad, stride, dilation)
SHAPES = {"3x3x3": (16, (13, 10, 12), 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
          "strided": (8, (17, 9, 10), 12, (3, 3, 1), (1, 1, 0), (2, 1, 1), (1, 1, 1)),
          "dilated": (8, (15, 8, 9), 8, (3, 3, 3), (2, 1, 1), (1, 1, 1), (2, 1, 1))}


def _layout(t, layout):
    return (t.contiguous(memory_format=torch.channels_last_3d) if layout == "NDHWC"
            else t.contiguous())


def _err(out, ref):
    return (out.double() - ref).abs().max().item() / max(1e-30, ref.abs().max().item())


def _case(op, name, layout, dtype, n, seed=3):
    """``(kernel, a, b, output like, float64 reference)`` of ``op`` on shape ``name``."""
    C, spatial, K, kernel, pad, stride, dil = SHAPES[name]
    shape = ConvShape.nd(C, K, spatial, kernel, pad, stride, dil, layout=layout)
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = TORCH_DTYPE[dtype]
    x = torch.randn(n, C, *spatial, device="cuda", generator=g).to(dt)
    w = (torch.randn(K, C, *kernel, device="cuda", generator=g)
         / math.sqrt(C * math.prod(kernel))).to(dt)
    conv = dict(stride=stride, padding=pad, dilation=dil)
    y_shape = F.conv3d(x[:1].double(), w.double(), **conv).shape[1:]
    dy = torch.randn(n, *y_shape, device="cuda", generator=g).to(dt)
    ref = conv3d_reference(op, x, w, dy, **conv)
    x, w, dy = (_layout(t, layout) for t in (x, w, dy))
    a, b, like = {"fwd": (x, w, dy), "bwd_data": (w, dy, x), "bwd_filter": (x, dy, w)}[op]
    kern = _core.Kernel(shape, op, n, dtype, "default", f"{name}/{op}")
    return kern, a, b, like, ref


def _run_plan(kern, plan, a, b, like, layout):
    kern.set_plan(plan)
    out = _layout(torch.full(like.shape, float("nan"), device="cuda", dtype=like.dtype), layout)
    _run(kern, a, b, out)
    return out


@pytest.mark.parametrize("name,layout,dtype", [("3x3x3", "NCDHW", "float32"),
                                               ("3x3x3", "NDHWC", "bfloat16"),
                                               ("3x3x3", "NCDHW", "bfloat16"),
                                               ("strided", "NCDHW", "float32"),
                                               ("dilated", "NDHWC", "float32")])
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_filter"])
def test_a_plan_of_slab_choices_equals_the_convolution(op, name, layout, dtype):
    """Two one-sample chunks, each an engine config over 2 and 3 pieces of its depth. Some
    engines compute slabs wrong (Note [Slab plans]), which the benchmark's check refuses;
    here every config the benchmark accepted whole is run in slabs, and at least one must be
    right."""
    n = 2
    kern, a, b, like, ref = _case(op, name, layout, dtype, n)
    kern.max_graph_configs = 8
    configs = [p.engine for p in _perfs(kern.benchmark([1], 1, None, None, 3, ("graph",))[1])]
    assert configs, f"{kern.name}: no graph config ({kern.last_graph_error})"
    tol, right = TOLERANCE[dtype], []
    for engine in configs:
        chunks = tuple(Chunk(1, -1, 0, 1.0, 0, slab_choice(engine, p)) for p in (2, 3))
        try:
            out = _run_plan(kern, Plan(n, chunks), a, b, like, layout)
        except Exception as e:          # a config whose pieces do not build: not a result
            assert "slab" in str(e) or "CUDNN" in str(e), e
            continue
        if _err(out, ref) <= tol:
            right.append(engine)
    assert right, f"{kern.name}: no engine config ran right in slabs of {configs}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_filter"])
def test_a_cap_below_one_sample_gets_checked_slab_choices(op, dtype):
    """nnU-Net's first level at 64^3 (32 -> 32 channels, 3x3x3): its fast configs need
    tens of MiB at one sample (256 MiB at 128^3 in bf16 on an H100), so under a 12 MiB cap
    the benchmark offers the fastest configs in slabs; every slab choice offered fits the
    cap and passed the check, and a plan of the fastest one is right."""
    shape = ConvShape.nd(32, 32, (64, 64, 64), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1),
                         layout="NCDHW")
    n, cap = 2, 12 << 20
    kern = _core.Kernel(shape, op, n, dtype, "default", f"nnunet64/{op}")
    kern.max_graph_configs = 8
    records = kern.benchmark([1], 1, cap, None, 5, ("graph",))[1]
    slabs = [p for p in _perfs(records) if split_slabs(p.engine)[1] > 1]
    assert slabs, f"{kern.name}: no slab choice within {cap >> 20} MiB: {records}"
    assert all(p.ws_bytes <= cap for p in slabs)
    best = slabs[0]
    g = torch.Generator(device="cuda").manual_seed(7)
    dt = TORCH_DTYPE[dtype]
    x = torch.randn(n, 32, 64, 64, 64, device="cuda", generator=g).to(dt)
    w = (torch.randn(32, 32, 3, 3, 3, device="cuda", generator=g) / math.sqrt(32 * 27)).to(dt)
    dy = torch.randn(n, 32, 64, 64, 64, device="cuda", generator=g).to(dt)
    ref = conv3d_reference(op, x, w, dy, padding=1)
    a, b, like = {"fwd": (x, w, dy), "bwd_data": (w, dy, x), "bwd_filter": (x, dy, w)}[op]
    plan = Plan(n, tuple(Chunk(1, best.algo, best.math, best.time_ms, best.ws_bytes,
                               best.engine) for _ in range(n)))
    out = _run_plan(kern, plan, a, b, like, "NCDHW")
    assert kern.workspace_size <= cap
    err = _err(out, ref)
    assert err <= TOLERANCE[dtype], f"{kern.name} {best.engine}: relative error {err:.3g}"
