"""The BatchNorm engines of the patched Caffe (caffe_patch/0009: CUDNN and FUSED): the gtests
(either engine against CAFFE, layer and net, Scale folded), ResNet-18 trained a few steps with
each engine (the same losses), and `caffe time` of ResNet-18 with each engine (BatchNorm +
Scale time printed, not asserted).

Needs a Caffe built by scripts/build_caffe.sh (third_party/caffe/build, or the build folder in
$UCUDNN_CAFFE_BUILD) with caffe_patch/0009 and a GPU; skipped otherwise. Same conventions as
tests/gpu/test_caffe_gpu.py.
"""
import re
import subprocess

import pytest

from gtests import run_gtests
from repo_paths import NETS
from ucudnn.caffe.log import parse_caffe_time

pytestmark = pytest.mark.gpu

RESNET18 = NETS / "resnet18.prototxt"
# the gtest files of 0009 and the layers it changes (scripts/gpu_node.sh builds only the
# listed ones: -DBUILD_only_tests=...)
GTEST_FILES = "cudnn_batch_norm_layer,batch_norm_layer,scale_layer,bias_layer"


@pytest.fixture(scope="module")
def caffe(caffe_tools, tmp_path_factory):
    from ucudnn.caffe.proto import load_caffe_pb2
    pb2 = load_caffe_pb2()
    if "engine" not in pb2.BatchNormParameter.DESCRIPTOR.fields_by_name:
        pytest.skip("ucudnn's caffe_subset.proto has no BatchNormParameter.engine")
    return dict(caffe_tools, pb2=pb2, dir=tmp_path_factory.mktemp("bn_nets"))


def _run(caffe, args, timeout=900):
    r = subprocess.run([str(caffe["bin"] / args[0]), *map(str, args[1:])],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=caffe["env"], timeout=timeout)
    return r.returncode, r.stdout


def _resnet18(caffe, batch, engine):
    """ResNet-18 at mini-batch ``batch`` with every BatchNorm's engine set (``DEFAULT``,
    ``CAFFE``, ``CUDNN`` or ``FUSED``); the written path and the number of BatchNorm layers."""
    from ucudnn.caffe.proto import read_net, write_net
    pb2 = caffe["pb2"]
    net = read_net(pb2, str(RESNET18))
    for shape in net.layer[0].dummy_data_param.shape:
        shape.dim[0] = batch
    bns = [l for l in net.layer if l.type == "BatchNorm"]
    for l in bns:
        l.batch_norm_param.engine = pb2.BatchNormParameter.Engine.Value(engine)
    path = caffe["dir"] / f"resnet18_{batch}_{engine}.prototxt"
    write_net(net, str(path))
    return path, len(bns)


def _folded(out):
    return re.findall(r"Scale layer (\S+) folded into BatchNorm layer (\S+)", out)


def test_batchnorm_gtests(caffe):
    """The gtests of 0009 (CuDNNBatchNorm*: CUDNN against CAFFE per layer and in a net,
    folding, fallback, a CAFFE-trained model loaded with CUDNN) and Caffe's own BatchNorm,
    Scale and Bias tests (0009 changes ScaleLayer and BiasLayer::Backward_gpu)."""
    r = run_gtests(caffe, "*CuDNNBatchNorm*:*BatchNorm*:*ScaleLayer*:*BiasLayer*")
    print("\n".join(l for l in r.stdout.splitlines() if l.startswith("[  ")))
    assert r.returncode == 0, r.stdout[-8000:]
    assert "CuDNNBatchNormNetTest/0.TestFoldedNetMatchesCaffe" in r.stdout, (
        "the 0009 gtests are not in test.testbin: build with "
        f"-DBUILD_only_tests=...,{GTEST_FILES} (or all tests)")
    # cases 0/1: CUDNN (float, double), 2/3: FUSED
    for case in range(4):
        assert f"CuDNNBatchNormLayerTest/{case}.TestTrainInPlaceMatchesCaffe" in r.stdout
        assert f"CuDNNBatchNormLayerTest/{case}.TestInPlaceMemory" in r.stdout
    assert re.search(r"\[  PASSED  \] \d+ tests", r.stdout)


def _losses(out):
    """iteration -> loss from `caffe train` (display: 1)."""
    return {int(i): float(v) for i, v in
            re.findall(r"Iteration (\d+) \(.*\), loss = (\S+)", out)}


def test_resnet18_trains_the_same_with_every_engine(caffe, tmp_path):
    """ResNet-18 (batch 8) trained for 4 SGD steps from the same seed with engine CAFFE, CUDNN
    and FUSED (every Scale folded with the last two): the same losses. Iteration 0 is one forward
    pass from identical weights and data; later ones follow the updated weights (which
    depend on every gradient) and carry cuDNN's non-deterministic convolution gradients."""
    losses = {}
    for engine in ("CAFFE", "CUDNN", "FUSED"):
        model, n_bn = _resnet18(caffe, 8, engine)
        solver = tmp_path / f"solver_{engine}.prototxt"
        solver.write_text(f'net: "{model}"\nbase_lr: 0.01\nlr_policy: "fixed"\nmomentum: 0.9\n'
                          'max_iter: 4\ndisplay: 1\nrandom_seed: 1701\n'
                          'snapshot_after_train: false\nsolver_mode: GPU\n')
        rc, out = _run(caffe, ["caffe", "train", "-solver", solver, "-gpu", 0])
        assert rc == 0, out[-4000:]
        assert "Optimization Done" in out
        folded = _folded(out)
        assert len(folded) == (0 if engine == "CAFFE" else n_bn), folded
        losses[engine] = _losses(out)
        assert sorted(losses[engine]) == [0, 1, 2, 3], out[-3000:]
    print("ResNet-18 batch 8 losses: " + ", ".join(f"{e} {l}" for e, l in losses.items()))
    for it, ref in losses["CAFFE"].items():
        tol = 1e-4 if it == 0 else 1e-3
        for engine in ("CUDNN", "FUSED"):
            assert losses[engine][it] == pytest.approx(ref, rel=tol, abs=tol), (engine, it)


def _bn_scale_ms(t, net_names):
    """BatchNorm + Scale forward+backward ms per iteration from `caffe time`'s per-layer
    lines."""
    return sum(t.layers[n].get("forward", 0.0) + t.layers[n].get("backward", 0.0)
               for n in net_names if n in t.layers)


def test_caffe_time_resnet18_engines(caffe):
    """`caffe time` of ResNet-18 at batch 256 with engine CAFFE, CUDNN and the default (FUSED),
    the Scale layers folded with the last two: all run, the same layers are timed; BatchNorm
    + Scale time printed (a check that they run, not a measurement: the grid measures)."""
    from ucudnn.caffe.proto import read_net
    net = read_net(caffe["pb2"], str(RESNET18))
    bn_scale = [l.name for l in net.layer if l.type in ("BatchNorm", "Scale")]
    times = {}
    for engine in ("CAFFE", "CUDNN", "DEFAULT"):
        model, n_bn = _resnet18(caffe, 256, engine)
        rc, out = _run(caffe, ["caffe", "time", "-model", model, "-iterations", 10,
                               "-gpu", 0])
        assert rc == 0, out[-4000:]
        assert len(_folded(out)) == (0 if engine == "CAFFE" else n_bn)
        if engine == "DEFAULT":
            assert "(engine FUSED)" in out
        times[engine] = parse_caffe_time(out)
    assert set(times["CAFFE"].layers) == set(times["DEFAULT"].layers) == set(
        times["CUDNN"].layers)
    for engine, t in times.items():
        print(f"ResNet-18 batch 256, BatchNorm engine {engine}: {t.median_ms:.1f} ms per "
              f"iteration, BatchNorm + Scale {_bn_scale_ms(t, bn_scale):.1f} ms")
