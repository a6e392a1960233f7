"""Caffe network definitions (``.prototxt``) without Caffe: Caffe's shape rules over the net.

The text is parsed by protobuf's ``text_format`` into Caffe's ``NetParameter``
(:mod:`ucudnn.caffe.proto`, leniently: fields the schema does not know are skipped). Over its
layers of one phase, :func:`conv_layers` runs Caffe's shape inference and returns a
:class:`~ucudnn.plan.network.LayerSpec` per ``Convolution`` layer; :func:`ucudnn_settings`
gives the ucudnn_param that Caffe's ``Net::Init`` makes of the net's and each layer's.
:func:`load_prototxt` does both for a file (what ``ucudnn plan --prototxt`` uses).

Note [Convolution layers as LayerSpec]
    One Convolution layer is one LayerSpec with Caffe's numbers (Note [Layers, groups and
    counts] in :mod:`ucudnn.plan.network`): ``c`` and ``k`` the layer's total input channels
    and ``num_output``, ``groups`` Caffe's ``group``, and ``count`` the number of bottoms (a
    layer with two bottoms runs its kernels on each, with the same weights).

Note [Backward-data of the first convolution]
    Caffe computes a bottom gradient only where some earlier layer needs it: a blob needs
    backward when the layer producing it has a learnable parameter (``lr_mult`` != 0) or one
    of its bottoms needs backward. Data layers and net inputs need none (unless the net sets
    ``force_backward``), so the first convolution of a net runs no backward-data kernel.
    BatchNorm's statistics are not learnable (Caffe sets their ``lr_mult`` to 0). An explicit
    ``propagate_down`` replaces the inferred need, and ``force_backward`` overrides both, as in
    Caffe's ``Net::Init``. Not modelled: Caffe also skips the backward pass of layers that do
    not contribute to a loss (their kernels are still listed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..plan.layers import LayerSpec
from ..vocab import MATH_MODES, OPTIMIZERS, POLICY_CODES
from .proto import (PrototxtError, check_shared_is_net_wide, check_ucudnn_param,
                    load_caffe_pb2, merged_ucudnn_param,
                    parse_net, read_text)

__all__ = ["PrototxtError", "UcudnnSettings", "PrototxtNet", "parse_net_text", "conv_layers",
           "infer_shapes", "ucudnn_settings", "load_prototxt", "read_prototxt", "merge_shapes"]

Shape = Tuple[int, ...]

_DATA_SOURCES = {"Data", "ImageData", "HDF5Data", "MemoryData", "WindowData", "Python",
                 "VideoData", "AnnotatedData"}
#: shape-preserving layers: top[i] has the shape of bottom[0]
_ELEMENTWISE = {"ReLU", "Sigmoid", "TanH", "Dropout", "LRN", "BatchNorm", "Scale", "Bias",
                "Power", "AbsVal", "BNLL", "ELU", "Exp", "Log", "PReLU", "Threshold", "Clip",
                "Swish", "MVN", "Softmax", "Split"}
_LOSSES = {"SoftmaxWithLoss", "EuclideanLoss", "SigmoidCrossEntropyLoss", "HingeLoss",
           "InfogainLoss", "MultinomialLogisticLoss", "ContrastiveLoss"}
_PHASES = ("TRAIN", "TEST")


# ---------------------------------------------------------------------------------------------
# ucudnn_param
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class UcudnnSettings:
    """A UcudnnParameter in the planner's vocabulary (names of :mod:`ucudnn.vocab`)."""
    policy: str                 # "undivided" | "powerOfTwo" | "all"
    optimizer: str              # "dp" | "ilp" | "shared"
    workspace_limit: int        # bytes per kernel (DP)
    total_workspace: int        # bytes for the net's kernels (ILP, shared); 0: limit x kernels
    micro_batch_sizes: Tuple[int, ...]  # explicit candidates; () : the policy's
    math: str                   # "default" | "tensor_op" | "fma"
    benchmark_repeats: int
    cache_path: str             # "" : $UCUDNN_CACHE or the default cache
    exclude_winograd: bool

    @classmethod
    def from_message(cls, p, where: str) -> "UcudnnSettings":
        check_ucudnn_param(p, where)
        math_names = {v: k for k, v in MATH_MODES.items()}
        return cls(policy=POLICY_CODES[p.policy], optimizer=OPTIMIZERS[p.optimizer],
                   workspace_limit=p.workspace_limit, total_workspace=p.total_workspace,
                   micro_batch_sizes=tuple(p.micro_batch_size), math=math_names[p.math],
                   benchmark_repeats=p.benchmark_repeats, cache_path=p.cache_path,
                   exclude_winograd=p.exclude_winograd)


@dataclass(frozen=True)
class PrototxtNet:
    """What ``ucudnn plan --prototxt`` needs of a net, for one phase and batch."""
    source: str
    phase: str
    #: one per Convolution layer of the phase, in net order (Note [Convolution layers as
    #: LayerSpec])
    layers: List[LayerSpec]
    #: the net-wide ucudnn_param; None: the net sets none
    net_ucudnn: Optional[UcudnnSettings] = None
    #: per layer of ``layers``: its ucudnn_param merged over the net's as Caffe does; None:
    #: the layer runs as stock Caffe
    ucudnn: Dict[str, Optional[UcudnnSettings]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Shape inference
# ---------------------------------------------------------------------------------------------

def _values(msg, name: str) -> list:
    """A field's values as a list: a repeated field's, an optional field's where it is set."""
    f = msg.DESCRIPTOR.fields_by_name[name]
    repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
    if repeated:                # is_repeated: protobuf >= 6.31, where label warns
        return list(getattr(msg, name))
    return [getattr(msg, name)] if msg.HasField(name) else []


def _positive(value, where: str, field: str, minimum: int = 1) -> int:
    if value < minimum:
        raise PrototxtError(f"{where}: field {field!r} must be >= {minimum}, got {value}")
    return value


def _dims(shape, where: str, field: str) -> Shape:
    dims = tuple(_positive(d, where, f"{field}.dim", 0) for d in shape.dim)
    if not dims:
        raise PrototxtError(f"{where}: field {field!r} has no dim")
    return dims


def _rule_matches(rule, phase: str, level: int, stages: Sequence[str]) -> bool:
    """Caffe's StateMeetsRule."""
    if rule.HasField("phase") and rule.phase != _PHASES.index(phase):
        return False
    if rule.HasField("min_level") and level < rule.min_level:
        return False
    if rule.HasField("max_level") and level > rule.max_level:
        return False
    if any(s not in stages for s in rule.stage):
        return False
    if any(s in stages for s in rule.not_stage):
        return False
    return True


def _spatial(p, name: str, where: str, default: Optional[int]) -> Tuple[int, int]:
    """Caffe's ``x`` / ``x_h``+``x_w`` pairs (kernel_size, pad, stride, dilation)."""
    plain = "kernel_size" if name == "kernel" else name
    fields = p.DESCRIPTOR.fields_by_name
    vals = _values(p, plain)
    hw = [_values(p, f"{name}_{a}") for a in "hw"] if f"{name}_h" in fields else [[], []]
    if hw[0] or hw[1]:
        if vals:
            raise PrototxtError(f"{where}: give either {plain} or {name}_h/{name}_w, not both")
        if not (hw[0] and hw[1]):
            raise PrototxtError(f"{where}: {name}_h and {name}_w must be given together")
        vals = hw[0] + hw[1]
    if not vals:
        if default is None:
            raise PrototxtError(f"{where}: field {plain!r} is missing")
        vals = [default]
    if len(vals) == 1:
        vals = vals * 2
    if len(vals) != 2:
        raise PrototxtError(f"{where}: field {plain!r}: {len(vals)} values for 2 spatial axes")
    minimum = 1 if name in ("kernel", "stride", "dilation") else 0
    return tuple(_positive(v, where, plain, minimum) for v in vals)


def _learnable(layer, n_blobs: int) -> bool:
    """Whether any of the layer's ``n_blobs`` parameter blobs has lr_mult != 0."""
    specs = layer.param
    return any((specs[i].lr_mult if i < len(specs) else 1.0) != 0 for i in range(n_blobs))


def _canon_axis(axis: int, ndim: int, where: str, field: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise PrototxtError(f"{where}: field {field!r}: axis {axis} out of range for {ndim} axes")
    return axis % ndim


def _check_phase_batch(phase, batch):
    if phase not in _PHASES:
        raise PrototxtError(f"phase: expected TRAIN or TEST, got {phase!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise PrototxtError(f"batch: must be a positive integer, got {batch!r}")


def _phase_layers(net, phase: str, source: str):
    """(layer, where) for the layers of ``phase`` (Caffe's FilterNet), names unique."""
    if not len(net.layer) and len(net.layers):
        raise PrototxtError(f"{source}: V1 'layers' definitions are not supported; upgrade the "
                            "net with Caffe's upgrade_net_proto_text")
    level, stages = net.state.level, list(net.state.stage)
    seen = set()
    for i, layer in enumerate(net.layer):
        name = layer.name if layer.HasField("name") else f"#{i + 1}"
        where = f"{source}: layer {name!r}"
        if not layer.HasField("type"):
            raise PrototxtError(f"{where}: field 'type' is missing")
        where = f"{source}: layer {name!r} (type {layer.type})"
        if len(layer.include) and len(layer.exclude):
            raise PrototxtError(f"{where}: a layer may have include or exclude rules, not both")
        if len(layer.include):
            keep = any(_rule_matches(r, phase, level, stages) for r in layer.include)
        else:
            keep = not any(_rule_matches(r, phase, level, stages) for r in layer.exclude)
        if not keep:
            continue
        if name in seen:
            raise PrototxtError(f"{where}: duplicate layer name in phase {phase}")
        seen.add(name)
        yield layer, name, where


class _Net:
    def __init__(self, net, phase: str, batch: Optional[int], source: str):
        _check_phase_batch(phase, batch)
        self.net, self.phase, self.batch, self.source = net, phase, batch, source
        self.shapes: Dict[str, Shape] = {}
        self.need_backward: Dict[str, bool] = {}
        self.force = net.force_backward
        self.convs: List[LayerSpec] = []

    def data_shape(self, dims: Shape) -> Shape:
        if self.batch is not None and dims:
            dims = (self.batch,) + tuple(dims[1:])
        return tuple(dims)

    def add_blob(self, name: str, shape: Shape, need_backward: bool) -> None:
        self.shapes[name] = shape
        self.need_backward[name] = need_backward or self.force

    def net_inputs(self) -> None:
        inputs = list(self.net.input)
        where = f"{self.source}: net input"
        shapes = [_dims(s, where, "input_shape") for s in self.net.input_shape]
        dims = list(self.net.input_dim)
        if dims:
            if len(dims) != 4 * len(inputs):
                raise PrototxtError(f"{where}: field 'input_dim': {len(dims)} values for "
                                    f"{len(inputs)} input(s), expected 4 per input")
            shapes = [tuple(_positive(d, where, "input_dim", 0) for d in dims[4 * i:4 * i + 4])
                      for i in range(len(inputs))]
        if len(shapes) != len(inputs):
            raise PrototxtError(f"{where}: {len(inputs)} input(s) but {len(shapes)} "
                                "input_shape/input_dim shape(s)")
        for name, shape in zip(inputs, shapes):
            self.add_blob(name, self.data_shape(shape), False)

    def run(self) -> List[LayerSpec]:
        self.net_inputs()
        for layer, name, where in _phase_layers(self.net, self.phase, self.source):
            bottoms, tops = list(layer.bottom), list(layer.top)
            for b in bottoms:
                if b not in self.shapes:
                    raise PrototxtError(f"{where}: bottom blob {b!r} is not produced by any "
                                        f"earlier layer or net input in phase {self.phase}")
            in_shapes = [self.shapes[b] for b in bottoms]
            in_backward = any(self.need_backward[b] for b in bottoms)
            out_shapes, learnable = self.layer(layer, name, where, in_shapes, tops)
            if len(out_shapes) != len(tops):
                raise PrototxtError(f"{where}: {len(tops)} top blob(s), the layer produces "
                                    f"{len(out_shapes)}")
            for t, s in zip(tops, out_shapes):
                self.add_blob(t, s, in_backward or learnable)
        return self.convs

    # -- layers ------------------------------------------------------------------------------
    def layer(self, layer, name, where, bottoms, tops):
        ltype = layer.type

        def need(n_min, n_max=-1):
            """Check the number of bottoms; ``n_max`` -1: exactly n_min, None: no maximum."""
            n_max = n_min if n_max == -1 else (10**9 if n_max is None else n_max)
            if not n_min <= len(bottoms) <= n_max:
                want = (str(n_min) if n_min == n_max else
                        f"at least {n_min}" if n_max == 10**9 else f"{n_min} to {n_max}")
                raise PrototxtError(f"{where}: expects {want} bottom blob(s), got {len(bottoms)}")

        if ltype in _DATA_SOURCES:
            raise PrototxtError(
                f"{where}: data layers that read files ({ltype}) are not supported, and --batch "
                "alone cannot replace them: use a DummyData or Input layer with the blob shapes "
                "(e.g. dummy_data_param { shape { dim: 256 dim: 3 dim: 227 dim: 227 } })")
        if ltype == "Input":
            need(0)
            shapes = [_dims(s, where, "input_param.shape") for s in layer.input_param.shape]
            return self.broadcast_shapes(shapes, tops, where, "input_param.shape"), False
        if ltype == "DummyData":
            need(0)
            p = layer.dummy_data_param
            shapes = [_dims(s, where, "dummy_data_param.shape") for s in p.shape]
            names = ("num", "channels", "height", "width")
            legacy = [list(getattr(p, f)) for f in names]
            if any(legacy):
                if shapes:
                    raise PrototxtError(f"{where}: give dummy_data_param shape or "
                                        "num/channels/height/width, not both")
                n = max(len(x) for x in legacy)
                if any(len(x) not in (1, n) for x in legacy) or not all(legacy):
                    raise PrototxtError(f"{where}: dummy_data_param num/channels/height/width "
                                        "must each be given once or once per top")
                shapes = [tuple(x[i if len(x) > 1 else 0] for x in legacy) for i in range(n)]
            return self.broadcast_shapes(shapes, tops, where, "dummy_data_param.shape"), False
        if ltype == "Convolution":
            need(1, None)
            return self.convolution(layer, name, where, bottoms, tops)
        if ltype == "Pooling":
            need(1)
            return [self.pooling(layer, where, bottoms[0])] * len(tops), False
        if ltype == "InnerProduct":
            need(1)
            p = layer.inner_product_param
            if not p.HasField("num_output"):
                raise PrototxtError(f"{where}: field 'inner_product_param.num_output' is missing")
            num = _positive(p.num_output, where, "inner_product_param.num_output")
            axis = _canon_axis(p.axis, len(bottoms[0]), where, "inner_product_param.axis")
            return [bottoms[0][:axis] + (num,)], _learnable(layer, 2 if p.bias_term else 1)
        if ltype in _ELEMENTWISE:
            need(1, 2 if ltype in ("Scale", "Bias") else 1)
            learnable = False
            if ltype == "Scale":
                bias = layer.scale_param.bias_term
                learnable = _learnable(layer, (2 - len(bottoms)) + (1 if bias else 0))
            elif ltype in ("Bias", "PReLU"):
                learnable = _learnable(layer, 2 - len(bottoms))
            n_tops = len(tops) if ltype == "Split" else 1
            return [bottoms[0]] * n_tops, learnable
        if ltype == "Eltwise":
            need(2, None)
            if any(s != bottoms[0] for s in bottoms):
                raise PrototxtError(f"{where}: bottoms differ in shape: {bottoms}")
            return [bottoms[0]], False
        if ltype == "Concat":
            need(1, None)
            p = layer.concat_param
            axis = p.concat_dim if p.HasField("concat_dim") else p.axis
            axis = _canon_axis(axis, len(bottoms[0]), where, "concat_param.axis")
            for s in bottoms:
                if len(s) != len(bottoms[0]) or any(a != b for i, (a, b) in
                                                    enumerate(zip(s, bottoms[0])) if i != axis):
                    raise PrototxtError(f"{where}: bottoms differ outside axis {axis}: {bottoms}")
            out = list(bottoms[0])
            out[axis] = sum(s[axis] for s in bottoms)
            return [tuple(out)], False
        if ltype == "Flatten":
            need(1)
            p, s = layer.flatten_param, bottoms[0]
            a = _canon_axis(p.axis, len(s), where, "flatten_param.axis")
            e = _canon_axis(p.end_axis, len(s), where, "flatten_param.end_axis")
            return [s[:a] + (math.prod(s[a:e + 1]),) + s[e + 1:]], False
        if ltype == "Reshape":
            need(1)
            return [self.reshape(layer, where, bottoms[0])], False
        if ltype in _LOSSES or ltype == "Accuracy":
            need(2, 3)
            out = [()]
            if len(tops) > 1:
                if ltype == "SoftmaxWithLoss":
                    out.append(bottoms[0])
                elif ltype == "Accuracy":
                    axis = _canon_axis(layer.accuracy_param.axis, len(bottoms[0]), where,
                                       "accuracy_param.axis")
                    out.append((bottoms[0][axis],))
            return out, False
        if ltype == "Silence":
            return [], False
        raise PrototxtError(f"{where}: unknown layer type {ltype!r}; supported: " +
                            ", ".join(sorted({"Input", "DummyData", "Convolution", "Pooling",
                                              "InnerProduct", "Eltwise", "Concat", "Flatten",
                                              "Reshape", "Accuracy", "Silence"}
                                             | _ELEMENTWISE | _LOSSES)))

    def broadcast_shapes(self, shapes, tops, where, field):
        if len(shapes) == 1 and len(tops) > 1:
            shapes = shapes * len(tops)
        if len(shapes) != len(tops):
            raise PrototxtError(f"{where}: field {field!r}: {len(shapes)} shape(s) for "
                                f"{len(tops)} top(s)")
        return [self.data_shape(s) for s in shapes]

    def convolution(self, layer, name, where, bottoms, tops):
        if not layer.HasField("convolution_param"):
            raise PrototxtError(f"{where}: field 'convolution_param' is missing")
        p = layer.convolution_param
        if not p.HasField("num_output"):
            raise PrototxtError(f"{where}: field 'convolution_param.num_output' is missing")
        num = _positive(p.num_output, where, "convolution_param.num_output")
        group = _positive(p.group, where, "convolution_param.group")
        if p.axis != 1:
            raise PrototxtError(f"{where}: field 'convolution_param.axis': only 1 is supported")
        if len(bottoms) != len(tops):
            raise PrototxtError(f"{where}: {len(bottoms)} bottoms but {len(tops)} tops")
        s0 = bottoms[0]
        if len(s0) != 4:
            raise PrototxtError(f"{where}: only 2-D convolutions of N x C x H x W blobs are "
                                f"supported, bottom has shape {s0}")
        if any(s != s0 for s in bottoms):
            raise PrototxtError(f"{where}: bottoms differ in shape: {bottoms}")
        n, c, h, w = s0
        kh, kw = _spatial(p, "kernel", where, None)
        ph, pw = _spatial(p, "pad", where, 0)
        sh, sw = _spatial(p, "stride", where, 1)
        dh, dw = _spatial(p, "dilation", where, 1)
        if c % group or num % group:
            raise PrototxtError(f"{where}: field 'convolution_param.group': {group} does not "
                                f"divide input channels {c} and num_output {num}")
        oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if oh < 1 or ow < 1:
            raise PrototxtError(f"{where}: the kernel {kh}x{kw} is larger than the padded input "
                                f"{h}x{w}")
        if (ph, sh, dh) != (pw, sw, dw):
            raise PrototxtError(f"{where}: non-square pad/stride/dilation "
                                f"({ph},{pw})/({sh},{sw})/({dh},{dw}) are not supported by the "
                                "layer list format")
        bwd_data = any(self.need_backward[b] for b in layer.bottom)
        if len(layer.propagate_down):   # Caffe: an explicit propagate_down replaces the need
            bwd_data = any(layer.propagate_down)
        self.convs.append(LayerSpec(name=name, n=n, c=c, h=h, w=w, k=num, r=kh, s=kw, pad=ph,
                                    stride=sh, dilation=dh, groups=group, count=len(bottoms),
                                    bwd_data=bwd_data or self.force))
        return [(n, num, oh, ow)] * len(tops), _learnable(layer, 2 if p.bias_term else 1)

    def pooling(self, layer, where, s):
        if len(s) != 4:
            raise PrototxtError(f"{where}: pooling needs an N x C x H x W bottom, got {s}")
        p = layer.pooling_param
        n, c, h, w = s
        if p.global_pooling:
            if any(p.HasField(k) for k in ("kernel_size", "kernel_h", "kernel_w")):
                raise PrototxtError(f"{where}: global_pooling takes no kernel size")
            return (n, c, 1, 1)
        kh, kw = _spatial(p, "kernel", where, None)
        ph, pw = _spatial(p, "pad", where, 0)
        sh, sw = _spatial(p, "stride", where, 1)
        if ph >= kh or pw >= kw:
            raise PrototxtError(f"{where}: pad must be smaller than the kernel")
        rnd = math.ceil if p.round_mode == p.CEIL else math.floor

        def out(x, k, pad, st):
            o = int(rnd((x + 2 * pad - k) / st)) + 1
            if pad and (o - 1) * st >= x + pad:     # the last window must start inside the image
                o -= 1
            if o < 1:
                raise PrototxtError(f"{where}: the pooling window is larger than the input")
            return o
        return (n, c, out(h, kh, ph, sh), out(w, kw, pw, sw))

    def reshape(self, layer, where, s):
        p = layer.reshape_param
        dims = [_positive(d, where, "reshape_param.shape.dim", -1) for d in p.shape.dim]
        axis = _canon_axis(p.axis, len(s) + 1, where, "reshape_param.axis")
        end = len(s) if p.num_axes == -1 else axis + p.num_axes
        if not axis <= end <= len(s):
            raise PrototxtError(f"{where}: field 'reshape_param.num_axes' out of range")
        mid = []
        for i, d in enumerate(dims):
            if d == 0:
                if axis + i >= len(s):
                    raise PrototxtError(f"{where}: dim 0 copies a missing axis")
                mid.append(s[axis + i])
            else:
                mid.append(d)
        if mid.count(-1) > 1:
            raise PrototxtError(f"{where}: at most one dim may be -1")
        total = math.prod(s[axis:end])
        if -1 in mid:
            known = math.prod(d for d in mid if d != -1)
            if known == 0 or total % known:
                raise PrototxtError(f"{where}: cannot infer the -1 dim of {dims} from {s}")
            mid[mid.index(-1)] = total // known
        if math.prod(mid) != total:
            raise PrototxtError(f"{where}: reshape {dims} does not keep the count of {s}")
        return tuple(s[:axis]) + tuple(mid) + tuple(s[end:])


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

def parse_net_text(text: str, source: str = "<prototxt>", caffe_proto: Optional[str] = None):
    """A ``NetParameter`` from prototxt text, unknown fields skipped (Note [Strict and lenient
    reading] in :mod:`ucudnn.caffe.proto`)."""
    return parse_net(load_caffe_pb2(caffe_proto), text, source, lenient=True)


def infer_shapes(net, phase: str = "TRAIN", batch: Optional[int] = None,
                 source: str = "<prototxt>") -> Dict[str, Shape]:
    """Every blob's shape after the layers of ``phase``."""
    n = _Net(net, phase, batch, source)
    n.run()
    return dict(n.shapes)


def conv_layers(net, phase: str = "TRAIN", batch: Optional[int] = None,
                source: str = "<prototxt>") -> List[LayerSpec]:
    """A LayerSpec per Convolution layer of ``phase`` (see the Notes of this module).

    ``net`` is a parsed ``NetParameter``; ``batch`` replaces the batch size (first axis) of
    every data layer and net input.
    """
    convs = _Net(net, phase, batch, source).run()
    if not convs:
        raise PrototxtError(f"{source}: the net has no Convolution layer in phase {phase}")
    return convs


def ucudnn_settings(net, phase: str = "TRAIN", source: str = "<prototxt>"
                    ) -> Tuple[Optional[UcudnnSettings], Dict[str, Optional[UcudnnSettings]]]:
    """(the net's ucudnn_param, {Convolution layer of ``phase``: its merged ucudnn_param});
    None where none is set (the layer runs as stock Caffe). Invalid values (a negative
    workspace) are errors naming the layer and field."""
    _check_phase_batch(phase, None)
    check_shared_is_net_wide(net, source)
    net_s = (UcudnnSettings.from_message(net.ucudnn_param, f"{source}: net")
             if net.HasField("ucudnn_param") else None)
    per_layer = {}
    for layer, name, where in _phase_layers(net, phase, source):
        if layer.type == "Convolution":
            p = merged_ucudnn_param(net, layer)
            per_layer[name] = None if p is None else UcudnnSettings.from_message(p, where)
    return net_s, per_layer


def load_prototxt(path, phase: str = "TRAIN", batch: Optional[int] = None,
                  caffe_proto: Optional[str] = None) -> PrototxtNet:
    """The convolution layers and ucudnn settings of the prototxt file at ``path``."""
    source = str(path)
    net = parse_net_text(read_text(path), source, caffe_proto)
    layers = conv_layers(net, phase, batch, source)
    net_s, per_layer = ucudnn_settings(net, phase, source)
    return PrototxtNet(source=source, phase=phase, layers=layers, net_ucudnn=net_s,
                       ucudnn=per_layer)


def read_prototxt(path, phase: str = "TRAIN", batch: Optional[int] = None,
                  caffe_proto: Optional[str] = None) -> List[LayerSpec]:
    """:func:`conv_layers` of the prototxt file at ``path``."""
    return load_prototxt(path, phase, batch, caffe_proto).layers


def merge_shapes(layers: Sequence[LayerSpec]) -> List[LayerSpec]:
    """Merge layers of identical geometry (and bwd_data) into one, summing their counts.

    The first layer of each shape keeps its name and position.
    """
    out: Dict[tuple, LayerSpec] = {}
    for l in layers:
        key = (l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride, l.dilation, l.groups,
               l.bwd_data)
        if key in out:
            prev = out[key]
            out[key] = LayerSpec(prev.name, *key[:-1], count=prev.count + l.count,
                                 bwd_data=l.bwd_data)
        else:
            out[key] = l
    return list(out.values())
