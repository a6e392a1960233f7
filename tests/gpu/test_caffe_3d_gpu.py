"""3-D convolutions in the patched Caffe on a GPU (Note [3-D convolutions in Caffe] in Caffe's
include/caffe/util/ucudnn.hpp): the layer gtest against im2col, and `caffe time` on
prototxt/vnet3d.prototxt, whose every Convolution runs on the cuDNN layer through ucudnn with
the geometry the planner reads from the prototxt.

Needs a Caffe built by scripts/build_caffe.sh and a GPU; skipped otherwise (as
test_caffe_gpu.py)."""
import re
import subprocess

import pytest

from gtests import run_gtests
from repo_paths import NETS
from ucudnn.caffe.log import parse_caffe_time
from ucudnn.caffe.prototxt import load_prototxt
from ucudnn.caffe.records import ENV as RECORDS_ENV
from ucudnn.caffe.records import read_records, summarize
from ucudnn.plan.conv import ConvShape

pytestmark = pytest.mark.gpu

VNET = NETS / "vnet3d.prototxt"


def test_conv3d_gtest(caffe_tools):
    """TestConv3dEqualsIm2col: top, bottom diff, weight and bias gradients of 3-D layers
    (one and two groups, per-axis geometry, undivided and micro-batched) are im2col's."""
    r = run_gtests(caffe_tools, "UcudnnConvolutionLayerTest.TestConv3d*")
    print("\n".join(l for l in r.stdout.splitlines() if "3-D case" in l or "[  " in l))
    assert r.returncode == 0, r.stdout[-6000:]
    assert "[       OK ] UcudnnConvolutionLayerTest.TestConv3dEqualsIm2col" in r.stdout
    assert re.search(r"\[  PASSED  \] 1 test", r.stdout), r.stdout[-2000:]


def test_vnet3d_caffe_time_plans_every_3d_convolution(caffe_tools, tmp_path):
    records = tmp_path / "records.jsonl"
    env = dict(caffe_tools["env"], UCUDNN_LOG="INFO", **{RECORDS_ENV: str(records)})
    r = subprocess.run([str(caffe_tools["bin"] / "caffe"), "time", "-model", str(VNET),
                        "-iterations", "3", "-gpu", "0"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=1800)
    assert r.returncode == 0, r.stdout[-6000:]
    t = parse_caffe_time(r.stdout)
    recs = read_records(records)
    plans = summarize(recs)
    net = load_prototxt(VNET)
    want = {f"{l.name}/{op}": ConvShape.from_layer(l) for l in net.layers for op in l.ops}
    assert set(plans.kernels) == set(want)
    shapes = {f"{r['layer']}/{r['op']}": r["shape"] for r in recs if r["kind"] == "kernel"}
    for key, shape in want.items():
        got = shapes[key]
        assert {f: got[f] for f in ("d", "t", "pad_d", "stride_d", "dil_d", "h", "w", "r", "s",
                                     "c", "k")} == \
            {f: getattr(shape, f) for f in ("d", "t", "pad_d", "stride_d", "dil_d", "h", "w",
                                            "r", "s", "c", "k")}, key
        k = plans.kernels[key]
        assert k.batch == net.layers[0].n and k.predicted_ms > 0, k
    print(f"vnet3d batch {net.layers[0].n}: {t.median_ms:.2f} ms per forward-backward")
