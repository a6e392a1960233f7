"""The native eager path of ucudnn.torch on a GPU (Note [Native calls] in
ucudnn/torch/eager.py): it loads where the core was built beside PyTorch; a converted model
gives the same bits through it as through the Python Functions and the operators, in fp32
under either fp32 precision and in bf16 under autocast, gradients included; a recorded
backward (create_graph) gives the operators' double backward; a call it does not take goes
to Python and raises Python's error; a kernel known to it runs inside a CUDA-graph capture.
"""
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)

import ucudnn.torch as ut  # noqa: E402
from torch_cases import (  # noqa: E402,F401 (ieee_fp32: an autouse fixture)
    conv_tf32, ieee_fp32, model2d as _model, train_step as _step)
from ucudnn.torch import eager, runtime  # noqa: E402
from ucudnn.torch.convert import settings_from  # noqa: E402
from ucudnn.vocab import InputError  # noqa: E402

#: the three ways an eager call of a converted module can go: (EAGER, NATIVE) environment
PATHS = {"operators": ("0", "1"), "functions": ("1", "0"), "native": ("1", "1")}


def _native():
    ok, why = eager.native_status()
    assert ok, f"the native eager path does not load ({why}): build the core with " \
               "`pip install --no-build-isolation .` beside torch"
    return eager._ext


def _node(fn) -> str:
    """An autograd node's name: its class's for a Python Function's node, the name it gives
    for a C++ one."""
    name = type(fn).__name__
    return fn.name() if name == "CppFunction" else name


def _by_path(model, x, monkeypatch, autocast=None):
    """One step of ``model`` through each path; the grad_fn of the first convolution's output
    names the path taken."""
    results, nodes = {}, {}
    for name, (eager_flag, native_flag) in PATHS.items():
        monkeypatch.setenv(eager.EAGER_ENV, eager_flag)
        monkeypatch.setenv(eager.NATIVE_ENV, native_flag)
        with autocast or torch.autocast("cuda", enabled=False):
            results[name] = _step(model, x)
            nodes[name] = _node(model[0](x).grad_fn.next_functions[0][0])
    return results, nodes


def _equal(results):
    want = results["operators"]
    for name, got in results.items():
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), f"{name}: tensor {i} differs from the operators'"


def test_native_loads():
    ext = _native()
    assert ext.known_calls() >= 0


@pytest.mark.parametrize("case", ["fp32 ieee", "fp32 tf32", "bf16 autocast"])
def test_native_calls_equal_the_other_paths_bit_for_bit(case, monkeypatch):
    ext = _native()
    torch.manual_seed(6)
    model = _model().cuda()
    ut.convert(model, limit="8MiB", engines="both")
    x = torch.randn(4, 3, 16, 16, device="cuda")
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if case.startswith("bf16") else None
    before = ext.known_calls()
    with conv_tf32(case == "fp32 tf32"):
        results, nodes = _by_path(model, x, monkeypatch, autocast)
        again, _ = _by_path(model, x, monkeypatch, autocast)   # every key now known to it
    assert "ConvFwd" in nodes["native"] and nodes["native"] != nodes["functions"], nodes
    assert nodes["functions"] == "_ConvFwdBackward", nodes
    assert ext.known_calls() > before           # the native path learnt its call keys
    _equal(results)
    _equal({"operators": results["operators"], "native again": again["native"]})


def test_recorded_backward_is_the_operators(monkeypatch):
    """create_graph: the native backward calls the differentiable operators, so a gradient of
    the input gradient equals the operators'."""
    _native()
    torch.manual_seed(7)
    model = _model().cuda()
    ut.convert(model, limit="8MiB", engines="legacy")
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    x0 = torch.randn(2, 3, 12, 12, device="cuda")
    got = {}
    for name, (eager_flag, native_flag) in PATHS.items():
        monkeypatch.setenv(eager.EAGER_ENV, eager_flag)
        monkeypatch.setenv(eager.NATIVE_ENV, native_flag)
        model.zero_grad(set_to_none=True)
        x = x0.clone().requires_grad_(True)
        y = model(x)
        (gx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
        (gx * torch.linspace(-1, 1, gx.numel(), device="cuda").view_as(gx)).sum().backward()
        got[name] = [gx.detach()] + [p.grad for p in model.parameters()]
    _equal(got)


def test_a_call_it_does_not_take_raises_pythons_error():
    _native()
    x = torch.randn(2, 3, 8, 8, device="cuda")
    w = torch.randn(4, 3, 3, 3, device="cuda", dtype=torch.float16)
    config = runtime.config_id(settings_from(limit="8MiB"))
    with pytest.raises(InputError, match="one dtype"):
        eager.conv_fwd(x, w, [1, 1], [1, 1], [1, 1], 1, config)
