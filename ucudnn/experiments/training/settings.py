"""The settings a training run compares, and the prototxt each one trains.

A setting (:class:`Setting`, the table :data:`SETTINGS`) is one way of computing the
convolutions: Caffe's own cuDNN layer, or ucudnn with a policy and an optimizer.
:func:`variant` writes a setting into a net as its net-wide ``ucudnn_param``. Also here:
:class:`TrainingError`, the error of every module of the experiment.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

from ...caffe.params import set_param
from ...vocab import InputError

#: ucudnn's benchmark repeats per micro-batch size (ucudnn_param.benchmark_repeats): plans only
#: need to be valid, not the fastest, for this experiment; one Find keeps `all` affordable.
BENCH_REPEATS = 1


class TrainingError(InputError):
    """Options or files the experiment cannot run with; the message names the option."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One way of running the convolutions. ``policy`` None: stock Caffe (no ucudnn_param).
    ``layout``: the net's activations (``ucudnn_param.layout``, Note [NHWC in Caffe] in
    Caffe's ``include/caffe/util/layout.hpp``). ``available`` False: listed so that the table
    shows it, refused when asked for (``why_not``)."""
    name: str
    policy: Optional[str]
    optimizer: Optional[str]
    about: str
    layout: str = "NCHW"
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
            "that every layer reuses (optimizer SHARED), power-of-two micro-batches "
            "(math FMA)"),
    Setting("shared-nhwc", "powerOfTwo", "shared", "shared, with the net's activations stored "
            "NHWC (ucudnn_param.layout: NHWC): convolutions, pooling and the elementwise "
            "layers in NHWC, conversions where a blob meets another layer (math FMA)",
            layout="NHWC"),
    # A setting that Caffe cannot run yet goes here with available=False and why_not: listed
    # in --help, refused when asked for.
)}

#: Settings run when ``--settings`` is not given. CIFAR-10 `all` at batch 1024 benchmarks 1024
#: micro-batch sizes per kernel with an empty cache (minutes), so it is left out by default
#: there; ``--nets cifar10 --settings all`` adds it to the same --out.
DEFAULT_SETTINGS: Dict[str, Tuple[str, ...]] = {
    "digits": ("stock", "stock-rerun", "undivided", "powerOfTwo", "ilp", "shared",
               "shared-nhwc", "all"),
    "cifar10": ("stock", "stock-rerun", "undivided", "powerOfTwo", "ilp", "shared",
                "shared-nhwc"),
}


def get_setting(name: str) -> Setting:
    """The setting called ``name``; an unknown or unavailable one is refused, naming
    ``--settings``."""
    s = SETTINGS.get(name)
    if s is None:
        raise TrainingError(f"--settings: unknown setting {name!r} (expected one of "
                            f"{', '.join(n for n, x in SETTINGS.items() if x.available)})")
    if not s.available:
        raise TrainingError(f"--settings: {name}: {s.why_not}")
    return s


def setting_order(name: str) -> int:
    """Where ``name`` sorts: the order of :data:`SETTINGS`, unknown names last."""
    names = list(SETTINGS)
    return names.index(name) if name in names else len(names)


#: layer type -> its parameter with an ``engine`` (DEFAULT is cuDNN in a cuDNN build)
_ENGINE_FIELDS = {"Convolution": "convolution_param", "Pooling": "pooling_param",
                  "ReLU": "relu_param", "Softmax": "softmax_param",
                  "SoftmaxWithLoss": "softmax_param", "Sigmoid": "sigmoid_param",
                  "TanH": "tanh_param", "LRN": "lrn_param"}


def variant(pb2, net, setting: str, limit: int, *, engine: Optional[str] = None,
            cache_path: Optional[str] = None):
    """A copy of ``net`` with the net-wide ``ucudnn_param`` of ``setting`` (none for stock):
    its policy and optimizer, ``workspace_limit`` = ``limit`` (the ILP's budget: limit x
    kernels, ``total_workspace`` unset), ``math: FMA``, :data:`BENCH_REPEATS`, and its layout
    where that is not NCHW. ``engine``: set
    the engine of every layer that has one (``CAFFE`` for a CPU run: no cuDNN layers)."""
    s = get_setting(setting)
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
        fields = {"policy": s.policy, "optimizer": s.optimizer, "limit": limit, "math": "fma",
                  "repeats": BENCH_REPEATS}
        if cache_path is not None:
            fields["cache_path"] = cache_path
        if s.layout != "NCHW":
            fields["layout"] = s.layout
        set_param(out.ucudnn_param, fields)
    return out
