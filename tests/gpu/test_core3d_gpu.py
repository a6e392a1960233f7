"""3-D convolutions on a GPU (Note [N-D geometry] in ucudnn/plan/conv.py): micro-batched
results equal undivided ones, and both equal PyTorch's ``conv3d`` in float64, for each op,
both families, NCDHW and NDHWC, float32 and bfloat16; and a transposed convolution run as
backward-data of its shape equals ``conv_transpose3d`` (Note [Transposed convolutions]).

As tests/gpu/test_engines_gpu.py does for 2-D: each case benchmarks one family at sizes 2..8
of a mini-batch of 8, then runs the undivided plan (the fastest choice at 8) and a forced
split 4 + 2 + 2 whose chunks take the second-fastest choice where one exists. Small shapes
keep the file well under a minute.
"""
import math

import pytest

from ucudnn.plan.conv import TRANSPOSED_OPS, ConvShape, transposed
from ucudnn.plan.dp import Chunk, Plan
from ucudnn.vocab import GRAPH_ALGO

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="the GPU tests use PyTorch for buffers")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)
from ucudnn import _core  # noqa: E402  (a GPU host builds the core)
from gpu_kernels import conv3d_reference, run_kernel as _run  # noqa: E402
from ucudnn.measure.bench import _perfs  # noqa: E402

F = torch.nn.functional
N = 8
SIZES = [2, 4, 8]
SPLIT = [4, 2, 2]
#: (C, (D, H, W), K, kernel, pad, stride, dilation)
SHAPES = {"3x3x3": (16, (6, 12, 12), 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
          "per_axis": (8, (5, 14, 11), 12, (3, 1, 3), (2, 0, 1), (1, 2, 2), (2, 1, 1))}
CASES = [("3x3x3", layout, dtype) for layout in ("NCDHW", "NDHWC")
         for dtype in ("float32", "bfloat16")] + [("per_axis", "NCDHW", "float32"),
                                                  ("per_axis", "NDHWC", "bfloat16")]
TORCH_DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: relative to max |reference|, as tests/gpu/test_engines_gpu.py: TF32 products for float32
#: under the default math, 8 units in the last place for bfloat16
TOLERANCE = {"float32": 5e-3, "bfloat16": 8 * 2.0 ** -8}




def _layout(t, layout):
    return (t.contiguous(memory_format=torch.channels_last_3d) if layout == "NDHWC"
            else t.contiguous())


def _err(out, ref):
    return (out.double() - ref).abs().max().item() / max(1e-30, ref.abs().max().item())


def _plans(kern, family):
    kern.max_graph_configs = 8          # a pruned search keeps the tier short
    bench = {b: _perfs(r) for b, r in
             kern.benchmark(SIZES, 1, None, None, 5, (family,)).items()}
    for b, perfs in bench.items():
        assert perfs, f"{kern.name}: no {family} choice ran at micro-batch {b} " \
                      f"({kern.last_graph_error})"
        assert all((p.engine != "") == (family == "graph") for p in perfs)
        assert all(p.algo == GRAPH_ALGO for p in perfs if p.engine)
    best = bench[N][0]
    undivided = Plan(N, (Chunk(N, best.algo, best.math, best.time_ms, best.ws_bytes,
                               best.engine),))
    chunks = []
    for i, b in enumerate(SPLIT):
        p = bench[b][min(1, len(bench[b]) - 1) if i % 2 else 0]
        chunks.append(Chunk(b, p.algo, p.math, p.time_ms, p.ws_bytes, p.engine))
    return undivided, Plan(N, tuple(chunks))


def _check(kern, family, a, b, like, ref, layout, dtype):
    """Run the undivided and the split plan of ``family`` into outputs first filled with NaN:
    each within the dtype's tolerance of ``ref``, the split within twice that of undivided."""
    tol = TOLERANCE[dtype]
    results = []
    for plan in _plans(kern, family):
        kern.set_plan(plan)
        out = _layout(torch.full(like.shape, float("nan"), device="cuda", dtype=like.dtype),
                      layout)
        _run(kern, a, b, out)
        err = _err(out, ref)
        assert err <= tol, f"{kern.name} {family} {layout} {dtype} plan {plan.describe()}: " \
                           f"relative error {err:.3g} > {tol:.3g}"
        results.append(out)
    undivided, split = results
    assert _err(split, undivided.double()) <= 2 * tol


@pytest.mark.parametrize("name,layout,dtype", CASES)
@pytest.mark.parametrize("family", ["legacy", "graph"])
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_filter"])
def test_3d_micro_batched_equals_undivided_and_conv3d(op, family, name, layout, dtype):
    C, spatial, K, kernel, pad, stride, dil = SHAPES[name]
    shape = ConvShape.nd(C, K, spatial, kernel, pad, stride, dil, layout=layout)
    assert shape.ndim == 3
    g = torch.Generator(device="cuda").manual_seed(3)
    dt = TORCH_DTYPE[dtype]
    x = torch.randn(N, C, *spatial, device="cuda", generator=g).to(dt)
    w = (torch.randn(K, C, *kernel, device="cuda", generator=g)
         / math.sqrt(C * math.prod(kernel))).to(dt)
    conv = dict(stride=stride, padding=pad, dilation=dil)
    y64 = F.conv3d(x.double(), w.double(), **conv)
    assert tuple(y64.shape[2:]) == shape.out_spatial
    dy = torch.randn(y64.shape, device="cuda", generator=g).to(dt)
    ref = conv3d_reference(op, x, w, dy, **conv)
    x, w, dy = (_layout(t, layout) for t in (x, w, dy))
    a, b, like = {"fwd": (x, w, dy), "bwd_data": (w, dy, x), "bwd_filter": (x, dy, w)}[op]
    kern = _core.Kernel(shape, op, N, dtype, "default", f"{name}/{op}")
    _check(kern, family, a, b, like, ref, layout, dtype)


@pytest.mark.parametrize("family", ["legacy", "graph"])
def test_transposed_3d_convolution_is_backward_data_of_its_shape(family):
    """ConvTranspose3d from 12 to 8 channels, stride 2 with output padding 1: the forward is
    backward-data of :func:`transposed`'s shape with the transposed input as dy and the
    weights (C_in x C_out x kernel, PyTorch's layout) as its filter."""
    c_in, c_out, spatial, kernel = 12, 8, (3, 5, 4), (3, 3, 3)
    shape = transposed(c_in, c_out, spatial, kernel, pad=1, stride=2, output_padding=1)
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(N, c_in, *spatial, device="cuda", generator=g)
    w = torch.randn(c_in, c_out, *kernel, device="cuda", generator=g) / math.sqrt(c_in * 27)
    ref = F.conv_transpose3d(x.double(), w.double(), stride=2, padding=1, output_padding=1)
    assert tuple(ref.shape[2:]) == shape.spatial
    kern = _core.Kernel(shape, TRANSPOSED_OPS["fwd"], N, "float32", "default", "deconv")
    out = torch.empty(ref.shape, device="cuda")
    _check(kern, family, w, x, out, ref, "NCDHW", "float32")


@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_filter"])
def test_a_cap_below_the_fastest_configs_still_gets_graph_configs(op):
    """Note [Graph choices within the cap] (cython/ucudnn/_graph.pyx): nnU-Net's first level
    (32 -> 32 channels, 3x3x3, 128^3, batch 2, bf16) on an H100: the first eight configs the
    heuristics proposed all needed 256-770 MiB, so a 256 MiB benchmark of the pruned search
    had no graph config. Walking on, it finds configs within the cap."""
    shape = ConvShape.nd(32, 32, (128, 128, 128), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1),
                         layout="NCDHW")
    kern = _core.Kernel(shape, op, 2, "bfloat16", "default", f"nnunet-level1/{op}")
    kern.max_graph_configs = 8
    perfs = _perfs(kern.benchmark([2], 1, 256 << 20, None, 5, ("graph",))[2])
    assert perfs, f"{kern.name}: no graph config ran within 256 MiB ({kern.last_graph_error})"
    assert all(p.engine and p.ws_bytes <= 256 << 20 for p in perfs)
