"""Plans per input shape over the fake core (ucudnn/torch/runtime.py): the first call of a shape
benchmarks it through the cache, later calls and layers of the same shape reuse the kernel, a
new process plans from the cache without benchmarking, and a shape new inside a CUDA-graph
capture is refused. The CUDA device is the fake core's: ``torch.cuda.device`` and the capture
query, which need a driver, are stood in for."""

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")

from ucudnn.measure.planner_state import planner_state  # noqa: E402
from ucudnn.torch import runtime  # noqa: E402
from ucudnn.torch.convert import settings_from  # noqa: E402
from ucudnn.vocab import InputError  # noqa: E402
from torch_fakes import fake_cuda  # noqa: E402,F401 (a fixture)

DEVICE = torch.device("cuda", 0)


def _kernel(config, n=8, op="fwd", groups=2):
    x, w = (n, 16, 12, 12), (32, 16 // groups, 3, 3)
    geo = ((1, 1), (1, 1), (1, 1), groups, "NCHW", torch.float32, DEVICE, config)
    key = (op, x, w) + geo[:5] + (torch.float32, 0, config)
    return runtime.kernel_for(key, op, x, w, *geo)


def test_one_kernel_per_shape_planned_from_the_cache(fake_core, fake_cuda, monkeypatch):
    config = runtime.config_id(settings_from(limit="64MiB", policy="powerOfTwo"))
    first = _kernel(config)
    measured = len(fake_core.calls)
    assert measured > 0 and first.plan is not None
    assert (first.shape.c, first.shape.k, first.shape.groups, first.n) == (16, 32, 2, 8)
    assert planner_state(first).settings.limit == 64 << 20 and first.dtype == "float32"
    assert _kernel(config) is first and len(fake_core.calls) == measured
    # another process: no kernel yet, the cache kept
    monkeypatch.setattr(runtime, "_kernels", {})
    again = _kernel(config)
    assert again is not first and len(fake_core.calls) == measured
    assert again.plan == first.plan
    # another batch size is another kernel, planned from the sizes the cache holds
    half = _kernel(config, n=4)
    assert half.n == 4 and half is not again and len(fake_core.calls) == measured
    # other settings are other kernels of the same shape
    other = _kernel(runtime.config_id(settings_from(limit="1MiB", policy="powerOfTwo")))
    assert other is not first and planner_state(other).settings.limit == 1 << 20


def test_the_process_opens_each_cache_once(fake_core, fake_cuda, monkeypatch, tmp_path):
    """Note [Plans per input shape]: kernels planned one after another share one open cache."""
    from ucudnn.measure import cache as cache_db
    opened = []
    real = cache_db.BenchCache

    def counting(path=None, *a, **kw):
        opened.append(str(path))
        return real(path, *a, **kw)
    monkeypatch.setattr(cache_db, "BenchCache", counting)
    monkeypatch.setenv("UCUDNN_CACHE", str(tmp_path / "one.sqlite"))
    config = runtime.config_id(settings_from(limit="64MiB"))
    kernels = [_kernel(config, n=n, op=op) for n in (8, 4) for op in ("fwd", "bwd_data")]
    assert len(set(map(id, kernels))) == 4 and all(k.plan is not None for k in kernels)
    assert opened == [str(tmp_path / "one.sqlite")]
    monkeypatch.setenv("UCUDNN_CACHE", str(tmp_path / "two.sqlite"))   # another default
    _kernel(config, n=2)
    assert opened == [str(tmp_path / "one.sqlite"), str(tmp_path / "two.sqlite")]
    assert (tmp_path / "two.sqlite").stat().st_size > 0


def test_a_new_shape_inside_a_capture_is_refused(fake_core, fake_cuda):
    config = runtime.config_id(settings_from(limit="8MiB"))
    planned = _kernel(config, op="bwd_filter")
    fake_cuda["now"] = True
    measured = len(fake_core.calls)
    assert _kernel(config, op="bwd_filter") is planned
    with pytest.raises(runtime.CaptureError, match="x4x16x12x12 .*run the model with this "
                       "shape once before capturing"):
        _kernel(config, n=4, op="bwd_filter")
    assert len(fake_core.calls) == measured


def test_a_shape_the_core_cannot_take_names_it(fake_core, fake_cuda):
    config = runtime.config_id(settings_from())
    with pytest.raises(InputError, match="'groups'"):
        _kernel(config, groups=3)           # 16 channels in 3 groups
    with pytest.raises(InputError, match="names no ucudnn.torch settings"):
        runtime.settings_of(10 ** 6)
