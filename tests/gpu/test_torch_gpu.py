"""ucudnn.torch on a GPU: the operators pass ``torch.library.opcheck``; converted models equal
PyTorch's own convolutions, gradients included, undivided and micro-batched, in fp32, fp16 and
bf16, and 3-D ones (Conv3d, ConvTranspose3d) in fp32 and bf16, NCDHW and channels_last_3d;
``torch.compile(fullgraph=True)`` and CUDA-graph capture run them; a shape new inside a
capture raises the clear error; a second process plans from the cache without benchmarking.
fp32 is compared with TF32 off on both sides (Note [TF32 calls] in ucudnn/torch/runtime.py),
and with TF32 allowed each side against an fp64 step.

Benchmarks go to the session's own cache (tests/conftest.py); the kernels measure the legacy
family unless a test says otherwise, to keep the tier short.
"""
import copy
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)
from torch import nn  # noqa: E402

import ucudnn.torch as ut  # noqa: E402
from torch_cases import (  # noqa: E402,F401 (ieee_fp32: an autouse fixture)
    TOLERANCE, conv_tf32, ieee_fp32, model2d as _model, plans_text, rel_err as _err,
    train_step as _step)
from ucudnn.measure.planner_state import planner_state  # noqa: E402
from ucudnn.plan.dp import Chunk, Plan  # noqa: E402
from ucudnn.torch import eager, ops, runtime  # noqa: E402
from ucudnn.torch.convert import settings_from  # noqa: E402


def _close(got, want, dtype, what):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (what, i)
        err = _err(g, w)
        assert err <= TOLERANCE[dtype], \
            f"{what}: tensor {i}: relative error {err:.3g}; the plans:\n{plans_text()}"


def _split_every_plan(keys):
    """Give every kernel of ``keys`` a plan of two micro-batches (each half the fastest legacy
    algorithm measured at that size)."""
    for key in keys:
        kern = runtime.planned_kernels()[key]
        half = kern.n // 2
        chunks = []
        for b in (half, kern.n - half):
            p = min((p for p in planner_state(kern).bench[b] if not p.engine),
                    key=lambda p: p.time_ms)
            chunks.append(Chunk(b, p.algo, p.math, p.time_ms, p.ws_bytes))
        kern.set_plan(Plan(kern.n, tuple(chunks)))
        assert len(kern.plan.chunks) == 2


def _planned_then_split(ref, x, dtype):
    """A copy of ``ref`` converted at 1 MiB (legacy family): one step equals PyTorch's as
    planned, and again with every kernel it planned split in two micro-batches. The
    conversion report and the call keys of those kernels."""
    model = copy.deepcopy(ref)
    report = ut.convert(model, limit="1MiB", engines="legacy")
    want = _step(ref, x)
    before = set(runtime.planned_kernels())
    _close(_step(model, x), want, dtype, "planned")
    new = set(runtime.planned_kernels()) - before
    assert {k[0] for k in new} == {"fwd", "bwd_data", "bwd_filter"}
    _split_every_plan(new)
    _close(_step(model, x), want, dtype, "micro-batched")
    return report, new


@pytest.mark.parametrize("dtype,channels_last", [(torch.float32, False), (torch.float32, True),
                                                 (torch.float16, False),
                                                 (torch.bfloat16, False)])
def test_converted_model_equals_pytorch(dtype, channels_last):
    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    ref = _model().to("cuda", dtype).to(memory_format=fmt)
    x = torch.randn(8, 3, 20, 20, device="cuda", dtype=dtype).to(memory_format=fmt)
    report, new = _planned_then_split(ref, x, dtype)
    assert len(report.converted) == 5 and not report.kept
    if channels_last:
        assert any(k[7] == "NHWC" for k in new)


def _model3d():
    return nn.Sequential(
        nn.Conv3d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv3d(8, 8, 3, stride=(1, 2, 2), dilation=(2, 1, 1), padding=(2, 1, 1), groups=2),
        nn.ReLU(),
        nn.ConvTranspose3d(8, 4, (1, 2, 2), stride=(1, 2, 2), bias=False))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_converted_3d_model_equals_pytorch(dtype, channels_last):
    torch.manual_seed(6)
    fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
    ref = _model3d().to("cuda", dtype).to(memory_format=fmt)
    x = torch.randn(4, 3, 4, 8, 8, device="cuda", dtype=dtype).to(memory_format=fmt)
    report, new = _planned_then_split(ref, x, dtype)
    assert [k for _, k in report.converted] == ["Conv3d", "Conv3d", "ConvTranspose3d"]
    assert all(len(k[1]) == 5 for k in new)             # the core's 3-D kernels
    # channels_last_3d runs NDHWC (the core's NHWC); the grouped convolution, and so what
    # follows it, runs NCDHW (kernels an NCDHW case may have planned already)
    layouts = {k[7] for k in new}
    assert layouts >= {"NHWC"} if channels_last else layouts == {"NCHW"}


class _CausalConv3d(nn.Conv3d):
    """Wan's pattern: pad time causally, then PyTorch's forward (Note [Subclasses with their
    own forward] in ucudnn/torch/modules.py)."""

    def __init__(self, cin, cout):
        super().__init__(cin, cout, 3, padding=(0, 1, 1))

    def forward(self, x):
        return super().forward(torch.cat([x[:, :, :1]] * 2 + [x], dim=2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_conv3d_subclass_converted_in_place_equals_pytorch(dtype):
    torch.manual_seed(8)
    ref = nn.Sequential(_CausalConv3d(3, 8), nn.ReLU(), _CausalConv3d(8, 4)).to("cuda", dtype)
    x = torch.randn(4, 3, 5, 8, 8, device="cuda", dtype=dtype)
    report, new = _planned_then_split(ref, x, dtype)
    assert [k for _, k in report.converted] == ["_CausalConv3d", "_CausalConv3d"]
    assert {k[1][2] for k in new if k[0] == "fwd"} == {7}     # the padded depth, 5 + 2


def test_tf32_as_close_to_fp64_as_pytorchs():
    """TF32 allowed (PyTorch's default): calls run the module's own config, whose choices
    may run TF32 as PyTorch's may; each side is compared with an fp64 step, since TF32 moves
    a cancelling gradient by percents on both. Not allowed: the fma twin, within 1e-5."""
    torch.manual_seed(0)
    ref = _model().cuda()
    model = copy.deepcopy(ref)
    ut.convert(model, limit="1MiB", engines="legacy")
    config = model[0].ucudnn_config
    x = torch.randn(8, 3, 20, 20, device="cuda")
    truth = _step(copy.deepcopy(ref).double(), x.double())
    with conv_tf32(True):
        got, want = _step(model, x), _step(ref, x)
    for i, (g, w, t) in enumerate(zip(got, want, truth)):
        assert _err(g, t) <= max(2e-2, 3 * _err(w, t)), (i, _err(g, t), _err(w, t))
    assert runtime.call_config(config) != config                   # TF32 off here
    got = _step(model, x)
    for i, (g, t) in enumerate(zip(got, truth)):
        assert _err(g, t) <= 1e-5, (i, _err(g, t))
    kernels = runtime.planned_kernels()
    mine = [kernels[k] for k in kernels if k[-1] == config]
    fma = [kernels[k] for k in kernels if k[-1] == runtime.call_config(config)]
    assert mine and fma
    assert {c.math for k in fma for c in k.plan.chunks} == {3}     # CUDNN_FMA_MATH


def test_graph_engines_and_output_size():
    torch.manual_seed(1)
    ref = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1).cuda()
    model = copy.deepcopy(ref)
    ut.convert(model, limit="64MiB", policy="all")          # both families
    x = torch.randn(6, 8, 9, 9, device="cuda")
    for size in (None, [18, 18]):
        got = model(x, output_size=size)
        want = ref(x, output_size=size)
        assert got.shape == want.shape and _err(got, want) <= TOLERANCE[torch.float32]


@pytest.mark.parametrize("style", ops.STYLES)
def test_opcheck(style):
    o = ops.registered(style)
    config = runtime.config_id(settings_from(limit="4MiB", engines="legacy"))
    geo = ([2, 1], [1, 0], [1, 2], 2, config)
    x = torch.randn(4, 6, 10, 9, device="cuda", requires_grad=True)
    w = torch.randn(8, 3, 3, 3, device="cuda", requires_grad=True)
    y = o.fwd(x, w, *geo)
    dy = torch.randn_like(y, requires_grad=True)
    torch.library.opcheck(o.fwd, (x, w) + geo)
    torch.library.opcheck(o.bwd_data, (w, dy, list(x.shape)) + geo)
    torch.library.opcheck(o.bwd_filter, (x.detach(), dy.detach(), list(w.shape)) + geo)


# Inductor imports torch.jit code that warns of its own deprecation
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_calls_equal_the_operators_bit_for_bit(dtype, monkeypatch):
    """Note [Eager calls]: the same kernels through either path, deterministic ones (PyTorch's
    flag), give the same bits; bf16 under autocast over fp32 parameters. Each path is checked
    to be the one taken."""
    torch.manual_seed(6)
    model = _model().cuda()
    ut.convert(model, limit="8MiB", engines="both")
    x = torch.randn(4, 3, 16, 16, device="cuda")
    autocast = torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32)
    results, paths = {}, {}
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setenv(eager.NATIVE_ENV, "0")   # the Python Functions (native: its own test)
    for flag in ("0", "1", "0"):
        monkeypatch.setenv(eager.EAGER_ENV, flag)
        with autocast:
            results.setdefault(flag, []).append(_step(model, x))
            y = model[0](x)
        paths[flag] = type(y.grad_fn.next_functions[0][0]).__name__
    assert paths["1"] == "_ConvFwdBackward" and paths["0"] != paths["1"]
    operators, again = results["0"]
    for name, got in (("eager", results["1"][0]), ("operators again", again)):
        for i, (g, w) in enumerate(zip(got, operators)):
            assert torch.equal(g, w), f"{name}: tensor {i} differs"


@pytest.mark.filterwarnings("ignore:.torch.jit.script_method. is deprecated:DeprecationWarning")
def test_compile_fullgraph():
    torch.manual_seed(2)
    model = _model().cuda()
    ut.convert(model, limit="8MiB", engines="legacy")
    x = torch.randn(4, 3, 16, 16, device="cuda")
    want = _step(model, x)
    compiled = torch.compile(model, fullgraph=True)
    _close(_step(compiled, x), want, torch.float32, "compiled")


def test_cuda_graph_capture_and_a_new_shape_inside_it():
    torch.manual_seed(3)
    model = _model().cuda().eval()
    ut.convert(model, limit="8MiB", engines="legacy")
    static = torch.randn(4, 3, 16, 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():          # warm-up: plans the shape
        for _ in range(2):
            model(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = model(static)
    before = None
    for seed in (4, 5):
        torch.manual_seed(seed)
        static.copy_(torch.randn_like(static))
        graph.replay()
        with torch.no_grad():
            want = model(static)
        torch.cuda.synchronize()
        # the same plan, but not always the same bits: a ConvTranspose's forward runs
        # backward-data, whose legacy algorithm 0 accumulates with atomics
        _close([out], [want], torch.float32, f"replayed (seed {seed})")
        assert before is None or not torch.equal(out, before)   # the replay wrote new values
        before = out.clone()
    with pytest.raises(ut.CaptureError, match="inside a CUDA-graph capture"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()), torch.no_grad():
            fresh = static[:2, :, :12, :12] * 2             # the capture holds some work
            model(fresh)


def test_a_second_process_plans_from_the_cache(tmp_path):
    script = textwrap.dedent("""
        import sys, torch, ucudnn.torch as ut
        from torch import nn
        torch.manual_seed(0)
        m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3)).cuda()
        ut.convert(m, limit="2MiB", engines="legacy")
        x = torch.randn(8, 3, 14, 14, device="cuda", requires_grad=True)
        m(x).sum().backward()
        torch.cuda.synchronize()
    """)
    records = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    for path in records:
        env = dict(os.environ, UCUDNN_RECORDS=str(path))
        # -P: the installed package, not a source tree in the working directory
        subprocess.run([sys.executable, "-P", "-c", script], env=env, check=True, timeout=120)
    first, second = ([r for r in map(json.loads, p.read_text().splitlines())
                      if r["kind"] == "bench"] for p in records)
    assert len(first) == len(second) == 6               # 2 layers x 3 ops
    assert sum(r["sizes_benchmarked"] for r in first) > 0
    assert [r["sizes_benchmarked"] for r in second] == [0] * 6
