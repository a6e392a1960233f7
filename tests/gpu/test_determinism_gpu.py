"""Deterministic planning on the GPU (Note [Deterministic plans] in ucudnn/plan/dp.py, Note
[Deterministic calls] in ucudnn/torch/runtime.py): a small convolution planned with settings
``deterministic`` runs bitwise equal twice, micro-batched, and every choice of its plan is one
cuDNN calls deterministic: a legacy algorithm's cudnnFind record at that micro-batch size says
CUDNN_DETERMINISTIC, a graph engine lacks the NONDETERMINISTIC numerical note."""
import pytest

from ucudnn.plan.conv import ConvShape
from ucudnn.plan.settings import PlanSettings
from ucudnn.vocab import NUMERICAL_NOTES

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="the GPU tests use PyTorch for buffers")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)
from ucudnn import _core  # noqa: E402  (a GPU host builds the core)
from ucudnn.measure import runtime  # noqa: E402
from gpu_kernels import run_kernel  # noqa: E402

NONDETERMINISTIC = 1 << NUMERICAL_NOTES.index("NONDETERMINISTIC")
# 48 samples: powerOfTwo offers 1, 2, ..., 32 and 48, so a plan may divide (32 + 16)
N = 48
SHAPE = ConvShape(32, 28, 28, 64, 3, 3, 1, 1, 1, 1)


def _tensors(op):
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(N, 32, 28, 28, device="cuda", generator=g)
    w = torch.randn(64, 32, 3, 3, device="cuda", generator=g) / 17.0
    dy = torch.randn(N, 64, 28, 28, device="cuda", generator=g)
    return {"fwd": (x, w, torch.empty_like(dy)), "bwd_data": (w, dy, torch.empty_like(x)),
            "bwd_filter": (x, dy, torch.empty_like(w))}[op]


def _cudnn_says(op, plan):
    """``{chunk: True/False}``: whether cuDNN calls each chunk's choice deterministic, asked
    anew by a kernel of its own (cudnnFind at the chunk's size; an engine's notes); and
    whether cuDNN called any legacy algorithm at those sizes non-deterministic."""
    probe = _core.Kernel(SHAPE, op, N, "float32", "default", f"probe {op}")
    sizes = sorted({c.batch for c in plan.chunks})
    found = {}
    for b, records in probe.benchmark(sizes, 1, 64 << 20, None, 5, ("legacy",)).items():
        for r in records:
            found[b, r[0], r[4]] = r[6]
    said = {}
    for c in plan.chunks:
        if c.engine:
            said[c] = not probe.engine_notes(c.engine) & NONDETERMINISTIC
        else:
            said[c] = found.get((c.batch, c.algo, c.math))
    return said, any(v is False for v in found.values())


@pytest.mark.parametrize("engines", ["legacy", "both"])
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_filter"])
def test_a_deterministic_plan_runs_bitwise_equal_on_deterministic_choices(op, engines,
                                                                         tmp_path):
    settings = PlanSettings(deterministic=True, policy="powerOfTwo", limit=64 << 20,
                            engines=engines, cache_path=str(tmp_path / "bench.sqlite"))
    kern = _core.Kernel(SHAPE, op, N, "float32", "default", f"det {op}")
    runtime.prepare_kernel(kern, settings)
    said, some_not = _cudnn_says(op, kern.plan)
    assert all(v is True for v in said.values()), \
        f"{kern.plan.describe(op)}: cuDNN calls {[c for c, v in said.items() if v is not True]} " \
        "not deterministic"
    if op == "bwd_filter":
        # cuDNN's backward-filter ALGO_0 and ALGO_3 sum with atomics: the flag had work to do
        assert some_not, "cudnnFind called every backward-filter algorithm deterministic"
    a, b, out = _tensors(op)
    first, second = out.clone(), out.clone()
    run_kernel(kern, a, b, first)
    run_kernel(kern, a, b, second)
    assert torch.equal(first, second), f"{op} plan {kern.plan.describe(op)}"
    # another kernel of the same settings, planned from the cache: the same plan, the same bits
    again = _core.Kernel(SHAPE, op, N, "float32", "default", f"det {op} again")
    runtime.prepare_kernel(again, settings)
    assert again.plan == kern.plan
    third = out.clone()
    run_kernel(again, a, b, third)
    assert torch.equal(first, third)


def test_a_converted_model_under_torch_deterministic_runs_bitwise_equal(tmp_path):
    """``torch.backends.cudnn.deterministic`` at call time: forward and both gradients of a
    converted module, twice, bitwise equal; the kernels its calls ran are the deterministic
    twin's, each chunk one cuDNN calls deterministic."""
    import ucudnn.torch as ut
    from ucudnn.torch import runtime as torch_runtime
    conv = torch.nn.Conv2d(32, 64, 3, padding=1).cuda()
    model = torch.nn.Sequential(conv)
    ut.convert(model, limit="64MiB", engines="both", cache=tmp_path / "bench.sqlite")
    config = model[0].ucudnn_config
    x = torch.randn(N, 32, 28, 28, device="cuda", requires_grad=True)

    def step():
        x.grad = None
        model.zero_grad(set_to_none=True)
        y = model(x)
        y.square().sum().backward()
        return y.detach().clone(), x.grad.clone(), model[0].weight.grad.clone()

    before = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True
    try:
        twin = torch_runtime.call_config(config)
        first, second = step(), step()
    finally:
        torch.backends.cudnn.deterministic = before
    assert twin != config
    for a, b, what in zip(first, second, ("y", "dx", "dw")):
        assert torch.equal(a, b), what
    ran = {k: kern for k, kern in torch_runtime.planned_kernels().items() if k[-1] == twin}
    assert {k[0] for k in ran} == {"fwd", "bwd_data", "bwd_filter"}
    for key, kern in ran.items():
        said, _ = _cudnn_says(key[0], kern.plan)
        assert all(v is True for v in said.values()), (key[0], kern.plan.describe(key[0]))
