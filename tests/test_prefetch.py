"""Benchmarks of a Caffe net spread over several GPUs in one process before its layers plan
(ucudnn.caffe.prefetch, ucudnn.measure.spread; Note [Benchmarks over several GPUs in one
process]), on the fake two-GPU core of tests/conftest.py. The Caffe side (Net::Init calling
ucudnn_prefetch_net) runs in tests/test_caffe_gpu.py::test_bench_devices_inside_caffe."""
import threading
from pathlib import Path

import pytest

from ucudnn.caffe.prefetch import ENV, net_jobs, prefetch_net
from ucudnn.caffe.prototxt import parse_net_text
from ucudnn.measure import runtime
from ucudnn.measure.sources import core_kernel
from ucudnn.measure.spread import parse_devices
from ucudnn.vocab import InputError

REPO = Path(__file__).resolve().parents[1]

# what Caffe's Net::Init hands over: the layers still to set up, the blobs they read as net
# inputs with Caffe's shapes
NET = """
name: "small"
state { phase: TRAIN }
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


def _net(text=NET):
    return parse_net_text(text, "test")


def test_jobs_are_what_the_layers_will_plan():
    jobs = {(j.layer.name, j.op): j for j in net_jobs(_net(), "TRAIN")}
    # conv1 reads a net input: no backward-data (Note [Backward-data of the first convolution])
    assert sorted(jobs) == [("conv1", "bwd_filter"), ("conv1", "fwd"), ("conv2", "bwd_data"),
                            ("conv2", "bwd_filter"), ("conv2", "fwd"), ("conv3", "bwd_data"),
                            ("conv3", "bwd_filter"), ("conv3", "fwd")]
    c1, c2 = jobs["conv1", "fwd"], jobs["conv2", "fwd"]
    assert c1.layer.n == 16 and c1.dtype == "float32" and c1.math == "default"
    assert c1.options == {"policy": "powerOfTwo", "optimizer": "dp", "limit": 8 << 20,
                          "sizes": None, "repeats": 1, "cache_path": None,
                          "exclude_winograd": False}
    # a layer's own fields win over the net's (as Net::Init merges them)
    assert c2.math == "fma" and c2.layer.groups == 2
    assert c2.options["policy"] == "all" and c2.options["limit"] == 8 << 20
    assert c2.options["exclude_winograd"] is True


def test_layers_without_ucudnn_param_are_left_out():
    text = NET.replace('ucudnn_param { policy: POWER_OF_TWO workspace_limit: 8388608 }', "")
    assert {j.layer.name for j in net_jobs(_net(text), "TRAIN")} == {"conv2"}


def test_prefetch_leaves_the_layers_nothing_to_measure(fake_gpu, monkeypatch):
    monkeypatch.setenv(ENV, "0,1")
    summary = prefetch_net(NET)
    assert summary["kernels"] == 8
    # both GPUs measured: each benchmark call ran with its thread's device current
    assert set(fake_gpu.call_devices) == {0, 1}
    per = summary["devices"]
    assert summary["distinct"] == 8
    assert per[0]["kernels"] + per[1]["kernels"] == 8 and per[0]["kernels"] > 0
    assert per[0]["gpu"] == per[1]["gpu"] == "Fake GPU"
    assert not any(t.name.startswith("ucudnn-bench") for t in threading.enumerate())
    calls = len(fake_gpu.calls)
    # what Caffe's layers then do, on the net's GPU: everything comes from the cache
    for job in net_jobs(_net(), "TRAIN"):
        kern = core_kernel(job.layer, job.op, job.dtype, job.math)
        runtime.prepare_kernel(kern, **job.options)
        assert kern.plan is not None
    assert len(fake_gpu.calls) == calls


def test_identical_kernels_are_measured_once(fake_gpu, monkeypatch):
    """Layers of one shape and settings are one kernel for the cache: measured once, not by
    two threads at once."""
    twin = NET + """
layer { name: "conv3b" type: "Convolution" bottom: "conv2" top: "conv3b"
        convolution_param { num_output: 4 kernel_size: 1 } }
"""
    monkeypatch.setenv(ENV, "0,1")
    summary = prefetch_net(twin)
    assert summary["kernels"] == 11 and summary["distinct"] == 8
    assert len(fake_gpu.calls) == 8


def test_prefetch_does_nothing_without_devices(fake_gpu, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert prefetch_net(NET) is None
    monkeypatch.setenv(ENV, " ")
    assert prefetch_net(NET) is None
    assert fake_gpu.calls == []


@pytest.mark.parametrize("value,message", [
    ("0,0", "distinct GPU indices"), ("a", "distinct GPU indices"), ("-1", "distinct"),
    ("0,5", "no GPU 5 [(]2 visible[)]")])
def test_bad_devices_are_named(fake_gpu, monkeypatch, value, message):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(InputError, match=rf"\$UCUDNN_BENCH_DEVICES: .*{message}"):
        prefetch_net(NET)
    assert fake_gpu.calls == []


def test_gpus_of_different_models_are_refused(fake_gpu, monkeypatch):
    fake_gpu.gpus = ["Fake GPU", "Other GPU"]
    monkeypatch.setenv(ENV, "0,1")
    with pytest.raises(InputError, match="the GPUs differ .*0: Fake GPU, 1: Other GPU"):
        prefetch_net(NET)
    assert fake_gpu.calls == []


def test_parse_devices():
    assert parse_devices("1, 0", "x") == [1, 0]
    with pytest.raises(InputError, match="^x: "):
        parse_devices("", "x")


def test_a_shipped_net_with_its_caffe_inputs():
    """ResNet-18 as Caffe hands it over at its first convolution: the DummyData layer set up
    (its tops as net inputs), the rest as written."""
    text = (REPO / "ucudnn" / "data" / "nets" / "resnet18.prototxt").read_text()
    net = _net(text)
    first = [l.name for l in net.layer].index("conv1")
    dummy = net.layer[0]
    rest = _net("")
    rest.name, rest.state.phase = net.name, 0
    rest.ucudnn_param.policy, rest.ucudnn_param.workspace_limit = 2, 64 << 20
    for top, shape in zip(dummy.top, dummy.dummy_data_param.shape):
        rest.input.append(top)
        rest.input_shape.add().dim.extend(shape.dim)
    rest.layer.extend(net.layer[first:])
    jobs = net_jobs(rest, "TRAIN")
    assert len({j.layer.name for j in jobs}) == 20      # ResNet-18's convolution layers
    assert {j.layer.n for j in jobs} == {256}
    assert all(j.options["policy"] == "all" for j in jobs)
