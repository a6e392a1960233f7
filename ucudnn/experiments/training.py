"""Training curves with and without micro-batching (``ucudnn training``, issue 13).

The same net is trained from the same initial weights on the same batches under every setting
(:data:`SETTINGS`: Caffe's own cuDNN layer, ucudnn undivided / powerOfTwo / all / ILP / the
shared arena), one
setting per process, through pycaffe; the training loss of every iteration and the held-out
accuracy at intervals are compared with the stock run (Note [Training equivalence]).

Layout (pure parts first, testable on a CPU without Caffe):

* settings and nets: :data:`SETTINGS` (a setting Caffe cannot run yet is listed there as not
  available), :data:`NETS`
  (:class:`NetConfig`: batch, iterations, workspace limit, solver), :func:`base_net` (the digits
  LeNet, or the shipped CIFAR-10 quick net with an ``Input`` layer), :func:`variant` (the
  setting's ``ucudnn_param``), :func:`solver_text`;
* data: :class:`Dataset` -- scikit-learn's handwritten digits (:func:`digits_data`) or a
  learnable synthetic set (:func:`synthetic_data`); batches are a function of the iteration
  only (:meth:`Dataset.train_batch`), so every setting sees the same ones;
* results: :func:`write_curves` / :func:`read_curves` (``curves.csv``), :func:`compare` and
  :func:`format_summary` (the summary), :func:`plot_curves` (the figure);
* the runner: :func:`run` writes the prototxt and solver of each (net, setting) and starts one
  child process per setting (:func:`child_main`, ``python -m ucudnn.experiments.training
  --child SPEC``): a fresh process gets Caffe's RNG seeded the same way by the solver's
  ``random_seed`` and contains a crash. The child is the only code that imports pycaffe.

Outputs (``--out``): ``curves.csv`` (``net,setting,iteration,loss,test_accuracy``),
``metadata.json`` (command, versions, solver, seeds, every kernel's plan), ``summary.json`` and
``summary.md``, ``training_curves.png``; per run ``runs/NET/SETTING.json`` (the child's record,
also what a later invocation resumes from), ``logs/NET_SETTING.{log,records.jsonl}`` and
``prototxt/``.

Note [Training equivalence]
    What differs between the settings is only how each convolution is computed: which cuDNN
    algorithm (stock Caffe takes cuDNN's heuristic choice within its 8 MiB per layer; ucudnn
    the fastest benchmarked one within the limit, per micro-batch size) and, for the
    micro-batched plans, in how many pieces. Forward and backward-data compute every sample on
    its own, so splitting the batch changes nothing but the algorithm that computes a sample.
    Backward-filter sums over the batch: a plan of k micro-batches adds k partial sums
    (cuDNN's beta = 1 accumulation), a different summation order than one call over the whole
    batch -- and a different algorithm sums in a different order as well. In fp32 each such
    gradient differs by a few units of rounding (relative 1e-7 .. 1e-6). Several cuDNN
    algorithms are not even deterministic (atomics), so stock Caffe differs from itself from
    one process to the next; ``stock-rerun`` (a second stock process) measures that floor.

    A second mechanism makes single elements differ by O(1), not by rounding: ReLU's
    gradient jumps at 0, so a convolution output that one algorithm computes as +1e-7 and
    another as -1e-7 passes its upstream gradient in one run and none in the other. With
    millions of outputs per layer a few lie that close to 0 (measured on the H200 through
    pycaffe: one such flip behind conv1 made the data gradient differ by 2.2e-2, Note
    [pycaffe comparisons] in tests/test_pycaffe_gpu.py). Every setting that picks another
    forward algorithm than stock does this, micro-batched or not; SGD then carries it on.

    So bitwise equality is not expected. What is expected:

    * the same initial weights in every setting (the solver's ``random_seed``; checked: the
      SHA-256 of the weights before the first update is recorded per run and must agree);
    * iteration 0 (same weights, same batch, only the forward algorithms differ): losses equal
      to fp32 rounding, relative difference <= 1e-5;
    * afterwards the differences grow -- SGD on a non-convex net amplifies perturbations -- but
      the curves stay within the run-to-run noise of stock against itself, and within the
      targets of issue 13: training loss within 1 % (relative, :data:`LOSS_TARGET`) of the stock
      run at every recorded iteration, final held-out accuracy within 0.5 percentage points
      (:data:`ACCURACY_TARGET_PP`). Where stock picks only deterministic algorithms,
      ``stock-rerun`` is bitwise equal and shows no floor; the growth is then what any change
      of summation order would cause.
    * Several seeds (``--seeds``, :func:`compare_seeds`): the issue's bounds on a single pair
      of runs cannot hold (stock against its own re-run misses them: SGD amplifies any
      perturbation, results/h200/training/). What can be tested is whether micro-batching
      moves the curves more than run-to-run noise does: over k seeds (each its own initial
      weights and batch order), the difference of the seeds' mean accuracies (last
      :data:`LAST_EVALUATIONS` evaluations of each run) within 2 standard errors, and the
      seed-averaged trailing-mean loss no further from stock's than 1.5 times stock's own
      re-run is. Measured on the H200 (CIFAR-10 quick, batch 1024, 400 iterations, 5 seeds):
      stock 36.83 ± 0.77 %, stock-rerun -0.08 ± 0.66 pp, powerOfTwo -0.56 ± 0.59 pp, ILP
      -0.16 ± 0.66 pp; seed-mean loss within 1.72 % (stock-rerun), 1.75 % (powerOfTwo),
      1.58 % (ILP) of stock's: micro-batched training is indistinguishable from stock's
      run-to-run spread.
    * A relative difference of single-iteration losses is most fragile where the loss is
      near zero (digits reaches ~0.005 after 200 iterations: 1 % is then 5e-5 absolute), so
      the summary also gives the difference of :data:`SMOOTHING`-iteration means and of the
      held-out accuracy, and the relative L2 difference of the final weights to stock's.

    TF32 would hide all of this: with TF32 tensor cores an fp32 convolution is only ~1e-3
    accurate, four orders of magnitude above the summation-order effect. ucudnn's settings run
    with ``math: FMA``; stock Caffe has no such field and uses cuDNN's default math, which in
    cuDNN 9 may use TF32 for fp32 data. Every setting's process therefore runs with
    ``NVIDIA_TF32_OVERRIDE=0`` (no TF32 in cuDNN or cuBLAS), which makes all of them strict fp32;
    the metadata records it.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import hashlib
import io
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..vocab import InputError
from .reproduce import CHECKOUT, caffe_patches, git, local_root

__all__ = [
    "Setting", "SETTINGS", "DEFAULT_SETTINGS", "NetConfig", "NETS", "CURVE_COLUMNS",
    "LOSS_TARGET", "ACCURACY_TARGET_PP", "TrainingError", "Options", "Dataset",
    "digits_data", "synthetic_data", "dataset", "base_net", "variant", "solver_text",
    "Row", "write_curves", "read_curves", "compare", "format_summary", "plot_curves",
    "kernel_plans_of", "run", "regenerate", "child_main", "compare_seeds",
    "format_seeds_summary", "regenerate_seeds", "LAST_EVALUATIONS",
]

_PACKAGE = Path(__file__).resolve().parents[1]
#: The folder holding the ``ucudnn`` package: children import the same ucudnn.
PACKAGE_ROOT = _PACKAGE.parent

#: ``curves.csv``'s columns, exactly.
CURVE_COLUMNS = ("net", "setting", "iteration", "loss", "test_accuracy")
#: issue 13's targets: relative training-loss difference to stock, and final held-out accuracy
#: difference in percentage points.
LOSS_TARGET = 0.01
ACCURACY_TARGET_PP = 0.5
#: ucudnn's benchmark repeats per micro-batch size (ucudnn_param.benchmark_repeats): plans only
#: need to be valid, not the fastest, for this experiment; one Find keeps `all` affordable.
BENCH_REPEATS = 1
#: every setting's process: no TF32 anywhere (Note [Training equivalence])
STRICT_FP32_ENV = {"NVIDIA_TF32_OVERRIDE": "0"}
PIP_HINT = "pip install 'ucudnn[training]' (scikit-learn)"


class TrainingError(InputError):
    """Options or files the experiment cannot run with; the message names the option."""


# ------------------------------------------------------------------------------- settings

@dataclasses.dataclass(frozen=True)
class Setting:
    """One way of running the convolutions. ``policy`` None: stock Caffe (no ucudnn_param).
    ``available`` False: listed so that the table shows it, refused when asked for
    (``why_not``)."""
    name: str
    policy: Optional[str]
    optimizer: Optional[str]
    about: str
    available: bool = True
    why_not: str = ""

    @property
    def stock(self) -> bool:
        return self.policy is None and self.optimizer is None

    @property
    def micro_batched(self) -> bool:
        """Its plans may split the batch (what a run must show: Note [Training
        equivalence])."""
        return self.policy in ("powerOfTwo", "all")


SETTINGS: Dict[str, Setting] = {s.name: s for s in (
    Setting("stock", None, None, "Caffe's own cuDNN layer, no ucudnn_param (cuDNN's heuristic "
            "algorithm within Caffe's 8 MiB per layer; default math, TF32 off by "
            "NVIDIA_TF32_OVERRIDE=0)"),
    Setting("stock-rerun", None, None, "stock again in another process: the run-to-run floor "
            "(cuDNN's non-deterministic algorithms)"),
    Setting("undivided", "undivided", "dp", "ucudnn, DP, the fastest single algorithm within "
            "the limit (math FMA)"),
    Setting("powerOfTwo", "powerOfTwo", "dp", "ucudnn, DP over power-of-two micro-batches "
            "within the limit (math FMA)"),
    Setting("all", "all", "dp", "ucudnn, DP over every micro-batch size within the limit "
            "(math FMA)"),
    Setting("ilp", "powerOfTwo", "ilp", "ucudnn, ILP over power-of-two micro-batches, one "
            "budget of limit x kernels for the net (math FMA)"),
    Setting("shared", "powerOfTwo", "shared", "ucudnn, one workspace arena of limit x kernels "
            "that every layer reuses (optimizer SHARED, issue 11), power-of-two micro-batches "
            "(math FMA)"),
    # A setting that Caffe cannot run yet goes here with available=False and why_not: listed
    # in --help, refused when asked for.
)}

#: Settings run when ``--settings`` is not given. CIFAR-10 `all` at batch 1024 benchmarks 1024
#: micro-batch sizes per kernel with an empty cache (minutes; issue 14), so it is left out by
#: default there; ``--nets cifar10 --settings all`` adds it to the same --out.
DEFAULT_SETTINGS: Dict[str, Tuple[str, ...]] = {
    "digits": ("stock", "stock-rerun", "undivided", "powerOfTwo", "ilp", "shared", "all"),
    "cifar10": ("stock", "stock-rerun", "undivided", "powerOfTwo", "ilp", "shared"),
}


# ----------------------------------------------------------------------------------- nets

@dataclasses.dataclass(frozen=True)
class NetConfig:
    """One experiment net: the batch, how long it trains, the per-kernel workspace limit of
    the ucudnn settings, the solver, and the data set's size."""
    name: str
    batch: int
    iterations: int
    test_interval: int
    limit: int
    base_lr: float
    momentum: float
    weight_decay: float
    lr_policy: str
    gamma: float = 0.0
    power: float = 0.0
    seed: int = 1
    about: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


NETS: Dict[str, NetConfig] = {
    # Caffe's LeNet (examples/mnist) and its solver, on the 8x8 digits upscaled to 32x32
    "digits": NetConfig("digits", batch=128, iterations=300, test_interval=10, limit=1 << 20,
                        base_lr=0.01, momentum=0.9, weight_decay=0.0005, lr_policy="inv",
                        gamma=0.0001, power=0.75,
                        about="scikit-learn's handwritten digits (1,797 real 8x8 images, "
                        "upscaled 4x to 32x32), 1,285 for training, 512 held out; Caffe's "
                        "LeNet (conv 5x5 x20, pool, conv 5x5 x50, pool, ip 500, ReLU, ip 10)"),
    # the shipped CIFAR-10 quick net and Caffe's cifar10_quick_solver
    "cifar10": NetConfig("cifar10", batch=1024, iterations=400, test_interval=20,
                         limit=64 << 20, base_lr=0.001, momentum=0.9, weight_decay=0.004,
                         lr_policy="fixed",
                         about="the shipped CIFAR-10 quick net at batch 1024 with an Input "
                         "layer, on synthetic 3x32x32 images (smooth random images labelled "
                         "by a fixed random linear teacher), 16,384 for training, 2,048 held "
                         "out"),
}

_DIGITS_TEST = 512              # held-out digits: 4 batches of 128
_SYNTH_TRAIN, _SYNTH_TEST = 16384, 2048
_UPSCALE = 4                    # 8x8 -> 32x32
#: synthetic images: pixel scale of CIFAR-10's mean-subtracted 0..255 data, which the quick
#: net's fillers (conv1 std 1e-4) and solver (lr 0.001) are made for
_SYNTH_SCALE = 64.0


def _lenet_text(batch: int) -> str:
    return f"""
name: "LeNet_digits"
layer {{ name: "data" type: "Input" top: "data" top: "label"
  input_param {{ shape {{ dim: {batch} dim: 1 dim: 32 dim: 32 }} shape {{ dim: {batch} }} }} }}
layer {{ name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param {{ lr_mult: 1 }} param {{ lr_mult: 2 }}
  convolution_param {{ num_output: 20 kernel_size: 5 stride: 1
    weight_filler {{ type: "xavier" }} bias_filler {{ type: "constant" }} }} }}
layer {{ name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}
layer {{ name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  param {{ lr_mult: 1 }} param {{ lr_mult: 2 }}
  convolution_param {{ num_output: 50 kernel_size: 5 stride: 1
    weight_filler {{ type: "xavier" }} bias_filler {{ type: "constant" }} }} }}
layer {{ name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  param {{ lr_mult: 1 }} param {{ lr_mult: 2 }}
  inner_product_param {{ num_output: 500
    weight_filler {{ type: "xavier" }} bias_filler {{ type: "constant" }} }} }}
layer {{ name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  param {{ lr_mult: 1 }} param {{ lr_mult: 2 }}
  inner_product_param {{ num_output: 10
    weight_filler {{ type: "xavier" }} bias_filler {{ type: "constant" }} }} }}
layer {{ name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy" }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
"""


def default_nets_dir() -> Path:
    return _PACKAGE / "data" / "nets"


def base_net(pb2, name: str, batch: Optional[int] = None, nets_dir: Optional[Path] = None):
    """The ``NetParameter`` of experiment net ``name`` without any ucudnn_param, fed by an
    ``Input`` layer with tops ``data`` and ``label`` at ``batch`` (default: the net's), and with
    an ``Accuracy`` top ``accuracy`` and a loss top ``loss``."""
    from ..caffe.proto import parse_net, read_net
    cfg = _config(name)
    batch = batch or cfg.batch
    if name == "digits":
        return parse_net(pb2, _lenet_text(batch), "digits LeNet")
    path = Path(nets_dir or default_nets_dir()) / f"{name}.prototxt"
    net = read_net(pb2, str(path))
    net.ClearField("ucudnn_param")
    for layer in net.layer:
        layer.ClearField("ucudnn_param")
    dummy = [i for i, l in enumerate(net.layer) if l.type == "DummyData"]
    if len(dummy) != 1 or list(net.layer[dummy[0]].top) != ["data", "label"]:
        raise TrainingError(f"--nets: {path} has no DummyData layer with tops data, label to "
                            "replace by an Input layer")
    layer = net.layer[dummy[0]]
    shapes = [list(s.dim) for s in layer.dummy_data_param.shape]
    layer.ClearField("dummy_data_param")
    layer.type = "Input"
    for dims in shapes:
        dims[0] = batch
        layer.input_param.shape.add().dim.extend(dims)
    tops = {t for l in net.layer for t in l.top}
    if not {"loss", "accuracy"} <= tops:
        raise TrainingError(f"--nets: {path} needs tops 'loss' and 'accuracy'")
    return net


def variant(pb2, net, setting: str, limit: int, *, engine: Optional[str] = None,
            cache_path: Optional[str] = None):
    """A copy of ``net`` with the net-wide ``ucudnn_param`` of ``setting`` (none for stock):
    its policy and optimizer, ``workspace_limit`` = ``limit`` (the ILP's budget: limit x
    kernels, ``total_workspace`` 0), ``math: FMA``, :data:`BENCH_REPEATS`. ``engine``: set
    the engine of every layer that has one (``CAFFE`` for a CPU run: no cuDNN layers)."""
    from ..caffe.proto import set_ucudnn_param
    s = SETTINGS.get(setting)
    if s is None:
        raise TrainingError(f"--settings: unknown setting {setting!r} (expected one of "
                            f"{', '.join(SETTINGS)})")
    if not s.available:
        raise TrainingError(f"--settings: {setting}: {s.why_not}")
    out = pb2.NetParameter()
    out.CopyFrom(net)
    out.ClearField("ucudnn_param")
    for layer in out.layer:
        layer.ClearField("ucudnn_param")
        field = _ENGINE_FIELDS.get(layer.type)
        if engine is not None and field is not None:
            param = getattr(layer, field)
            param.engine = param.Engine.Value(engine)
    if not s.stock:
        set_ucudnn_param(out, policy=s.policy, optimizer=s.optimizer, limit=limit, math="fma",
                         repeats=BENCH_REPEATS, cache_path=cache_path)
    return out


#: layer type -> its parameter with an ``engine`` (DEFAULT is cuDNN in a cuDNN build)
_ENGINE_FIELDS = {"Convolution": "convolution_param", "Pooling": "pooling_param",
                  "ReLU": "relu_param", "Softmax": "softmax_param",
                  "SoftmaxWithLoss": "softmax_param", "Sigmoid": "sigmoid_param",
                  "TanH": "tanh_param", "LRN": "lrn_param"}


def _solver_fields(cfg: NetConfig, net_file: str, iterations: int, seed: int,
                   mode: str) -> List[Tuple[str, Any]]:
    f: List[Tuple[str, Any]] = [("net", net_file), ("type", "SGD"), ("base_lr", cfg.base_lr),
                                ("momentum", cfg.momentum),
                                ("weight_decay", cfg.weight_decay),
                                ("lr_policy", cfg.lr_policy)]
    if cfg.lr_policy == "inv":
        f += [("gamma", cfg.gamma), ("power", cfg.power)]
    f += [("max_iter", iterations), ("display", 0), ("snapshot", 0),
          ("snapshot_after_train", False), ("random_seed", seed),
          ("solver_mode", "GPU" if mode == "gpu" else "CPU")]
    return f


def solver_text(cfg: NetConfig, net_file: str, iterations: int, seed: int,
                mode: str = "gpu") -> str:
    """Caffe's ``SolverParameter`` in text format: SGD as ``cfg`` says, the net by file name
    (the child runs in the prototxt's folder), no test nets (held-out accuracy is measured by
    the runner on the training net, Note [Training equivalence]), no display or snapshots,
    and ``random_seed``: the initial weights of every setting."""
    lines = []
    for k, v in _solver_fields(cfg, net_file, iterations, seed, mode):
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, str) and k not in ("solver_mode",):
            v = json.dumps(v)
        elif isinstance(v, float):
            v = repr(v)
        lines.append(f"{k}: {v}")
    return "\n".join(lines) + "\n"


def _config(name: str) -> NetConfig:
    if name not in NETS:
        raise TrainingError(f"--nets: unknown net {name!r} (expected one of "
                            f"{', '.join(NETS)})")
    return NETS[name]


# ----------------------------------------------------------------------------------- data

class Dataset:
    """Images (N, C, H, W) at low resolution, upscaled ``upscale`` x by pixel repetition when a
    batch is taken; labels as float32 (Caffe's blobs). Batches depend only on the data set's
    seed and the iteration: every setting trains on the same ones."""

    def __init__(self, name: str, x_train, y_train, x_test, y_test, batch: int, seed: int,
                 upscale: int = 1, scale: float = 1.0):
        import numpy as np
        if len(x_test) % batch:
            raise TrainingError(f"{name}: {len(x_test)} held-out samples are not whole "
                                f"batches of {batch}")
        if len(x_train) < batch:
            raise TrainingError(f"{name}: fewer training samples ({len(x_train)}) than a "
                                f"batch ({batch})")
        self.name, self.batch, self.seed = name, batch, seed
        self.upscale, self.scale = upscale, scale
        self.x_train = np.ascontiguousarray(x_train, dtype=np.float32)
        self.y_train = np.asarray(y_train, dtype=np.float32)
        self.x_test = np.ascontiguousarray(x_test, dtype=np.float32)
        self.y_test = np.asarray(y_test, dtype=np.float32)

    @property
    def batches_per_epoch(self) -> int:
        return len(self.x_train) // self.batch

    def train_indices(self, iteration: int):
        """The samples of ``iteration``'s batch: epoch by epoch, a permutation seeded by
        (seed, epoch); the remainder of an epoch is dropped."""
        import numpy as np
        epoch, j = divmod(iteration, self.batches_per_epoch)
        if getattr(self, "_epoch", None) != epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(
                len(self.x_train))
            self._epoch = epoch
        return self._perm[j * self.batch:(j + 1) * self.batch]

    def _images(self, x):
        import numpy as np
        if self.upscale > 1:
            x = x.repeat(self.upscale, axis=2).repeat(self.upscale, axis=3)
        if self.scale != 1.0:
            x = x * np.float32(self.scale)
        return np.ascontiguousarray(x, dtype=np.float32)

    def train_batch(self, iteration: int):
        """``(images, labels)`` of ``iteration``."""
        idx = self.train_indices(iteration)
        return self._images(self.x_train[idx]), self.y_train[idx]

    def test_batches(self):
        """The held-out set in batches of ``batch``, in a fixed order."""
        for i in range(0, len(self.x_test), self.batch):
            yield (self._images(self.x_test[i:i + self.batch]),
                   self.y_test[i:i + self.batch])

    def fingerprint(self) -> str:
        """SHA-256 of the data (training and held-out), for the metadata."""
        h = hashlib.sha256()
        for a in (self.x_train, self.y_train, self.x_test, self.y_test):
            h.update(a.tobytes())
        return h.hexdigest()


def _need_sklearn():
    try:
        import sklearn.datasets  # noqa: F401
    except ImportError as e:
        raise TrainingError(f"--nets: the digits data set comes with scikit-learn, which is "
                            f"not installed ({e}): {PIP_HINT}") from None
    return sklearn.datasets


def digits_data(batch: int = 128, seed: int = 1) -> Dataset:
    """scikit-learn's handwritten digits (1,797 8x8 images with values 0..16, shipped with the
    package), scaled to [0, 1]; a permutation seeded by ``seed`` holds out the first 512."""
    import numpy as np
    datasets = _need_sklearn()
    d = datasets.load_digits()
    x = (d.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = d.target.astype(np.float32)
    perm = np.random.default_rng(seed).permutation(len(x))
    test, train = perm[:_DIGITS_TEST], perm[_DIGITS_TEST:]
    return Dataset("digits", x[train], y[train], x[test], y[test], batch, seed,
                   upscale=_UPSCALE)


def synthetic_data(batch: int = 1024, seed: int = 1, n_train: int = _SYNTH_TRAIN,
                   n_test: int = _SYNTH_TEST, classes: int = 10) -> Dataset:
    """Fixed random images labelled by a fixed random linear teacher: z ~ N(0, 1) of shape
    3x8x8, label argmax(W z) with W ~ N(0, 1) (classes x 192); the image is z upscaled 4x to
    3x32x32 (smooth, so that the conv/pool net can represent the teacher) times the pixel scale
    of mean-subtracted CIFAR-10. Learnable, not trivially: accuracy climbs over the run."""
    import numpy as np
    rng = np.random.default_rng([seed, 10])
    z = rng.standard_normal((n_train + n_test, 3, 8, 8), dtype=np.float32)
    w = rng.standard_normal((classes, 3 * 8 * 8), dtype=np.float32)
    y = np.argmax(z.reshape(len(z), -1) @ w.T, axis=1).astype(np.float32)
    return Dataset("synthetic", z[:n_train], y[:n_train], z[n_train:], y[n_train:], batch,
                   seed, upscale=_UPSCALE, scale=_SYNTH_SCALE)


def dataset(net: str, batch: Optional[int] = None, seed: Optional[int] = None) -> Dataset:
    """The data set a net trains on."""
    cfg = _config(net)
    batch, seed = batch or cfg.batch, cfg.seed if seed is None else seed
    return digits_data(batch, seed) if net == "digits" else synthetic_data(batch, seed)


# -------------------------------------------------------------------------------- curves

@dataclasses.dataclass(frozen=True)
class Row:
    """One recorded iteration: the loss of the forward pass of ``iteration`` (the weights after
    ``iteration`` updates, on that iteration's batch) and, where evaluated, the held-out
    accuracy of the same weights."""
    net: str
    setting: str
    iteration: int
    loss: Optional[float]
    test_accuracy: Optional[float] = None


def _num(v: Optional[float]) -> str:
    return "" if v is None else repr(float(v))


def write_curves(path, rows: Iterable[Row]) -> None:
    """``curves.csv``: :data:`CURVE_COLUMNS`, one row per (net, setting, iteration), numbers
    at full precision (float32 values round-trip), empty where not evaluated; written
    atomically."""
    from ..plan.table import write_text
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CURVE_COLUMNS)
    for r in sorted(rows, key=lambda r: (r.net, _setting_order(r.setting), r.iteration)):
        w.writerow([r.net, r.setting, r.iteration, _num(r.loss), _num(r.test_accuracy)])
    write_text(path, buf.getvalue())


def read_curves(path) -> List[Row]:
    """The rows of a ``curves.csv``; errors name the file, line and column."""
    from ..plan.table import read_text
    text = read_text(path, TrainingError, "a curves.csv")
    rows: List[Row] = []
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(header) != CURVE_COLUMNS:
        raise TrainingError(f"{path}:1: expected the columns {','.join(CURVE_COLUMNS)}, got "
                            f"{','.join(header or [])!r}")
    seen = set()
    for line, rec in enumerate(reader, start=2):
        if not rec:
            continue
        if len(rec) != len(CURVE_COLUMNS):
            raise TrainingError(f"{path}:{line}: expected {len(CURVE_COLUMNS)} fields, got "
                                f"{len(rec)}")
        net, setting, it, loss, acc = rec
        try:
            it_v = int(it)
        except ValueError:
            raise TrainingError(f"{path}:{line}: iteration: not an integer: {it!r}") from None
        vals = []
        for col, v in (("loss", loss), ("test_accuracy", acc)):
            try:
                x = float(v) if v.strip() else None
            except ValueError:
                raise TrainingError(f"{path}:{line}: {col}: not a number: {v!r}") from None
            if x is not None and not math.isfinite(x) and col == "test_accuracy":
                raise TrainingError(f"{path}:{line}: {col}: not finite: {v!r}")
            vals.append(x)
        if (net, setting, it_v) in seen:
            raise TrainingError(f"{path}:{line}: {net}/{setting} iteration {it_v} appears "
                                "twice")
        seen.add((net, setting, it_v))
        rows.append(Row(net, setting, it_v, vals[0], vals[1]))
    return rows


def _setting_order(name: str) -> int:
    names = list(SETTINGS)
    return names.index(name) if name in names else len(names)


def _curves(rows: Iterable[Row]) -> Dict[str, Dict[str, List[Row]]]:
    out: Dict[str, Dict[str, List[Row]]] = {}
    for r in rows:
        out.setdefault(r.net, {}).setdefault(r.setting, []).append(r)
    for per in out.values():
        for s in per:
            per[s].sort(key=lambda r: r.iteration)
    return out


def _rel(a: float, b: float) -> float:
    """|a - b| / |b|; 0 where equal, inf where only b is 0."""
    if a == b:
        return 0.0
    return abs(a - b) / abs(b) if b != 0 else math.inf


def compare(rows: Iterable[Row], reference: str = "stock",
            plans: Optional[Mapping[str, Mapping[str, dict]]] = None) -> dict:
    """Per net and setting, the differences to ``reference`` over the iterations both
    recorded: ``max_rel_loss_diff`` (max |loss - ref| / ref) and the iteration where it is
    largest, ``rel_loss_diff_iteration0``, ``median_rel_loss_diff``, ``max_rel_loss_diff_first``
    (over the first 10 % of the iterations), the final held-out accuracy of both and
    ``final_accuracy_diff_pp`` (percentage points, at the last iteration both evaluated),
    ``max_abs_accuracy_diff_pp``, ``bitwise_equal`` (every loss and accuracy identical), and
    whether issue 13's targets hold (:data:`LOSS_TARGET`, :data:`ACCURACY_TARGET_PP`).
    ``plans``: {net: {setting: run record}} adds how many kernels each plan split."""
    out: Dict[str, Dict[str, dict]] = {}
    for net, per in _curves(rows).items():
        ref = per.get(reference)
        res: Dict[str, dict] = {}
        for setting in sorted(per, key=_setting_order):
            rows_s = per[setting]
            rec: Dict[str, Any] = {"iterations": len(rows_s),
                                   "last_iteration": rows_s[-1].iteration if rows_s else None}
            acc = [r for r in rows_s if r.test_accuracy is not None]
            rec["final_accuracy"] = acc[-1].test_accuracy if acc else None
            rec["final_loss"] = next((r.loss for r in reversed(rows_s) if r.loss is not None),
                                     None)
            if ref is not None and setting != reference:
                rec.update(_diff(rows_s, ref))
            run = ((plans or {}).get(net) or {}).get(setting)
            if run:
                rec.update(_plan_facts(run))
            res[setting] = rec
        out[net] = res
    return {"reference": reference, "loss_target": LOSS_TARGET,
            "accuracy_target_pp": ACCURACY_TARGET_PP, "nets": out}


def _diff(rows: List[Row], ref: List[Row]) -> dict:
    import statistics
    by_it = {r.iteration: r for r in ref}
    pairs = [(r, by_it[r.iteration]) for r in rows if r.iteration in by_it]
    losses = [(r.iteration, _rel(r.loss, s.loss)) for r, s in pairs
              if r.loss is not None and s.loss is not None]
    accs = [(r.iteration, 100.0 * (r.test_accuracy - s.test_accuracy)) for r, s in pairs
            if r.test_accuracy is not None and s.test_accuracy is not None]
    d: Dict[str, Any] = {"compared_iterations": len(losses)}
    if losses:
        it_max, mx = max(losses, key=lambda p: (p[1], -p[0]))
        last = max(i for i, _ in losses)
        first = [v for i, v in losses if i <= max(1, last // 10)]
        d.update({"max_rel_loss_diff": mx, "max_rel_loss_diff_iteration": it_max,
                  "rel_loss_diff_iteration0": dict(losses).get(0),
                  "median_rel_loss_diff": statistics.median(v for _, v in losses),
                  "max_rel_loss_diff_first": max(first) if first else None,
                  "max_rel_smoothed_loss_diff": _smoothed_diff(pairs),
                  "loss_within_target": mx <= LOSS_TARGET})
    if accs:
        d.update({"final_accuracy_diff_pp": accs[-1][1],
                  "final_accuracy_iteration": accs[-1][0],
                  "max_abs_accuracy_diff_pp": max(abs(v) for _, v in accs),
                  "accuracy_within_target": abs(accs[-1][1]) <= ACCURACY_TARGET_PP})
    d["bitwise_equal"] = bool(pairs) and all(
        r.loss == s.loss and r.test_accuracy == s.test_accuracy for r, s in pairs)
    return d


#: iterations of the trailing mean in ``max_rel_smoothed_loss_diff`` (the batch-to-batch
#: noise of a single iteration's loss averaged out, as Caffe's ``average_loss`` does)
SMOOTHING = 20


def _smoothed_diff(pairs) -> Optional[float]:
    """max over iterations of |mean - ref mean| / ref mean of the trailing
    :data:`SMOOTHING`-iteration means of the loss (over iterations both recorded)."""
    both = [(r.loss, s.loss) for r, s in pairs if r.loss is not None and s.loss is not None]
    if len(both) < SMOOTHING:
        return None
    out = 0.0
    for i in range(SMOOTHING, len(both) + 1):
        window = both[i - SMOOTHING:i]
        out = max(out, _rel(sum(a for a, _ in window), sum(b for _, b in window)))
    return out


def kernel_plans_of(records: List[dict]) -> Dict[str, dict]:
    """Per ``layer/op``, the plan a kernel ran (its last plan record, Note [Plan records] in
    ucudnn/caffe/records.py): the plan text, its runs of micro-batches, workspace, whether it
    splits the batch, and the math mode it was planned with."""
    from ..caffe.records import summarize
    math_of = {}
    for r in records:
        if r["kind"] == "kernel":
            math_of[f"{r['layer']}/{r['op']}"] = r.get("math")
    out = {}
    for key, k in summarize(records).kernels.items():
        chunks = [{"batch": c.get("batch"), "count": c.get("count"), "algo": c.get("algo"),
                   "algo_name": c.get("algo_name"), "ws_bytes": c.get("ws_bytes")}
                  for c in k.chunks]
        out[key] = {"plan": k.plan, "chunks": chunks, "batch": k.batch, "stage": k.stage,
                    "ws_bytes": k.ws_bytes, "predicted_ms": k.predicted_ms,
                    "undivided_ms": k.undivided_ms, "instances": k.instances,
                    "split": any((c.get("batch") or k.batch) < k.batch for c in k.chunks),
                    "math": math_of.get(key), "bench_s": k.bench_s,
                    "sizes_benchmarked": k.sizes_benchmarked, "sizes_cached": k.sizes_cached}
    return out


def _plan_facts(run: dict) -> dict:
    kernels = run.get("kernels") or {}
    return {"kernels": len(kernels), "kernels_split": sum(1 for k in kernels.values()
                                                          if k.get("split")),
            "split_kernels": sorted(k for k, v in kernels.items() if v.get("split")),
            "initial_weights_sha256": run.get("initial_weights_sha256"),
            "final_weights_rel_diff": run.get("final_weights_rel_diff")}


def _fmt(v, spec: str, none: str = "-") -> str:
    if v is None:
        return none
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return format(v, spec)


def format_summary(summary: dict) -> str:
    """The summary as Markdown: one table per net, a row per setting."""
    lines = [f"Differences to `{summary['reference']}` (issue 13's targets: training loss "
             f"within {100 * summary['loss_target']:g} % relative at every recorded iteration, "
             f"final held-out accuracy within {summary['accuracy_target_pp']:g} pp).", ""]
    for net, per in summary["nets"].items():
        lines += [f"### {net}", "",
                  "| setting | kernels split | loss rel. diff, it. 0 | max loss rel. diff (it.) "
                  f"| median | max, {SMOOTHING}-it. mean | final acc. | Δ acc. (pp) "
                  "| max abs Δ acc. (pp) | weights rel. diff | targets |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for setting, r in per.items():
            split = (f"{r['kernels_split']}/{r['kernels']}" if r.get("kernels") else "-")
            if setting == summary["reference"]:
                targets = "reference"
            elif "loss_within_target" not in r:
                targets = "-"
            elif r.get("bitwise_equal"):
                targets = "bitwise equal"
            else:
                ok = r.get("loss_within_target") and r.get("accuracy_within_target", True)
                targets = "met" if ok else "NOT met"
            mx = (f"{_fmt(r.get('max_rel_loss_diff'), '.2e')} "
                  f"({_fmt(r.get('max_rel_loss_diff_iteration'), 'd')})"
                  if "max_rel_loss_diff" in r else "-")
            fin = r.get("final_accuracy")
            lines.append(
                f"| {setting} | {split} | {_fmt(r.get('rel_loss_diff_iteration0'), '.2e')} | "
                f"{mx} | {_fmt(r.get('median_rel_loss_diff'), '.2e')} | "
                f"{_fmt(r.get('max_rel_smoothed_loss_diff'), '.2e')} | "
                f"{_fmt(None if fin is None else 100 * fin, '.2f')} % | "
                f"{_fmt(r.get('final_accuracy_diff_pp'), '+.2f')} | "
                f"{_fmt(r.get('max_abs_accuracy_diff_pp'), '.2f')} | "
                f"{_fmt(r.get('final_weights_rel_diff'), '.2e')} | {targets} |")
        lines.append("")
    for key, error in (summary.get("failed") or {}).items():
        lines.append(f"- {key} failed: {error}")
    return "\n".join(lines)


# -------------------------------------------------------------------------------- figure

SETTING_COLORS = {"stock": "#000000", "stock-rerun": "#777777", "undivided": "#4477aa",
                  "powerOfTwo": "#ee6677", "all": "#228833", "ilp": "#ccbb44",
                  "shared": "#66ccee"}
#: the relative-difference axis is symlog, linear below this: a zero difference is drawn at 0
REL_LINTHRESH = 1e-8


def plot_curves(rows: Iterable[Row], out: str, reference: str = "stock"):
    """One row of panels per net: training loss per setting (log scale), |loss - stock| /
    stock (symlog: identical iterations drawn at 0; the 1 % target dashed) and held-out
    accuracy. Agg backend, deterministic PNG (no timestamps); returns the closed figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter
    curves = _curves(rows)
    nets = sorted(curves)
    fig, axes = plt.subplots(max(1, len(nets)), 3, figsize=(15, 4.2 * max(1, len(nets))),
                             squeeze=False)
    for row_axes, net in zip(axes, nets):
        ax_l, ax_d, ax_a = row_axes
        per = curves[net]
        ref = {r.iteration: r for r in per.get(reference, [])}
        for setting in sorted(per, key=_setting_order):
            rs = per[setting]
            style = dict(color=SETTING_COLORS.get(setting, "#66ccee"), lw=1.2,
                         label=setting, ls="--" if setting == "stock-rerun" else "-")
            pts = [(r.iteration, r.loss) for r in rs if r.loss is not None and r.loss > 0]
            if pts:
                ax_l.plot(*zip(*pts), **style)
            acc = [(r.iteration, 100 * r.test_accuracy) for r in rs
                   if r.test_accuracy is not None]
            if acc:
                ax_a.plot(*zip(*acc), marker="o", ms=2.5, **style)
            if setting != reference and ref:
                d = [(r.iteration, _rel(r.loss, ref[r.iteration].loss)) for r in rs
                     if r.iteration in ref and r.loss is not None
                     and ref[r.iteration].loss is not None]
                d = [(i, v) for i, v in d if math.isfinite(v)]
                if d:
                    ax_d.plot(*zip(*d), **style)
        ax_l.set_yscale("log")
        ax_l.set_ylabel("training loss")
        ax_l.set_title(f"{net}: training loss")
        ax_d.set_yscale("symlog", linthresh=REL_LINTHRESH, linscale=0.5)
        ax_d.yaxis.set_major_locator(FixedLocator([0.0] + [10.0 ** k for k in range(-8, 1)]))
        ax_d.yaxis.set_major_formatter(FuncFormatter(
            lambda v, _: "0" if v == 0 else f"1e{int(round(math.log10(v)))}"))
        ax_d.axhline(LOSS_TARGET, color="#aa3377", ls=":", lw=1, label="1 % target")
        ax_d.set_ylim(-REL_LINTHRESH / 2, 1.0)
        ax_d.set_ylabel(f"|loss - {reference}| / {reference} (symlog: 0 = equal)")
        ax_d.set_title(f"{net}: relative difference to {reference}")
        ax_a.set_ylabel("held-out accuracy (%)")
        ax_a.set_title(f"{net}: held-out accuracy")
        for ax in row_axes:
            ax.set_xlabel("iteration")
            ax.grid(True, alpha=0.3)
        ax_l.legend(fontsize=8)
        ax_d.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return fig


# -------------------------------------------------------------------------------- runner

@dataclasses.dataclass
class Options:
    """One ``ucudnn training`` invocation. ``settings``/``iterations``/``test_interval``/
    ``limits``: per net, missing nets take :data:`DEFAULT_SETTINGS` and the :data:`NETS`
    values. ``mode`` ``cpu``: Caffe's CPU mode with engine CAFFE convolutions (only the stock
    settings; for tests). ``batch``: override the nets' batch (tests)."""
    out: Path
    nets: Sequence[str] = ("digits", "cifar10")
    settings: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    iterations: Mapping[str, int] = dataclasses.field(default_factory=dict)
    test_interval: Mapping[str, int] = dataclasses.field(default_factory=dict)
    limits: Mapping[str, int] = dataclasses.field(default_factory=dict)
    pycaffe: Optional[Path] = None
    caffe_build: Optional[Path] = None
    gpu: int = 0
    mode: str = "gpu"
    timeout: float = 900.0
    force: bool = False
    seed: Optional[int] = None
    cache_path: Optional[str] = None
    batch: Mapping[str, int] = dataclasses.field(default_factory=dict)
    argv: Optional[Sequence[str]] = None

    def net_settings(self, net: str) -> List[str]:
        return list(self.settings.get(net) or DEFAULT_SETTINGS[net])

    def plan(self, net: str) -> dict:
        """What (net) runs with, as JSON."""
        cfg = _config(net)
        return {"batch": self.batch.get(net, cfg.batch),
                "iterations": self.iterations.get(net, cfg.iterations),
                "test_interval": self.test_interval.get(net, cfg.test_interval),
                "limit_bytes": self.limits.get(net, cfg.limit),
                "seed": cfg.seed if self.seed is None else self.seed}


def _caffe_root() -> Path:
    """``third_party/caffe`` under :func:`.reproduce.local_root`."""
    return local_root() / "third_party" / "caffe"


def default_pycaffe() -> Path:
    """``$UCUDNN_PYCAFFE``, else ``third_party/caffe/src/python`` (:func:`_caffe_root`)."""
    env = os.environ.get("UCUDNN_PYCAFFE")
    return Path(env) if env else _caffe_root() / "src" / "python"


def default_caffe_build() -> Path:
    env = os.environ.get("UCUDNN_CAFFE_BUILD")
    return Path(env) if env else _caffe_root() / "build"


def check_options(opts: Options) -> None:
    """Refuse what cannot run, naming the option."""
    for net in opts.nets:
        _config(net)
        for s in opts.net_settings(net):
            st = SETTINGS.get(s)
            if st is None:
                raise TrainingError(f"--settings: unknown setting {s!r} (expected one of "
                                    f"{', '.join(n for n, x in SETTINGS.items() if x.available)})")
            if not st.available:
                raise TrainingError(f"--settings: {s}: {st.why_not}")
            if opts.mode == "cpu" and not st.stock:
                raise TrainingError(f"--settings: {s} needs a GPU (the CPU mode runs Caffe's "
                                    "own convolution, engine CAFFE: only stock, stock-rerun)")
        p = opts.plan(net)
        for field, option in (("iterations", "--iterations"),
                              ("test_interval", "--test-interval"), ("batch", "batch")):
            if not isinstance(p[field], int) or p[field] < 1:
                raise TrainingError(f"{option}: must be a positive integer, got {p[field]!r}")
        if p["limit_bytes"] < 0:
            raise TrainingError(f"--limit: must not be negative, got {p['limit_bytes']}")
    if "digits" in opts.nets:
        _need_sklearn()
    pycaffe = Path(opts.pycaffe or default_pycaffe())
    if not (pycaffe / "caffe" / "__init__.py").is_file():
        raise TrainingError(f"--pycaffe: no pycaffe at {pycaffe} (a folder holding caffe/"
                            "__init__.py; scripts/gpu_node.sh setup or scripts/build_caffe.sh "
                            "builds it; $UCUDNN_PYCAFFE sets the default)")
    if opts.caffe_build is not None and not Path(opts.caffe_build).is_dir():
        raise TrainingError(f"--caffe-build: {opts.caffe_build} is not a folder")


def _child_env(opts: Options, records: Optional[Path]) -> Dict[str, str]:
    pycaffe = Path(opts.pycaffe or default_pycaffe()).resolve()
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(pycaffe), str(PACKAGE_ROOT)]
                                      + [p for p in sys.path if p])
    # Caffe's warnings and errors (its per-layer set-up lines would make the logs large);
    # ucudnn's own lines (Python logging) and plan records in full
    e.update({"GLOG_logtostderr": "1", "GLOG_minloglevel": "1", "UCUDNN_LOG": "INFO"})
    e.update(STRICT_FP32_ENV)
    build = Path(opts.caffe_build or default_caffe_build())
    if (build / "lib").is_dir():
        e["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str((build / "lib").resolve())] + [p for p in e.get("LD_LIBRARY_PATH", "")
                                                .split(os.pathsep) if p])
    e.pop("UCUDNN_RECORDS", None)
    if records is not None:
        from ..caffe.records import ENV as RECORDS_ENV
        # absolute: the child runs in the prototxt folder (its solver's relative paths)
        e[RECORDS_ENV] = str(Path(records).resolve())
    return e


def _python() -> List[str]:
    return [sys.executable] + (["-P"] if getattr(sys.flags, "safe_path", False) else [])


def _probe(opts: Options) -> dict:
    """Import pycaffe in a child once (its versions, or an error naming --pycaffe)."""
    spec = {"probe": True, "pycaffe": str(Path(opts.pycaffe or default_pycaffe()).resolve())}
    with tempfile.TemporaryDirectory() as tmp:
        sp = Path(tmp) / "probe.json"
        sp.write_text(json.dumps(spec), encoding="utf-8")
        r = subprocess.run(_python() + ["-m", "ucudnn.experiments.training", "--child",
                                        str(sp)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=_child_env(opts, None), timeout=300)
        res = Path(tmp) / "probe.out.json"
        if r.returncode != 0 or not res.is_file():
            raise TrainingError(f"--pycaffe: cannot import caffe from {spec['pycaffe']}: "
                                + (r.stdout.strip().splitlines() or ["(no output)"])[-1])
        return json.loads(res.read_text(encoding="utf-8"))


def _fingerprint(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def run(opts: Options, say: Callable[[str], None] = print) -> dict:
    """Train every (net, setting) that has no matching result in ``opts.out`` yet (or all with
    ``force``), then write curves.csv, metadata.json, the summary and the figure from every run
    there. Returns the metadata."""
    from ..caffe.proto import load_caffe_pb2, write_net
    check_options(opts)
    out = Path(opts.out)
    for d in ("prototxt", "logs", "runs"):
        (out / d).mkdir(parents=True, exist_ok=True)
    probe = _probe(opts)
    say(f"ucudnn training: pycaffe {probe.get('caffe_version')} from {probe.get('pycaffe')}"
        + (f" (stubbed: {', '.join(probe['stubbed'])})" if probe.get("stubbed") else ""))
    pb2 = load_caffe_pb2()
    engine = "CAFFE" if opts.mode == "cpu" else None
    failed = []
    with tempfile.TemporaryDirectory(prefix="ucudnn-training-") as weights_dir:
        for net in opts.nets:
            p = opts.plan(net)
            base = base_net(pb2, net, p["batch"])
            settings = opts.net_settings(net)
            # stock first: the others compare their final weights with its
            settings = sorted(settings, key=lambda s: (not SETTINGS[s].stock, settings.index(s)))
            for setting in settings:
                stem = f"{net}_{setting}"
                model = out / "prototxt" / f"{stem}.prototxt"
                write_net(variant(pb2, base, setting, p["limit_bytes"], engine=engine,
                                  cache_path=opts.cache_path), str(model))
                solver = out / "prototxt" / f"{stem}.solver.prototxt"
                stext = solver_text(_config(net), model.name, p["iterations"], p["seed"],
                                    opts.mode)
                solver.write_text(stext, encoding="utf-8")
                key = _fingerprint(model.read_text(encoding="utf-8"), stext, json.dumps(p),
                                   opts.mode)
                run_json = out / "runs" / net / f"{setting}.json"
                prior = _load_json(run_json)
                if (not opts.force and prior and prior.get("status") == "ok"
                        and prior.get("fingerprint") == key):
                    say(f"{net}/{setting}: done before ({run_json}), kept")
                    continue
                t0 = time.perf_counter()
                rec = _run_child(opts, net, setting, p, model, solver, run_json, key,
                                 Path(weights_dir))
                if rec["status"] != "ok":
                    failed.append(f"{net}/{setting}")
                say(f"{net}/{setting}: {_run_line(rec)} ({time.perf_counter() - t0:.1f} s)")
    meta = regenerate(out, opts=opts, probe=probe, say=say)
    meta["failed"] = failed
    return meta


def _load_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _run_line(rec: dict) -> str:
    if rec["status"] != "ok":
        return f"FAILED: {rec.get('error')}"
    curve = rec["curve"]
    acc = [a for _, _, a in curve if a is not None]
    k = rec.get("kernels") or {}
    split = sum(1 for v in k.values() if v.get("split"))
    return (f"loss {curve[0][1]:.4f} -> {curve[-1][1]:.4f}, held-out accuracy "
            f"{100 * acc[-1]:.2f} %" if acc else "") + (
        f", {split}/{len(k)} kernels split" if k else "")


def _run_child(opts: Options, net: str, setting: str, p: dict, model: Path, solver: Path,
               run_json: Path, key: str, weights_dir: Path) -> dict:
    out = Path(opts.out)
    log = out / "logs" / f"{net}_{setting}.log"
    records = out / "logs" / f"{net}_{setting}.records.jsonl"
    if records.exists():
        records.unlink()
    run_json.parent.mkdir(parents=True, exist_ok=True)
    spec = {"net": net, "setting": setting, "solver": solver.name, "workdir": str(
        solver.parent.resolve()), "mode": opts.mode, "gpu": opts.gpu, **p,
        "pycaffe": str(Path(opts.pycaffe or default_pycaffe()).resolve()),
        "out": str(run_json.resolve()), "weights": str(weights_dir / f"{net}_{setting}.npz"),
        "reference_weights": str(weights_dir / f"{net}_stock.npz")}
    spec_path = weights_dir / f"{net}_{setting}.spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    if run_json.exists():
        run_json.unlink()
    cmd = _python() + ["-m", "ucudnn.experiments.training", "--child", str(spec_path)]
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        try:
            r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True,
                               env=_child_env(opts, records if opts.mode == "gpu" else None),
                               timeout=opts.timeout, cwd=solver.parent)
            rc: Optional[int] = r.returncode
        except subprocess.TimeoutExpired:
            rc = None
    wall = time.perf_counter() - t0
    rec = _load_json(run_json) or {}
    if rc != 0 or rec.get("status") != "ok":
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        why = (f"timed out after {opts.timeout:.0f} s" if rc is None else
               rec.get("error") or f"exit status {rc}")
        rec = {"status": "failed", "error": why, "log_tail": tail}
    else:
        from ..caffe.records import RecordError, read_records
        if opts.mode == "gpu" and not SETTINGS[setting].stock:
            try:
                recs = read_records(records)
            except RecordError as e:
                recs, rec["records_error"] = [], str(e)
            rec["kernels"] = kernel_plans_of(recs)
            ilp = [r for r in recs if r["kind"] == "ilp"]
            if ilp:
                rec["ilp"] = {"budget_bytes": ilp[-1]["budget_bytes"],
                              "solve_s": ilp[-1]["solve_s"],
                              "predicted_ms": ilp[-1].get("predicted_ms")}
            if not rec["kernels"]:
                rec.update(status="failed", error=f"no plan records in {records.name}: the "
                           "net did not run through ucudnn")
    rec.update({"net": net, "setting": setting, "fingerprint": key, "wall_s": round(wall, 3),
                "log": str(log.relative_to(out)), "command": " ".join(map(shlex.quote, cmd)),
                "prototxt": str(model.relative_to(out)),
                "solver": str(solver.relative_to(out)), "environment": dict(STRICT_FP32_ENV)})
    if records.exists():
        rec["records"] = str(records.relative_to(out))
    from ..plan.table import write_text
    write_text(run_json, json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def _runs(out: Path) -> Dict[str, Dict[str, dict]]:
    runs: Dict[str, Dict[str, dict]] = {}
    for p in sorted((out / "runs").glob("*/*.json")):
        rec = _load_json(p)
        if rec and rec.get("net") and rec.get("setting"):
            runs.setdefault(rec["net"], {})[rec["setting"]] = rec
    return runs


def _rows_of(runs: Mapping[str, Mapping[str, dict]]) -> List[Row]:
    rows = []
    for net, per in runs.items():
        for setting, rec in per.items():
            if rec.get("status") == "ok":
                rows += [Row(net, setting, int(i), loss, acc) for i, loss, acc in rec["curve"]]
    return rows


# -------------------------------------------------------------------------- several seeds

#: held-out evaluations averaged at the end of a run (one evaluation of 1,024 samples swings
#: by a few percentage points between neighbouring evaluations of one run)
LAST_EVALUATIONS = 5


def _mean_sd(xs: Sequence[float]) -> Tuple[float, float]:
    import statistics
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _trailing_means(rows: List[Row]) -> Dict[int, float]:
    """{iteration: mean loss of the SMOOTHING iterations ending there} (rows with a loss)."""
    pts = [(r.iteration, r.loss) for r in rows if r.loss is not None]
    return {pts[i - 1][0]: sum(l for _, l in pts[i - SMOOTHING:i]) / SMOOTHING
            for i in range(SMOOTHING, len(pts) + 1)}


def compare_seeds(runs: Mapping[int, Iterable[Row]], reference: str = "stock",
                  control: str = "stock-rerun") -> dict:
    """Note [Training equivalence], several seeds: per net and setting, over the seeds (each
    seed its own initial weights and batch order, every setting of a seed the same ones):

    * ``accuracy``: the mean of the last :data:`LAST_EVALUATIONS` held-out accuracies of each
      seed, their mean and standard deviation over the seeds, the difference of means to
      ``reference`` in percentage points and its standard error;
    * ``seed_mean_loss_diff``: max over iterations of the relative difference between the
      seed-averaged, :data:`SMOOTHING`-iteration trailing-mean loss of the setting and of
      ``reference``;
    * ``paired_loss_diff``: per seed, the max relative difference of trailing means to the
      same seed's ``reference`` run (what one pair of runs shows);
    * ``within_noise``: |difference of mean accuracies| <= 2 standard errors, and the
      seed-mean loss difference no more than 1.5 times ``control``'s (stock against itself:
      the floor that run-to-run noise sets); ``issue_targets``: the issue's bounds applied to
      the seed means (loss within 1 % at every iteration, accuracy within 0.5 pp)."""
    import statistics
    per_seed = {seed: _curves(rows) for seed, rows in runs.items()}
    seeds = sorted(per_seed)
    nets = sorted({net for c in per_seed.values() for net in c})
    out: Dict[str, Any] = {"reference": reference, "control": control, "seeds": seeds,
                           "smoothing": SMOOTHING, "last_evaluations": LAST_EVALUATIONS,
                           "nets": {}}
    for net in nets:
        settings = sorted({s for c in per_seed.values() for s in c.get(net, {})},
                          key=_setting_order)
        have = [s for s in settings if all(s in per_seed[k].get(net, {}) for k in seeds)]
        if reference not in have:
            continue
        stats: Dict[str, dict] = {}
        means: Dict[str, Dict[int, float]] = {}
        trail = {s: [_trailing_means(per_seed[k][net][s]) for k in seeds] for s in have}
        for s in have:
            accs, paired, traj = [], [], trail[s]
            for k, mine, ref in zip(seeds, traj, trail[reference]):
                ev = [r.test_accuracy for r in per_seed[k][net][s] if r.test_accuracy is not None]
                if ev:
                    accs.append(100.0 * statistics.fmean(ev[-LAST_EVALUATIONS:]))
                if s != reference:
                    paired.append(max((_rel(mine[i], ref[i]) for i in mine if i in ref),
                                      default=0.0))
            its = sorted(set.intersection(*(set(t) for t in traj))) if traj else []
            means[s] = {i: statistics.fmean(t[i] for t in traj) for i in its}
            m, sd = _mean_sd(accs) if accs else (None, None)
            stats[s] = {"accuracy_mean_pp": m, "accuracy_sd_pp": sd, "accuracy_per_seed": accs,
                        "paired_loss_diff": paired,
                        "paired_loss_diff_median": statistics.median(paired) if paired else None}
        ref = stats[reference]
        for s in have:
            if s == reference:
                continue
            st = stats[s]
            common = [i for i in means[s] if i in means[reference]]
            st["seed_mean_loss_diff"] = max((_rel(means[s][i], means[reference][i])
                                             for i in common), default=None)
            if st["accuracy_mean_pp"] is not None and ref["accuracy_mean_pp"] is not None:
                k = len(seeds)
                st["accuracy_diff_pp"] = st["accuracy_mean_pp"] - ref["accuracy_mean_pp"]
                st["accuracy_diff_se_pp"] = math.sqrt((st["accuracy_sd_pp"] ** 2
                                                       + ref["accuracy_sd_pp"] ** 2) / k)
        ctl = stats.get(control, {}).get("seed_mean_loss_diff")
        for s in have:
            st = stats[s]
            if s == reference or st.get("accuracy_diff_pp") is None:
                continue
            acc_ok = abs(st["accuracy_diff_pp"]) <= 2.0 * st["accuracy_diff_se_pp"]
            loss_ok = (st["seed_mean_loss_diff"] is not None and ctl is not None
                       and st["seed_mean_loss_diff"] <= 1.5 * ctl) if s != control else True
            st["within_noise"] = bool(acc_ok and loss_ok)
            st["issue_targets"] = bool(st["seed_mean_loss_diff"] is not None
                                       and st["seed_mean_loss_diff"] <= LOSS_TARGET
                                       and abs(st["accuracy_diff_pp"]) <= ACCURACY_TARGET_PP)
        out["nets"][net] = stats
    return out


def format_seeds_summary(summary: dict) -> str:
    """Markdown of :func:`compare_seeds`."""
    ref, ctl = summary["reference"], summary["control"]
    lines = [f"Several seeds ({', '.join(map(str, summary['seeds']))}) against `{ref}`; "
             f"`{ctl}` is stock against itself. Accuracy: mean of each run's last "
             f"{summary['last_evaluations']} held-out evaluations, then over the seeds. Loss: "
             f"{summary['smoothing']}-iteration trailing means, averaged over the seeds "
             "(seed-mean) or compared seed by seed (paired)."]
    for net, stats in summary["nets"].items():
        lines += ["", f"### {net}", "",
                  "| setting | accuracy, mean ± sd (pp) | Δ vs stock (pp) ± se | seed-mean loss "
                  "diff (max) | paired loss diff, per seed | within noise | issue's targets |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for s, st in stats.items():
            acc = (f"{st['accuracy_mean_pp']:.2f} ± {st['accuracy_sd_pp']:.2f}"
                   if st["accuracy_mean_pp"] is not None else "-")
            if s == ref:
                lines.append(f"| {s} | {acc} | reference | - | - | - | - |")
                continue
            d = (f"{st['accuracy_diff_pp']:+.2f} ± {st['accuracy_diff_se_pp']:.2f}"
                 if st.get("accuracy_diff_pp") is not None else "-")
            paired = ", ".join(f"{v:.3f}" for v in st["paired_loss_diff"])
            lines.append(f"| {s} | {acc} | {d} | {_fmt(st.get('seed_mean_loss_diff'), '.2%')} "
                         f"| {paired} | {'yes' if st.get('within_noise') else 'NO'} | "
                         f"{'met' if st.get('issue_targets') else 'NOT met'} |")
    return "\n".join(lines)


def regenerate_seeds(root: Path, say: Callable[[str], None] = print) -> Optional[dict]:
    """seeds_summary.{json,md} from ``root``/seed*/curves.csv (None where there are fewer
    than two seeds)."""
    from ..plan.table import write_text
    root = Path(root)
    runs = {}
    for d in sorted(root.glob("seed*")):
        if d.is_dir() and d.name[4:].isdigit() and (d / "curves.csv").is_file():
            runs[int(d.name[4:])] = read_curves(d / "curves.csv")
    if len(runs) < 2:
        return None
    summary = compare_seeds(runs)
    write_text(root / "seeds_summary.json", json.dumps(_json_safe(summary), indent=1,
                                                       sort_keys=True, allow_nan=False) + "\n")
    text = format_seeds_summary(summary)
    write_text(root / "seeds_summary.md", text + "\n")
    say(text)
    return summary


def regenerate(out: Path, *, opts: Optional[Options] = None, probe: Optional[dict] = None,
               say: Callable[[str], None] = print, from_csv: bool = False) -> dict:
    """Write curves.csv (unless ``from_csv``: then read it), summary.json, summary.md and
    training_curves.png, and (after a run) metadata.json, from what ``out`` holds. Returns the
    metadata (or the summary for ``from_csv``)."""
    from ..plan.table import write_text
    out = Path(out)
    runs = _runs(out)
    if from_csv:
        rows = read_curves(out / "curves.csv")
    else:
        rows = _rows_of(runs)
        write_curves(out / "curves.csv", rows)
    if not rows:
        raise TrainingError(f"--out: no training curves in {out}")
    summary = compare(rows, plans=runs)
    summary["failed"] = {f"{net}/{setting}": rec.get("error")
                         for net, per in runs.items() for setting, rec in per.items()
                         if rec.get("status") != "ok"}
    write_text(out / "summary.json", json.dumps(_json_safe(summary), indent=1,
                                                sort_keys=True, allow_nan=False,
                                                default=str) + "\n")
    text = format_summary(summary)
    write_text(out / "summary.md", text + "\n")
    try:
        plot_curves(rows, str(out / "training_curves.png"))
    except ImportError as e:
        say(f"no figure (matplotlib: {e}; pip install 'ucudnn[plot]')")
    say(text)
    if from_csv or opts is None:
        return summary
    meta = _metadata(opts, probe or {}, runs)
    # runs of earlier invocations into the same folder keep how they were started
    prior = _load_json(out / "metadata.json") or {}
    this = {k: meta.get(k) for k in ("command", "date", "host", "ucudnn_commit", "mode")}
    this["nets"] = {n: opts.net_settings(n) for n in opts.nets}
    meta["invocations"] = list(prior.get("invocations") or []) + [this]
    for net, entry in meta["nets"].items():
        old = (prior.get("nets") or {}).get(net) or {}
        for k in ("run_with", "solver"):
            if k not in entry and k in old:
                entry[k] = old[k]
    write_text(out / "metadata.json", json.dumps(meta, indent=1, sort_keys=True,
                                                 default=str) + "\n")
    return meta


def _json_safe(v):
    """``v`` with non-finite floats as the strings "inf", "-inf", "nan" (strict JSON)."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def _caffe_build_facts(build: Path) -> dict:
    facts: Dict[str, Any] = {"build": str(build)}
    patches = caffe_patches(build)
    if patches is not None:
        facts["patches"] = patches
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        for line in cache.read_text(encoding="utf-8", errors="replace").splitlines():
            k, _, v = line.partition("=")
            name = k.split(":")[0]
            if name in ("USE_UCUDNN", "USE_CUDNN", "CUDNN_VERSION", "CMAKE_BUILD_TYPE",
                        "UCUDNN_PYTHON", "python_version"):
                facts[name] = v
    return facts


def _metadata(opts: Options, probe: dict, runs: Mapping[str, Mapping[str, dict]]) -> dict:
    from .. import __version__
    from ..vocab import CAFFE_COMMIT
    meta: Dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": platform.python_version(),
        "ucudnn_version": __version__, "ucudnn_commit": git("rev-parse", "HEAD"),
        "ucudnn_dirty": (bool(git("status", "--porcelain", "--untracked-files=no"))
                         if CHECKOUT else None),
        "mode": opts.mode, "environment": dict(STRICT_FP32_ENV),
        "strict_fp32": "every setting's process runs with NVIDIA_TF32_OVERRIDE=0 (no TF32 in "
                       "cuDNN or cuBLAS); ucudnn settings with math FMA; stock with cuDNN's "
                       "default math (Note [Training equivalence])",
        "bench_repeats": BENCH_REPEATS, "caffe_commit": CAFFE_COMMIT,
        "bench_cache": opts.cache_path or os.environ.get("UCUDNN_CACHE") or "the core's default",
        "pycaffe": probe, "caffe_build": _caffe_build_facts(
            Path(opts.caffe_build or default_caffe_build())),
        "settings": {n: dataclasses.asdict(s) for n, s in SETTINGS.items()},
        "nets": {}, "note": "Note [Training equivalence] in ucudnn/experiments/training.py",
    }
    if opts.argv is not None:
        meta["command"] = " ".join(shlex.quote(a) for a in opts.argv)
    if opts.mode == "gpu":
        try:
            from ..measure.bench import device_info
            meta["device"] = device_info()
        except Exception as e:       # noqa: BLE001 - recorded, not fatal
            meta["device"] = {"error": str(e)}
    for net in sorted(runs):
        cfg = NETS.get(net)
        entry: Dict[str, Any] = {"config": cfg.to_json() if cfg else None}
        if net in opts.nets:
            p = opts.plan(net)
            entry["run_with"] = p
            entry["solver"] = solver_text(cfg, f"{net}_SETTING.prototxt", p["iterations"],
                                          p["seed"], opts.mode)
        hashes = {}
        entry["runs"] = {}
        for setting, rec in sorted(runs[net].items(), key=lambda kv: _setting_order(kv[0])):
            keep = {k: rec.get(k) for k in (
                "status", "error", "wall_s", "log", "records", "prototxt", "solver", "command",
                "environment", "kernels", "ilp", "initial_weights_sha256",
                "final_weights_sha256", "final_weights_rel_diff", "data_sha256",
                "caffe_version", "numpy_version", "stubbed", "iterations", "batch",
                "limit_bytes", "seed", "test_interval", "train_s", "setup_s") if k in rec}
            entry["runs"][setting] = keep
            if rec.get("initial_weights_sha256"):
                hashes[setting] = rec["initial_weights_sha256"]
            if SETTINGS.get(setting) and SETTINGS[setting].micro_batched and rec.get(
                    "status") == "ok" and rec.get("kernels") is not None:
                if not any(k.get("split") for k in rec["kernels"].values()):
                    entry.setdefault("warnings", []).append(
                        f"{setting}: no kernel split the batch at this limit; a smaller "
                        "--limit makes the plans micro-batched")
            maths = {k.get("math") for k in (rec.get("kernels") or {}).values()}
            if maths - {"fma"}:
                entry.setdefault("warnings", []).append(
                    f"{setting}: kernels planned with math {sorted(map(str, maths))}, not fma")
        entry["initial_weights_identical"] = len(set(hashes.values())) <= 1 if hashes else None
        meta["nets"][net] = entry
    return meta


# --------------------------------------------------------------------------------- child

def _stub_missing_image_modules() -> List[str]:
    """pycaffe's ``caffe.io`` imports scikit-image (and SciPy) for image loading and resizing,
    which training from arrays never calls; where they are missing, stand-ins whose functions
    raise let ``import caffe`` work. Returns what was stubbed (recorded in the metadata)."""
    import importlib.util
    import types
    stubbed = []

    def unavailable(*_a, **_k):
        raise ImportError("stubbed by ucudnn training: not installed")

    if importlib.util.find_spec("skimage") is None:
        sk, sk_io, sk_tr = (types.ModuleType(n) for n in ("skimage", "skimage.io",
                                                          "skimage.transform"))
        sk.img_as_float = sk_io.imread = sk_io.imsave = sk_tr.resize = unavailable
        sk.io, sk.transform = sk_io, sk_tr
        sys.modules.update({"skimage": sk, "skimage.io": sk_io, "skimage.transform": sk_tr})
        stubbed.append("skimage")
    if importlib.util.find_spec("scipy") is None:
        sp, nd = types.ModuleType("scipy"), types.ModuleType("scipy.ndimage")
        nd.zoom = unavailable
        sp.ndimage = nd
        sys.modules.update({"scipy": sp, "scipy.ndimage": nd})
        stubbed.append("scipy")
    return stubbed


def _import_caffe(path: str):
    if path not in sys.path:
        sys.path.insert(0, path)
    stubbed = _stub_missing_image_modules()
    import caffe
    return caffe, stubbed


def _weights(net) -> List[Tuple[str, Any]]:
    return [(f"{name}/{i}", b.data) for name, blobs in net.params.items()
            for i, b in enumerate(blobs)]


def _weights_sha256(net) -> str:
    h = hashlib.sha256()
    for name, a in _weights(net):
        h.update(name.encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _evaluate(net, data: Dataset) -> float:
    """Held-out accuracy of the current weights: the training net's forward pass on the
    held-out batches (no dropout or batch norm in these nets, so it is the TEST phase's
    forward), the mean of its Accuracy top over equal batches."""
    accs = []
    for x, y in data.test_batches():
        net.blobs["data"].data[...] = x
        net.blobs["label"].data[...] = y
        net.forward()
        accs.append(float(net.blobs["accuracy"].data))
    return sum(accs) / len(accs)


def _train(spec: dict) -> dict:
    import numpy as np
    caffe, stubbed = _import_caffe(spec["pycaffe"])
    rec: Dict[str, Any] = {"caffe_version": getattr(caffe, "__version__", None),
                           "numpy_version": np.__version__, "stubbed": stubbed}
    t0 = time.perf_counter()
    data = dataset(spec["net"], spec["batch"], spec["seed"])
    rec["data_sha256"] = data.fingerprint()
    if spec["mode"] == "gpu":
        caffe.set_device(int(spec["gpu"]))
        caffe.set_mode_gpu()
    else:
        caffe.set_mode_cpu()
    os.chdir(spec["workdir"])
    solver = caffe.get_solver(spec["solver"])
    net = solver.net
    rec["initial_weights_sha256"] = _weights_sha256(net)
    rec["setup_s"] = round(time.perf_counter() - t0, 3)
    n, interval = int(spec["iterations"]), int(spec["test_interval"])
    curve = []
    t1 = time.perf_counter()
    for it in range(n + 1):
        acc = _evaluate(net, data) if it % interval == 0 or it == n else None
        x, y = data.train_batch(it)
        net.blobs["data"].data[...] = x
        net.blobs["label"].data[...] = y
        if it < n:
            solver.step(1)
        else:
            net.forward()            # the loss of the final weights, no update
        loss = float(net.blobs["loss"].data)
        curve.append([it, loss, acc])
        if not math.isfinite(loss):
            rec.update(status="failed", error=f"loss {loss} at iteration {it}", curve=curve)
            return rec
    rec["train_s"] = round(time.perf_counter() - t1, 3)
    rec["curve"] = curve
    rec["final_weights_sha256"] = _weights_sha256(net)
    w = dict(_weights(net))
    np.savez(spec["weights"], **{k.replace("/", "__"): v for k, v in w.items()})
    ref = spec.get("reference_weights")
    if ref and os.path.exists(ref) and os.path.abspath(ref) != os.path.abspath(
            spec["weights"]):
        with np.load(ref) as r:
            num = sum(float(np.sum((w[k].astype(np.float64)
                                    - r[k.replace("/", "__")].astype(np.float64)) ** 2))
                      for k in w)
            den = sum(float(np.sum(r[k.replace("/", "__")].astype(np.float64) ** 2))
                      for k in w)
        rec["final_weights_rel_diff"] = math.sqrt(num / den) if den else None
    rec.update({k: spec[k] for k in ("iterations", "batch", "limit_bytes", "seed",
                                     "test_interval")})
    rec["status"] = "ok"
    return rec


def child_main(spec_path: str) -> int:
    """One setting's process (or, with ``probe``, an import check of pycaffe): reads the spec,
    trains, writes its record as JSON to ``spec['out']``."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    if spec.get("probe"):
        caffe, stubbed = _import_caffe(spec["pycaffe"])
        import numpy as np
        res = {"pycaffe": spec["pycaffe"], "caffe_version": getattr(caffe, "__version__", None),
               "caffe_module": getattr(caffe, "__file__", None), "numpy": np.__version__,
               "stubbed": stubbed, "python": platform.python_version()}
        try:
            import sklearn
            res["scikit_learn"] = sklearn.__version__
        except ImportError:
            res["scikit_learn"] = None
        Path(spec_path).with_name("probe.out.json").write_text(json.dumps(res),
                                                               encoding="utf-8")
        return 0
    try:
        rec = _train(spec)
    except Exception as e:       # noqa: BLE001 - the parent reads the error from the record
        traceback.print_exc()
        rec = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    Path(spec["out"]).write_text(json.dumps(rec), encoding="utf-8")
    sys.stdout.flush()
    sys.stderr.flush()
    # pycaffe's exit tears down Caffe's nets while the interpreter finalises (Note [ucudnn in
    # Caffe], Shutdown); the record is written, so leave at once
    os._exit(0 if rec.get("status") == "ok" else 1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child_main(sys.argv[2]))
    print("usage: python -m ucudnn.experiments.training --child SPEC.json "
          "(the runner's child; use `ucudnn training`)", file=sys.stderr)
    sys.exit(2)
