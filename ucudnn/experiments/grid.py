"""The points of the paper's grid (``ucudnn reproduce``): which runs, in which order, and how
a point is named and sorted."""
from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Sequence, Tuple

from ..vocab import ENGINES, LAYOUTS, UNLIMITED, format_size

NETS = ("alexnet", "resnet18", "cifar10", "resnet50", "resnet50@256")
POLICIES = ("undivided", "powerOfTwo", "all")
LIMITS = ("8MiB", "64MiB", "512MiB")
#: Settings in the order tables and figures show them within a limit. ``caffe``: stock
#: Caffe; ``im2col``: stock Caffe with every convolution's ``engine: CAFFE`` (Note [im2col
#: points]); ``shared``: the shared arena at limit x kernels; ``shared_stock``: the shared
#: arena at the workspace memory stock Caffe holds, measured (Note [Shared arena at stock
#: memory]).
SETTINGS = ("caffe", "im2col", "unlimited", *POLICIES, "ilp", "shared", "shared_stock")
#: Settings without ucudnn_param: Caffe's own convolutions, nothing planned.
STOCK_SETTINGS = ("caffe", "im2col")
#: Settings planned with one budget for the net (the ILP's policy, ``--ilp-policy``).
NETWIDE = ("ilp", "shared", "shared_stock")
#: The fusions of a Caffe net (NetParameter.fusion: caffe_patch/0010),
#: each on by default in Caffe.
FUSIONS = ("eltwise_relu", "batch_norm_relu", "split_sum", "batch_norm_eltwise")

# Note [Shared arena at stock memory]
#     The shared arena is also run at the workspace memory that stock Caffe holds,
#     measured, so that the two compare at equal memory. Stock Caffe writes no plan records, so its workspace is measured as the
#     difference of peak GPU memory (Note [Measured memory]): a ucudnn point of the same net
#     and BatchNorm engine whose workspace is known from its plan records (undivided at the
#     smallest limit: the least workspace) gives the net's memory without workspace,
#     ``base = peak - workspace``; stock's workspace is ``peak(stock) - base``. The
#     ``shared_stock`` point runs after both (last of its net) with that budget as
#     ``total_workspace`` (its ``limit_bytes``). The ucudnn process holds a little more than
#     stock besides workspace (the core's cuDNN handle), so the estimate errs low, which only
#     makes the comparison harder for the arena.
#: What results of schema 1 (before 2026-12) stored as the limit of ``unlimited`` points.
LEGACY_UNLIMITED = 1 << 40
#: BatchNorm engines (Note [BatchNorm engines]): ``caffe`` is BVLC's layer -- the paper's
#: baseline and every point's default --, ``cudnn`` and ``fused`` the engines of
#: caffe_patch/0009 (cuDNN's batch normalization; its own kernels, its default).
BN_ENGINES = ("caffe", "cudnn", "fused")

# Note [im2col points]
#     BVLC Caffe ran dilated convolutions with im2col (``ConvolutionLayer``), as the cuDNN of
#     its day had no dilation; the patched layer factory gives them to the cuDNN layer, and so
#     to ucudnn (Note [Dilated convolutions on cuDNN] in caffe_patch/0002's layer_factory.cpp).
#     ``reproduce --im2col`` adds a point per net that runs it as BVLC did, and more: every
#     Convolution layer with ``engine: CAFFE`` and no ucudnn_param, measured as the other
#     points are (``caffe time`` medians over --repeats processes in rounds, NVML's peak
#     memory). It needs the patched Caffe's binary, so predicted grids have no such point.


# Note [BatchNorm engines]
#     caffe_patch/0009 runs BatchNorm in one pass each way, through cuDNN (``engine: CUDNN``)
#     or its own kernels (``engine: FUSED``), and folds the Scale layer after it into that
#     pass. It is not part of the paper's method, so the paper's grid keeps BVLC's layer
#     (``batch_norm_param { engine: CAFFE }`` written into every variant when the binary has
#     that patch; without it that is Caffe's only engine) and a net with BatchNorm layers gains
#     the same points again per other engine asked for. Their key ends in ``/cudnn-bn`` or
#     ``/fused-bn``; the keys of ``caffe`` points are those that results written before the
#     BatchNorm engines used, so they resume. Speedups compare within one engine (undivided at
#     the same limit and engine).


# Note [Nets at another batch]
#     A grid net is a shipped prototxt's name (prototxt/NAME.prototxt, at the batch it is
#     written for) or ``NAME@BATCH``: the same prototxt with its input's batch set to BATCH
#     (:func:`ucudnn.experiments.caffe_run.set_batch`; PyTorch's side runs at that batch too).
#     ResNet-50 v1 is in the grid at 128 (its file) and at 256. Its name keys the points, so
#     ``resnet50`` and ``resnet50@256`` are two nets of the grid.


def parse_net(net: str) -> Tuple[str, Optional[int]]:
    """``(prototxt name, batch or None)`` of a grid net (Note [Nets at another batch]);
    ValueError naming the net where BATCH is not a positive integer."""
    name, sep, batch = net.partition("@")
    if not sep:
        return net, None
    if not (name and batch.isdigit() and int(batch) > 0):
        raise ValueError(f"net {net!r}: expected NAME or NAME@BATCH with a positive batch")
    return name, int(batch)


def is_unlimited(limit: Optional[int]) -> bool:
    """``limit`` means no limit: :data:`ucudnn.vocab.UNLIMITED`, or the 1 TiB old results
    used."""
    return limit is not None and limit >= LEGACY_UNLIMITED


def limit_label(limit: Optional[int]) -> str:
    """``64.0MiB``, ``unlimited``, or ``-`` for none (stock Caffe)."""
    if limit is None:
        return "-"
    return "unlimited" if is_unlimited(limit) else format_size(limit)


@dataclasses.dataclass(frozen=True)
class Point:
    """One run of one network: ``setting`` is a policy, ``ilp``, ``unlimited``, ``caffe``
    (stock Caffe, no ucudnn_param) or ``im2col`` (Note [im2col points]); ``bn`` the BatchNorm engine (Note [BatchNorm engines]);
    ``engines`` the families of convolution choices ucudnn plans with (Note [Choices] in
    ucudnn/vocab.py; stock Caffe's points: ``legacy``, cuDNN's algorithms); ``layout`` the
    activations' layout of a ucudnn point (its net's ``ucudnn_param.layout``, Note [NHWC in
    Caffe] in caffe_patch/0011; stock Caffe's points: NCHW)."""
    net: str
    setting: str
    limit: Optional[int] = None
    bn: str = "caffe"
    engines: str = "legacy"
    layout: str = "NCHW"

    @property
    def key(self) -> str:
        lim = ("-" if self.limit is None or is_unlimited(self.limit)
               or self.setting == "shared_stock" else format_size(self.limit))
        return (f"{self.net}/{self.setting}/{lim}"
                + ("" if self.bn == "caffe" else f"/{self.bn}-bn")
                + ("" if self.engines == "legacy" else f"/{self.engines}-engines")
                + ("" if self.layout == "NCHW" else f"/{self.layout.lower()}"))

    @property
    def policy(self) -> Optional[str]:
        if self.setting in POLICIES:
            return self.setting
        return {"unlimited": "undivided", "caffe": None, "im2col": None}.get(self.setting)

    @property
    def stem(self) -> str:
        """File name stem of the point's prototxt and logs."""
        return self.key.replace("/", "_")


def grid(nets: Sequence[str], limits: Sequence[int], policies: Sequence[str] = POLICIES, *,
         ilp: bool = True, unlimited: bool = True, stock: bool = True,
         shared: bool = True, bn_engines: Sequence[str] = ("caffe",),
         has_batchnorm: Callable[[str], bool] = lambda net: False,
         engines: Sequence[str] = ("legacy",),
         layouts: Sequence[str] = ("NCHW",), im2col: bool = False) -> List[Point]:
    """The points, in the order they run: per network the cheap settings first, so that
    an interrupted run has the baselines; the BatchNorm engines other than ``caffe`` only for
    nets that ``has_batchnorm`` (Note [BatchNorm engines]); ucudnn's points once per family
    setting in ``engines`` and layout in ``layouts``, stock Caffe's once, and with ``im2col``
    Caffe's im2col convolutions once (Note [im2col points])."""
    points: List[Point] = []
    for net in nets:
        for bn in bn_engines:
            if bn != "caffe" and not has_batchnorm(net):
                continue
            if stock:
                points.append(Point(net, "caffe", bn=bn))
            if im2col:
                points.append(Point(net, "im2col", bn=bn))
            for eng, lay in ((e, l) for e in engines for l in layouts):
                kw = dict(bn=bn, engines=eng, layout=lay)
                if unlimited:
                    points.append(Point(net, "unlimited", UNLIMITED, **kw))
                for limit in limits:
                    points += [Point(net, p, limit, **kw) for p in policies]
                    if ilp:
                        points.append(Point(net, "ilp", limit, **kw))
                    if shared:
                        points.append(Point(net, "shared", limit, **kw))
                if shared and stock and "undivided" in policies and limits:
                    points.append(Point(net, "shared_stock", None, **kw))
    return points


def bn_engine(rec: dict) -> str:
    """A point record's BatchNorm engine (records written before the BatchNorm engines: ``caffe``)."""
    return rec.get("bn_engine") or "caffe"


def engines_of(rec: dict) -> str:
    """A point record's families of choices (records from before the graph family: ``legacy``)."""
    return rec.get("engines") or "legacy"


def layout_of(rec: dict) -> str:
    """A point record's activations' layout (records from before caffe_patch/0011: NCHW)."""
    return rec.get("layout") or "NCHW"


def point_of(rec: dict) -> Point:
    """The :class:`Point` a point record measured."""
    return Point(rec["net"], rec["setting"], rec.get("limit_bytes"), bn_engine(rec),
                 engines_of(rec), layout_of(rec))


def point_order(rec: dict) -> tuple:
    """Sort key of a point record within its network: stock Caffe and unlimited first, then
    by limit and setting (tables and figures)."""
    lim = rec.get("limit_bytes") or 0
    first = is_unlimited(lim) or rec["setting"] == "caffe"

    def rank(known: Sequence[str], value: str) -> int:   # unknown values last
        return known.index(value) if value in known else len(known)
    return (rank(BN_ENGINES, bn_engine(rec)), rank(ENGINES, engines_of(rec)),
            rank(LAYOUTS, layout_of(rec)), 0 if first else 1, lim,
            rank(SETTINGS, rec["setting"]))
