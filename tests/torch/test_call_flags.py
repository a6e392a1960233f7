"""PyTorch's flags at call time, over the fake core. Deterministic (Note [Deterministic calls]
in ucudnn/torch/runtime.py): a call made while ``torch.backends.cudnn.deterministic`` or
``torch.use_deterministic_algorithms`` is on runs a kernel planned from deterministic choices
only, under a config of its own, and a kernel planned without the flag is never reused for it
(nor the other way round). TF32 (Note [TF32 calls]): an fp32 call while
``torch.backends.cudnn.allow_tf32`` is off runs a kernel planned with math "fma"; fp16 calls
do not change.
"""
import contextlib

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")
from torch import nn  # noqa: E402

import ucudnn.torch as ut  # noqa: E402
from ucudnn.measure.planner_state import planner_state  # noqa: E402
from ucudnn.plan.table import AlgoPerf  # noqa: E402
from ucudnn.torch import runtime  # noqa: E402
from ucudnn.torch.convert import settings_from  # noqa: E402
from torch_cases import no_tf32  # noqa: E402
from torch_fakes import fake_cuda  # noqa: E402,F401 (a fixture)


def racing(kern, b):
    """Algorithm 1 fast and non-deterministic, algorithm 0 slow and deterministic."""
    return [AlgoPerf(0, 1.0 * b, 0, deterministic=True),
            AlgoPerf(1, 0.25 * b, 1024 * b, deterministic=False)]


@contextlib.contextmanager
def cudnn_deterministic():
    before = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic = before


@contextlib.contextmanager
def deterministic_algorithms():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.fixture
def calls(fake_core, fake_cuda, monkeypatch):
    """``runtime.run`` over the fake core on CPU tensors: the core's ``Kernel.run`` records the
    kernel it was called on (the fake has none), no handle, the tensors' device current."""
    ran = []
    monkeypatch.setattr(fake_core.Kernel, "run", lambda self, *a: ran.append(self),
                        raising=False)
    monkeypatch.setattr(runtime, "_handle", lambda device: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    fake_core.model = racing
    return ran


def _fwd(config, dtype=torch.float32):
    x, w = torch.randn(8, 16, 12, 12, dtype=dtype), torch.randn(32, 16, 3, 3, dtype=dtype)
    y = torch.empty(8, 32, 12, 12, dtype=dtype)
    runtime.run("fwd", x, w, y, tuple(x.shape), tuple(w.shape), (1, 1), (1, 1), (1, 1), 1,
                "NCHW", config)


def _algos(kern):
    return {c.algo for c in kern.plan.chunks}


@pytest.mark.parametrize("flag", [cudnn_deterministic, deterministic_algorithms])
def test_the_flag_at_call_time_picks_a_deterministic_kernel(calls, fake_core, flag):
    config = runtime.config_id(settings_from(limit="64MiB", engines="legacy"))
    _fwd(config)
    free = calls[-1]
    assert _algos(free) == {1} and not planner_state(free).settings.deterministic
    measured = len(fake_core.calls)
    with flag():
        assert runtime.torch_deterministic()
        twin = runtime.call_config(config)
        assert twin != config and runtime.settings_of(twin) == \
            runtime.settings_of(config).replace(deterministic=True)
        _fwd(config)
        det = calls[-1]
        assert det is not free and _algos(det) == {0}
        assert planner_state(det).settings.deterministic
        assert len(fake_core.calls) == measured      # the cache's measurements, filtered
        _fwd(config)
        assert calls[-1] is det
    assert not runtime.torch_deterministic() and runtime.call_config(config) == config
    _fwd(config)
    assert calls[-1] is free                        # the plan made without the flag, kept
    keys = [k for k in runtime.planned_kernels() if k[0] == "fwd"]
    assert {k[-1] for k in keys} == {config, twin}


def test_settings_deterministic_need_no_flag(calls):
    config = runtime.config_id(settings_from(limit="64MiB", engines="legacy",
                                             deterministic=True))
    _fwd(config)
    assert _algos(calls[-1]) == {0}
    with cudnn_deterministic():
        assert runtime.call_config(config) == config
        _fwd(config)
    assert len({id(k) for k in calls}) == 1


def test_a_model_planned_together_runs_its_calls_alone_under_the_flag(fake_core, fake_cuda):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1))
    report = ut.convert(model, optimizer="ilp", example_inputs=torch.randn(4, 3, 8, 8),
                        engines="legacy")
    config = model[0].ucudnn_config
    with cudnn_deterministic():
        twin = runtime.call_config(config)
        assert runtime.model_plan_of(twin) is None
        assert runtime.settings_of(twin) == report.settings.replace(
            optimizer="dp", budget=None, deterministic=True)
    together = ut.convert(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1)), optimizer="ilp",
                          example_inputs=torch.randn(4, 3, 8, 8), deterministic=True)
    assert together.settings.deterministic and together.plan is not None


def test_plan_follows_the_flag(fake_core, fake_cuda):
    fake_core.model = racing
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1))
    x = torch.randn(4, 3, 8, 8)
    free = ut.plan(model, x, limit="64MiB", engines="legacy")
    with deterministic_algorithms():
        det = ut.plan(model, x, limit="64MiB", engines="legacy")
    assert free.doc["deterministic"] is False and det.doc["deterministic"] is True
    assert {ch["algo"] for k in det.doc["kernels"] for ch in k["chunks"]} == {0}
    assert {ch["algo"] for k in free.doc["kernels"] for ch in k["chunks"]} == {1}


def _maths(kern):
    return {c.math for c in kern.plan.chunks}


def test_fp32_calls_without_tf32_run_fma_kernels(calls, fake_core):
    config = runtime.config_id(settings_from(limit="64MiB", engines="legacy"))
    assert runtime.torch_tf32()                     # PyTorch's default
    _fwd(config)
    tf32 = calls[-1]
    assert _maths(tf32) == {0} and planner_state(tf32).settings.math == "default"
    with no_tf32():
        twin = runtime.call_config(config)
        assert runtime.settings_of(twin) == runtime.settings_of(config).replace(math="fma")
        _fwd(config)
        fma = calls[-1]
        assert fma is not tf32 and _maths(fma) == {3}           # CUDNN_FMA_MATH
        # fp16 keeps its config: PyTorch's flag is about fp32
        assert runtime.call_config(config, torch.float16) == config
        _fwd(config, torch.float16)
        assert _maths(calls[-1]) == {0}
        with cudnn_deterministic():                 # both flags: one twin with both
            both = runtime.call_config(config)
            assert runtime.settings_of(both) == runtime.settings_of(config).replace(
                math="fma", deterministic=True)
            _fwd(config)
            assert _maths(calls[-1]) == {3} and _algos(calls[-1]) == {0}
    assert runtime.call_config(config) == config
    _fwd(config)
    assert calls[-1] is tf32


def test_settings_fma_need_no_flag_and_a_model_planned_together_goes_alone(
        calls, fake_core, fake_cuda):
    config = runtime.config_id(settings_from(limit="64MiB", engines="legacy", math="fma"))
    with no_tf32():
        assert runtime.call_config(config) == config
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1))
    report = ut.convert(model, optimizer="ilp", example_inputs=torch.randn(4, 3, 8, 8),
                        engines="legacy")
    with no_tf32():
        twin = runtime.call_config(model[0].ucudnn_config)
        assert runtime.model_plan_of(twin) is None
        assert runtime.settings_of(twin) == report.settings.replace(
            optimizer="dp", budget=None, math="fma")
    fma = ut.convert(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1)), optimizer="ilp",
                     example_inputs=torch.randn(4, 3, 8, 8), engines="legacy", math="fma")
    with no_tf32():
        config = fma.model[0].ucudnn_config
        assert runtime.call_config(config) == config and runtime.model_plan_of(config)


def test_plan_follows_the_tf32_flag_for_fp32_layers(fake_core, fake_cuda):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1))
    x = torch.randn(4, 3, 8, 8)
    tf32 = ut.plan(model, x, limit="64MiB", engines="legacy")
    with no_tf32():
        fma = ut.plan(model, x, limit="64MiB", engines="legacy")
        given = ut.plan(model, x, limit="64MiB", engines="legacy", math="default")
    maths = [{ch["math"] for k in r.doc["kernels"] for ch in k["chunks"]}
             for r in (tf32, fma, given)]
    assert maths == [{0}, {3}, {0}]
