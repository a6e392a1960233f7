"""Measuring through the core (ucudnn.measure.bench) on the fake core: device facts per
thread, the cache key of the current device, what a benchmark records (Note [Offered
workspace]), the cache serving what it holds."""
import threading

import pytest

from ucudnn.measure import bench
from ucudnn.measure.cache import BenchCache
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.table import AlgoPerf

SHAPE = ConvShape(16, 8, 8, 16, 3, 3, 1, 1)
MiB, GiB = 1 << 20, 1 << 30


def test_device_facts_of_the_current_device(fake_core):
    fake_core.gpus = ["GPU zero", "GPU one"]
    info = bench.device_info()
    assert (info["gpu"], info["device"], info["cudnn_version"]) == ("GPU zero", 0, 91400)
    assert "driver" in info
    seen = {}

    def other():
        bench.set_device(1)
        seen["info"] = bench.device_info()
        seen["key"] = bench.cache_key(SHAPE, "fwd")
    t = threading.Thread(target=other)
    t.start()
    t.join()
    # the device is per thread, and so are the facts and the key
    assert seen["info"]["gpu"] == "GPU one" and seen["key"].gpu == "GPU one"
    assert bench.device_info()["gpu"] == "GPU zero" and bench.cache_key(SHAPE, "fwd").gpu == \
        "GPU zero"
    with pytest.raises(fake_core.CoreError, match="invalid device ordinal"):
        bench.set_device(2)


def test_no_device_is_no_gpu(fake_core):
    fake_core.gpus = []
    with pytest.raises(bench.NoGpuError, match="no CUDA device is visible"):
        bench.device_info()


def test_benchmark_records_the_workspace_offered_and_the_timing(fake_core):
    fake_core.memory_free = 4 * GiB + (512 << 20)
    m = bench.benchmark_kernel(SHAPE, "fwd", 8, [8, 2], math="fma", dtype="float16")
    assert sorted(m) == [2, 8] and m.timing == "events5"
    assert m.workspace_cap == 4 * GiB                    # the 8 GiB cap within free memory
    (call,) = fake_core.calls
    assert (call.sizes, call.repeats, call.workspace_cap, call.math, call.dtype) == (
        (2, 8), 1, 8 * GiB, "fma", "float16")
    # the algorithms of each size, fastest first; the math each ran with
    assert m[8] == [AlgoPerf(1, 0.2 * 8 + 0.05, 8 * MiB, 3), AlgoPerf(0, 8.0, 0, 3)]


def test_an_algorithm_needing_more_than_offered_is_not_measured(fake_core):
    m = bench.benchmark_kernel(SHAPE, "fwd", 8, [4, 8], workspace_cap=5 * MiB)
    assert m.workspace_cap == 5 * MiB
    assert [p.algo for p in m[4]] == [1, 0] and [p.algo for p in m[8]] == [0]


def test_measure_goes_through_the_cache(fake_core, tmp_path):
    kern = fake_core.Kernel(SHAPE, "bwd_data", 8, name="c")
    path = tmp_path / "c.sqlite"
    first = bench.measure(kern, [1, 2, 8], cache_path=path)
    assert len(fake_core.calls) == 1
    again = bench.measure(kern, [2, 4, 8], cache_path=path)
    assert [c.sizes for c in fake_core.calls] == [(1, 2, 8), (4,)]     # only what it lacked
    assert again[2] == first[2] and again[8] == first[8]
    with BenchCache(path) as c:
        (key,) = c.keys()
        assert sorted(c.batches(key)) == [1, 2, 4, 8]
    assert key == bench.cache_key(SHAPE, "bwd_data") and key.gpu == "Fake GPU"
