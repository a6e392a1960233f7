"""Benchmarks spread over the GPUs of $UCUDNN_BENCH_DEVICES inside runtime.plan_net (Note
[Benchmarks over several GPUs in one process] in ucudnn/measure/for_plan.py), on a fake core of
two GPUs. The Caffe side (Net::Init calling ucudnn_net_plan) runs in
tests/gpu/test_caffe_gpu.py::test_bench_devices_inside_caffe."""
import threading

import pytest

from ucudnn.caffe import records as rr
from ucudnn.caffe.prototxt import conv_layers, parse_net_text, ucudnn_settings
from ucudnn.measure import records as rw
from ucudnn.measure import runtime
from ucudnn.measure.for_plan import DEVICES_ENV, Job, measure_on_devices, parse_devices
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.settings import PlanSettings
from ucudnn.vocab import InputError

ENV = DEVICES_ENV

# a net as Caffe hands it over: the layers and each one's ucudnn_param over the net's
NET = """
name: "small"
input: "data" input_shape { dim: 16 dim: 3 dim: 16 dim: 16 }
ucudnn_param { policy: POWER_OF_TWO workspace_limit: 8388608 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 group: 2 }
        ucudnn_param { policy: ALL math: FMA exclude_winograd: true } }
layer { name: "conv3" type: "Convolution" bottom: "conv2" top: "conv3"
        convolution_param { num_output: 4 kernel_size: 1 } }
"""
# a fourth layer of conv3's shape and settings: the same kernel for the cache
TWIN = NET + """
layer { name: "conv3b" type: "Convolution" bottom: "conv2" top: "conv3b"
        convolution_param { num_output: 4 kernel_size: 1 } }
"""


def _net(text=NET):
    net = parse_net_text(text, "small.prototxt")
    layers = conv_layers(net)
    _, per_layer = ucudnn_settings(net)
    return layers, per_layer


@pytest.fixture
def two_gpus(fake_core, tmp_path, monkeypatch):
    fake_core.gpus = ["Fake GPU", "Fake GPU"]
    monkeypatch.setenv(rw.ENV, str(tmp_path / "records.jsonl"))
    return fake_core


def _measured(core):
    """(shape, op, settings-relevant identity, family) of each benchmark call."""
    return [(c.shape, c.op, c.n, c.sizes, c.math, c.families) for c in core.calls]


def test_each_kernel_is_measured_once_over_both_gpus_into_one_cache(two_gpus, tmp_path,
                                                                   monkeypatch):
    layers, settings = _net(TWIN)
    monkeypatch.setenv(ENV, "0,1")
    live = runtime.plan_net(layers, settings, name="small")
    calls = list(two_gpus.calls)
    # 11 kernels, 8 distinct: conv3b is conv3 for the cache; each measured once per family
    # (engines BOTH, the default: each family its own cache entry)
    assert len(live.kernels) == 11
    assert len(calls) == 16 and len(set(_measured(two_gpus))) == 16
    assert {c.families for c in calls} == {("legacy",), ("graph",)}
    # both GPUs measured: each benchmark ran with its thread's device current, offered the
    # net's 8 MiB limit (Note [Workspace a plan may use])
    assert {c.device for c in calls} == {0, 1}
    assert {c.workspace_cap for c in calls} == {8 << 20}
    assert not any(t.name.startswith("ucudnn-bench") for t in threading.enumerate())
    # the net's own planning (on its GPU) found everything in the one cache
    recs = rr.read_records(tmp_path / "records.jsonl")
    bench = [r for r in recs if r["kind"] == "bench"]
    spread, own = bench[:8], bench[8:]
    assert {r["device"] for r in spread} == {0, 1} and all(r["sizes_benchmarked"] for r in spread)
    assert len(own) == 11 and all(r["sizes_benchmarked"] == 0 for r in own)
    assert {r["device"] for r in own} == {0}
    # the plans are those of the same net planned on one GPU
    monkeypatch.delenv(ENV)
    two_gpus.calls.clear()
    alone = runtime.plan_net(layers, settings)
    assert not two_gpus.calls                                     # the cache has it all
    assert [k.plan for k in alone.plan.kernels] == [k.plan for k in live.plan.kernels]
    # each layer measured with its own settings: conv2's FMA math and policy all
    conv2 = [c for c in calls if c.name == "conv2"]
    assert {c.math for c in conv2} == {"fma"} and {c.sizes for c in conv2} == {
        tuple(range(1, 17))}


def test_no_devices_no_spread(two_gpus, monkeypatch):
    layers, settings = _net()
    for value in (None, " "):
        if value is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, value)
        two_gpus.calls.clear()
        runtime.plan_net(layers, {n: s.replace(cache_path=None) for n, s in settings.items()})
        assert {c.device for c in two_gpus.calls} <= {0}


@pytest.mark.parametrize("value,message", [
    ("0,0", "expected distinct GPU indices such as 0,1, got '0,0'"),
    ("a", "expected distinct GPU indices"), ("-1", "expected distinct GPU indices"),
    ("0,5", r"no GPU 5 \(2 visible\)")])
def test_bad_devices_are_named(two_gpus, monkeypatch, value, message):
    layers, settings = _net()
    monkeypatch.setenv(ENV, value)
    with pytest.raises(InputError, match=rf"^\$UCUDNN_BENCH_DEVICES: {message}"):
        runtime.plan_net(layers, settings)
    assert two_gpus.calls == []


def test_gpus_of_different_models_are_refused(two_gpus, monkeypatch):
    two_gpus.gpus = ["Fake GPU", "Other GPU"]
    layers, settings = _net()
    monkeypatch.setenv(ENV, "0,1")
    with pytest.raises(InputError, match=r"^\$UCUDNN_BENCH_DEVICES: the GPUs differ \(0: Fake "
                                         r"GPU, 1: Other GPU\)"):
        runtime.plan_net(layers, settings)
    assert two_gpus.calls == []


def test_a_failure_on_one_gpu_is_raised_naming_it(two_gpus, monkeypatch):
    def broken(kern, b):
        if two_gpus.current_device() == 1:
            raise InputError("bad on this device")
        return [(0, 1.0 * b, 0)]
    two_gpus.model = broken
    layers, settings = _net()
    jobs = [Job(l, op, settings[l.name]) for l in layers for op in l.ops]
    with pytest.raises(InputError, match=r"^here: GPU 1: bad on this device"):
        measure_on_devices(jobs, [0, 1], where="here")
    assert not any(t.name.startswith("ucudnn-bench") for t in threading.enumerate())


def test_jobs_and_their_identity():
    layers, settings = _net(TWIN)
    jobs = {(j.layer.name, j.op): j for j in (Job(l, op, settings[l.name])
                                              for l in layers for op in l.ops)}
    # conv1 reads a net input: no backward-data (Note [Backward-data of the first convolution])
    assert sorted(jobs) == sorted([("conv1", "fwd"), ("conv1", "bwd_filter"),
                                   ("conv2", "fwd"), ("conv2", "bwd_data"),
                                   ("conv2", "bwd_filter"), ("conv3", "fwd"),
                                   ("conv3", "bwd_data"), ("conv3", "bwd_filter"),
                                   ("conv3b", "fwd"), ("conv3b", "bwd_data"),
                                   ("conv3b", "bwd_filter")])
    assert jobs["conv3", "fwd"].identity() == jobs["conv3b", "fwd"].identity()
    assert jobs["conv1", "fwd"].identity() != jobs["conv2", "fwd"].identity()
    c2 = jobs["conv2", "fwd"]
    assert c2.identity()[0] == ConvShape.from_layer(c2.layer) and c2.settings.math == "fma"
    assert c2.settings == PlanSettings(policy="all", math="fma", exclude_winograd=True)
    # the costlier kernel first: more work per sample and more sizes
    assert c2.cost() > jobs["conv3", "fwd"].cost()


def test_parse_devices():
    assert parse_devices("1, 0", "x") == [1, 0]
    with pytest.raises(InputError, match="^x: "):
        parse_devices("", "x")
