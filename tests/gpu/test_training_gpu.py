"""``ucudnn training`` on a GPU through pycaffe: a few dozen iterations of the digits net with
stock Caffe and ucudnn powerOfTwo, the files it writes, and curves that agree (Note [Training
equivalence] in ucudnn/experiments/training/comparison.py).

Needs a GPU, pycaffe built with the patch series (scripts/gpu_node.sh setup; the folder in
$UCUDNN_PYCAFFE or third_party/caffe/src/python) and scikit-learn (ucudnn[training]); skipped
otherwise (a failure under --require-gpu)."""
import csv
import json
import os
import subprocess
import sys

import pytest

import child_env
from ucudnn.experiments.training.child import probe
from ucudnn.experiments.training.comparison import ACCURACY_TARGET_PP, LOSS_TARGET
from ucudnn.experiments.training.curves import read_curves
from ucudnn.experiments.training.options import Options
from ucudnn.paths import caffe_build, pycaffe_dir
from ucudnn.experiments.training.settings import TrainingError

pytestmark = pytest.mark.gpu

ITERATIONS = 40


@pytest.fixture(scope="module")
def trained(tmp_path_factory, gpu_visible):
    if not gpu_visible:
        pytest.skip("no GPU visible")
    pytest.importorskip("sklearn", reason="scikit-learn not installed: pip install "
                        "'ucudnn[training]'")
    opts = Options(out=tmp_path_factory.mktemp("probe"), nets=["digits"])
    try:
        probe(opts)
    except TrainingError as e:
        pytest.skip(f"pycaffe does not import (scripts/gpu_node.sh setup builds it): {e}")
    out = tmp_path_factory.mktemp("training")
    env = dict(os.environ, UCUDNN_CACHE=str(out / "bench.sqlite"))
    # the ucudnn this test imported (installed with its compiled core; the checkout's own
    # folder has no core when the package was installed without -e, as on the GPU node)
    env["PYTHONPATH"] = child_env.python_path()
    # the checkout's Caffe, named: the child runs elsewhere (below)
    where = ["--pycaffe", str(pycaffe_dir().resolve())]
    if caffe_build().is_dir():
        where += ["--caffe-build", str(caffe_build().resolve())]
    r = subprocess.run([sys.executable, "-m", "ucudnn", "training", "--out", str(out), *where,
                        "--nets", "digits", "--settings", "stock,powerOfTwo",
                        "--iterations", str(ITERATIONS), "--test-interval", "10",
                        "--limit", "1MiB"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=600,
                       # not the checkout's folder: `-m` puts the working folder first
                       cwd=str(out))
    return out, r


def test_runs_and_writes_its_files(trained):
    out, r = trained
    assert r.returncode == 0, r.stdout[-4000:]
    for name in ("curves.csv", "metadata.json", "summary.json", "summary.md",
                 "training_curves.png"):
        assert (out / name).is_file(), name
    with open(out / "curves.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["net", "setting", "iteration", "loss", "test_accuracy"]
    assert len(rows) == 1 + 2 * (ITERATIONS + 1)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["environment"] == {"NVIDIA_TF32_OVERRIDE": "0"}
    assert meta["device"].get("gpu") and meta["device"].get("cudnn_version")
    net = meta["nets"]["digits"]
    assert net["initial_weights_identical"] is True
    kernels = net["runs"]["powerOfTwo"]["kernels"]
    # conv1 has no backward-data kernel (its bottom needs no gradient)
    assert set(kernels) == {"conv1/fwd", "conv1/bwd_filter", "conv2/fwd", "conv2/bwd_data",
                            "conv2/bwd_filter"}
    assert {k["math"] for k in kernels.values()} == {"fma"}
    assert all(k["batch"] == 128 for k in kernels.values())
    assert "kernels" not in net["runs"]["stock"]


def test_curves_agree_with_stock(trained):
    out, r = trained
    assert r.returncode == 0, r.stdout[-4000:]
    s = json.loads((out / "summary.json").read_text())["nets"]["digits"]
    p = s["powerOfTwo"]
    assert p["compared_iterations"] == ITERATIONS + 1
    assert p["rel_loss_diff_iteration0"] <= 1e-5        # same weights and batch: rounding only
    assert p["max_rel_loss_diff"] <= LOSS_TARGET, p
    # 512 held-out samples: one sample is 0.2 pp; after 40 iterations a few borderline
    # samples may flip, so twice issue 13's 0.5 pp (the full run is judged by the summary)
    assert abs(p["final_accuracy_diff_pp"]) <= 2 * ACCURACY_TARGET_PP, p
    stock = [r for r in read_curves(out / "curves.csv") if r.setting == "stock"]
    assert stock[-1].loss < 0.8 * stock[0].loss and s["stock"]["final_accuracy"] > 0.5
