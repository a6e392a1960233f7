"""The Caffe side of `ucudnn baseline` on a GPU: a net whose DummyData is drawn once by the
Python layer of Note [Inputs drawn once] runs under `caffe time` (with the GPU's state
logged), and pycaffe sees in its input blob exactly the numbers PyTorch's worker draws, the
same after forward passes.

Needs the patched Caffe and pycaffe built by scripts/build_caffe.sh and a GPU (the fixtures
of tests/conftest.py skip otherwise).
"""
import json
import subprocess
import sys

import pytest

import child_env
from repo_paths import NETS
from ucudnn.experiments import caffe_input
from ucudnn.experiments.caffe_run import run_caffe_time, variant_prototxt
from ucudnn.experiments.grid import Point
from ucudnn.paths import pycaffe_dir

pytestmark = pytest.mark.gpu
MIB = 1 << 20


@pytest.fixture(scope="module")
def drawn_once(caffe_tools, tmp_path_factory):
    """cifar10 at batch 16, shared arena 64 MiB, its input drawn once: the prototxt."""
    from ucudnn.caffe.proto import load_caffe_pb2
    path = tmp_path_factory.mktemp("baseline") / "cifar10.prototxt"
    variant_prototxt(load_caffe_pb2(), NETS / "cifar10.prototxt",
                     Point("cifar10@16", "shared", 64 * MIB, engines="both"), path, None,
                     "powerOfTwo", bn_engine_field=True, input_fill="gaussian")
    return path


def test_caffe_time_with_an_input_drawn_once(caffe_tools, drawn_once, tmp_path):
    env = dict(caffe_tools["env"], PYTHONPATH=child_env.python_path(pycaffe_dir()))
    rec = run_caffe_time(str(caffe_tools["bin"] / "caffe"), drawn_once, 5, 0,
                         tmp_path / "caffe.log", 600, env=env, gpu_states=True)
    assert rec["status"] == "ok", rec.get("log_tail")
    assert rec["median_ms"] > 0 and rec["kernels"]
    if "peak_gpu_memory_error" not in rec:         # NVML here: the process's states logged
        state = rec["gpu_state"]
        assert state["samples"] >= 1 and state["start"]["sm_clock_mhz"] > 0


PROBE = """\
import json, sys
import numpy as np
import caffe
from ucudnn.experiments import caffe_input
caffe.set_mode_gpu()
net = caffe.Net(sys.argv[1], caffe.TRAIN)
data = net.blobs["data"].data.copy()
net.forward(); net.backward(); net.forward()
print(json.dumps({
    "same_as_drawn": bool(np.array_equal(data, caffe_input.gaussian(data.shape))),
    "unchanged": bool(np.array_equal(net.blobs["data"].data, data)),
    "labels": sorted(set(net.blobs["label"].data.ravel().tolist())),
    "std": float(data.std())}))
"""


def test_pycaffe_sees_the_numbers_pytorch_draws(caffe_tools, drawn_once):
    env = dict(caffe_tools["env"], PYTHONPATH=child_env.python_path(pycaffe_dir()))
    # -P: the installed package, not the source tree of the working directory
    r = subprocess.run([sys.executable, "-P", "-c", PROBE, str(drawn_once)], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["same_as_drawn"] and got["unchanged"], got
    assert got["labels"] == [0.0] and 0.9 < got["std"] < 1.1
