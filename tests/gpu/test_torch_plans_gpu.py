"""ucudnn.torch on a GPU, beyond per-kernel plans: a converted model under ``torch.autocast``
equals PyTorch's under the same autocast (dtypes, values, float32 gradients); models converted
with ``optimizer="ilp"`` and ``"shared"`` equal PyTorch's, gradients included, the ILP within
its budget and the shared kernels in slices of one arena; a batch size outside the example
forward runs through dp; the process holds one libcudnn, the one PyTorch reports; bad input
raises one clear error. fp32 is compared with TF32 off on both sides, the whole-model plans
converted with ``math="fma"`` (Note [TF32 calls] in ucudnn/torch/runtime.py).

Benchmarks go to the session's own cache (tests/conftest.py); the kernels measure the legacy
family to keep the tier short.
"""
import copy

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)
from torch import nn  # noqa: E402

import ucudnn.torch as ut  # noqa: E402
from torch_cases import (  # noqa: E402,F401 (ieee_fp32: an autouse fixture)
    TOLERANCE, ieee_fp32, model2d as _model, plans_text, rel_err as _err)
from ucudnn.measure import bench  # noqa: E402
from ucudnn.torch import runtime  # noqa: E402
from ucudnn.torch.libcudnn import mapped_cudnn  # noqa: E402
from ucudnn.vocab import InputError  # noqa: E402


def _step(model, x, autocast=None):
    model.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    with torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
        y = model(x)
    (y.float() * torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)).sum().backward()
    return [y.detach(), x.grad] + [p.grad for p in model.parameters()]


def _close(got, want, dtype, what):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (what, i, g.dtype, w.dtype)
        err = _err(g, w)
        assert err <= TOLERANCE[dtype], \
            f"{what}: tensor {i}: relative error {err:.3g}; the plans:\n{plans_text()}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_equals_pytorchs(dtype):
    torch.manual_seed(7)
    ref = _model().cuda()
    model = copy.deepcopy(ref)
    ut.convert(model, limit="4MiB", engines="legacy")
    x = torch.randn(8, 3, 20, 20, device="cuda")
    want = _step(ref, x, autocast=dtype)
    assert want[0].dtype == dtype and want[2].dtype == torch.float32
    before = set(runtime.planned_kernels())
    _close(_step(model, x, autocast=dtype), want, dtype, f"autocast {dtype}")
    new = set(runtime.planned_kernels()) - before
    assert {k[8] for k in new} == {dtype}            # the core ran in the autocast dtype


@pytest.mark.parametrize("optimizer", ["ilp", "shared"])
def test_whole_model_plans_equal_pytorch(optimizer):
    torch.manual_seed(8)
    ref = _model().cuda()
    model = copy.deepcopy(ref)
    x = torch.randn(8, 3, 20, 20, device="cuda")
    # the example as the step calls the model: its input needs a gradient, so the first
    # layer's backward-data is planned too
    report = ut.convert(model, optimizer=optimizer, limit="1MiB", engines="legacy",
                        math="fma", example_inputs=x.detach().requires_grad_(True))
    plan = report.plan
    assert len(plan.layers) == 5
    want = _step(ref, x)
    _close(_step(model, x), want, torch.float32, optimizer)
    live = plan.planned(x.device)
    assert live is not None and live.plan.optimizer == optimizer
    calls = sum(len(l.spec.ops) for l in plan.layers)
    assert live.plan.budget == report.settings.budget_for(calls)
    config = model[0].ucudnn_config
    keys = [k for k in runtime.planned_kernels() if k[-1] == config]
    assert len(keys) == calls                         # every call of the step from the plan
    if optimizer == "ilp":
        assert live.arena is None and live.plan.ws_bytes <= live.plan.budget
        assert not any(k in runtime._slots for k in keys)
    else:       # fma choices of these sizes may need no workspace, and then no arena
        arena_bytes = live.arena.numel() if live.arena is not None else 0
        assert arena_bytes == live.plan.arena_bytes <= live.plan.budget
        for k in keys:
            kern = runtime.planned_kernels()[k]
            if kern.workspace_size:
                _, slot = runtime._slots[k]
                assert slot.offset + kern.workspace_size <= live.arena.numel()
    # a second step takes no new kernel and no new arena
    arena = live.arena
    _close(_step(model, x), want, torch.float32, f"{optimizer}, second step")
    assert plan.planned(x.device).arena is arena
    # another batch size: planned alone with dp, still PyTorch's result
    small = x[:3]
    _close(_step(model, small), _step(ref, small), torch.float32, f"{optimizer}, batch 3")


def test_one_libcudnn_the_one_pytorch_reports():
    files = mapped_cudnn()
    assert len(files) == 1, files
    assert bench.core().cudnn_version() == torch.backends.cudnn.version()


def test_bad_input_raises_one_clear_error():
    model = nn.Sequential(nn.Conv2d(3, 4, 3)).cuda()
    ut.convert(model, limit="1MiB", engines="legacy")
    with pytest.raises(InputError, match="tensors of torch.float16 and torch.float32"):
        model(torch.randn(2, 3, 8, 8, device="cuda", dtype=torch.float16))
    cpu = copy.deepcopy(model).cpu()
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(cpu(x), nn.functional.conv2d(x, cpu[0].weight, cpu[0].bias))
