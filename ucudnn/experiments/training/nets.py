"""The experiment's nets, their solvers and the data they train on.

Two nets (:data:`NETS`, each a :class:`NetConfig`: batch, iterations, workspace limit, solver):
Caffe's LeNet on scikit-learn's handwritten digits (:func:`digits_data`), and the shipped
CIFAR-10 quick net, fed by an ``Input`` layer, on a learnable synthetic set
(:func:`synthetic_data`). :func:`base_net` gives a net's ``NetParameter`` without any
ucudnn_param, :func:`solver_text` its solver. A :class:`Dataset`'s batches are a function of the
iteration only (:meth:`Dataset.train_batch`), so every setting trains on the same ones.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ...caffe.proto import parse_net, read_net
from ...paths import nets_dir as default_nets_dir
from .settings import TrainingError

PIP_HINT = "pip install 'ucudnn[training]' (scikit-learn)"


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


def base_net(pb2, name: str, batch: Optional[int] = None, nets_dir: Optional[Path] = None):
    """The ``NetParameter`` of experiment net ``name`` without any ucudnn_param, fed by an
    ``Input`` layer with tops ``data`` and ``label`` at ``batch`` (default: the net's), and with
    an ``Accuracy`` top ``accuracy`` and a loss top ``loss``."""
    cfg = net_config(name)
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
    the child on the training net, Note [Training equivalence]), no display or snapshots,
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


def net_config(name: str) -> NetConfig:
    """The :data:`NETS` entry of ``name``; an unknown name is refused, naming ``--nets``."""
    if name not in NETS:
        raise TrainingError(f"--nets: unknown net {name!r} (expected one of "
                            f"{', '.join(NETS)})")
    return NETS[name]


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


def need_sklearn():
    """``sklearn.datasets``, or an error saying how to install it."""
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
    datasets = need_sklearn()
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
    cfg = net_config(net)
    batch, seed = batch or cfg.batch, cfg.seed if seed is None else seed
    return digits_data(batch, seed) if net == "digits" else synthetic_data(batch, seed)
