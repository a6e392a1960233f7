"""Caffe's shape rules over a parsed net: every blob's shape in one phase, and a
:class:`~ucudnn.plan.layers.LayerSpec` per ``Convolution`` layer.

:class:`NetShapes` walks the layers of a phase as Caffe's ``Net::Init`` does (its
``FilterNet`` rules, the checks its layers' ``LayerSetUp``/``Reshape`` make), so that what Caffe
refuses is refused here with the file, layer and field named.

Note [Convolution layers as LayerSpec]
    One Convolution layer is one LayerSpec with Caffe's numbers (Note [Layers, groups and
    counts] in :mod:`ucudnn.plan.layers`): ``c`` and ``k`` the layer's total input channels
    and ``num_output``, ``groups`` Caffe's ``group``, kernel, pad, stride and dilation per
    axis, and ``count`` the number of bottoms (a layer with two bottoms runs its kernels on
    each, with the same weights).

Note [Shapes the prototxt does not settle]
    Data layers that read files give the shape their parameters settle: ``batch_size``, the
    crop (``transform_param.crop_size``; ImageData: ``new_height``/``new_width``), the
    channels (ImageData: ``is_color``; Data and WindowData: the number of ``mean_value``s when
    there are several); MemoryData, Input and DummyData state theirs. What only the data
    files know (a Data layer's image size without a crop, HDF5Data's blobs) and the tops of
    Python layers and of layer types without a shape rule here are unknown: they flow on as
    unknown, and a layer that needs them (a Convolution to be planned) asks for the blob's
    shape, ``--input-shape BLOB=N,C,H,W`` (:attr:`NetShapes.given`), naming the blob and the
    layer that makes it. Checking a net (``ucudnn prototxt``) skips the checks whose shapes
    are unknown; planning one needs every convolution's input.

Note [Convolutions that reach cuDNN]
    The rule of the patched Caffe's layer factory (``GetConvolutionLayer`` in
    ``src/caffe/layer_factory.cpp``, Note [Dilated convolutions on cuDNN] there), in one
    place here, :func:`off_cudnn_reason`: ``engine: CAFFE`` makes the im2col layer
    (``ConvolutionLayer``), and so does ``engine: DEFAULT`` for a dilated convolution, as in
    BVLC (on an H200 a dilated net ran faster on im2col: results/h200/dilation/); any other
    ``DEFAULT``, and ``engine: CUDNN`` dilated or not, makes the cuDNN layer -- the one ucudnn
    plans (BVLC stopped on a dilated ``CUDNN`` one). The cuDNN layer takes a bottom of
    2 spatial axes, or of 3 (N x C x D x H x W) where ucudnn runs the layer -- a 3-D
    convolution is planned as one, NCDHW, and Caffe needs the layer's ``ucudnn_param`` (its
    own or the net's) for it -- and refuses any other in its Reshape, as BVLC's did ("Use
    'engine: CAFFE' for general ND convolution"): an error here, with Caffe's words. NHWC is
    2-D only: a 3-D convolution in a net of ``ucudnn_param { layout: NHWC }`` (which Caffe
    marks NHWC before it knows any shape) is refused, as Caffe's layer refuses it. The im2col
    layers are not planned; :attr:`NetShapes.off_cudnn` names them with the reason, and their tops get
    Caffe's N-D shape rule.

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
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..plan.conv import out_size
from ..plan.layers import LayerError, LayerSpec
from .fork import declared, is_repeated
from .params import layout_of
from .proto import PrototxtError, as_bvlc
from .textscan import layer_lines, line_col, position

__all__ = ["ShapeError", "PHASES", "NetShapes", "phase_layers", "rule_stages",
           "parse_input_shape", "parse_layer_shape", "off_cudnn_reason"]

Shape = Tuple[int, ...]
PHASES = ("TRAIN", "TEST")

#: shape-preserving layers: top[i] has the shape of bottom[0]
_ELEMENTWISE = {"ReLU", "Sigmoid", "TanH", "Dropout", "LRN", "BatchNorm", "Scale", "Bias",
                "Power", "AbsVal", "BNLL", "ELU", "Exp", "Log", "PReLU", "Threshold", "Clip",
                "Swish", "MVN", "Softmax", "Split"}
_LOSSES = {"SoftmaxWithLoss", "EuclideanLoss", "SigmoidCrossEntropyLoss", "HingeLoss",
           "InfogainLoss", "MultinomialLogisticLoss", "ContrastiveLoss"}
#: data layers whose tops' shapes come (partly) from files (Note [Shapes the prototxt does
#: not settle])
_FILE_DATA = {"Data", "ImageData", "HDF5Data", "WindowData"}
_NO_TOPS = {"Silence", "HDF5Output"}

# Note [Layers of 4 axes]
#     BVLC layers that read their bottom as num, channels, height and width (Blob's legacy
#     accessors stop Caffe past 4 axes): PReLU and MVN take at most 4 axes, LRN and SPP
#     exactly 4 (Pooling too: NetShapes.pooling); ReLU, Sigmoid and TanH as cuDNN layers,
#     which the layer factory makes of engine DEFAULT in a build with cuDNN (ucudnn's), while
#     engine CAFFE takes any. A 3-D net with one is refused here, as Caffe would at set-up.
#: layer type -> (the axes it takes: "at most" or "exactly" 4, its engine's parameter field)
_FOUR_AXES = {"PReLU": ("at most", None), "MVN": ("at most", None),
              "LRN": ("exactly", None), "SPP": ("exactly", None),
              "ReLU": ("at most", "relu_param"), "Sigmoid": ("at most", "sigmoid_param"),
              "TanH": ("at most", "tanh_param")}


def _check_four_axes(layer, ltype: str, bottoms: Sequence[Shape], where: str) -> None:
    """ShapeError where Caffe cannot set ``layer`` up on its first bottom (Note [Layers of
    4 axes])."""
    how, field = _FOUR_AXES.get(ltype, (None, None))
    shape = bottoms[0] if bottoms else None
    if how is None or shape is None or (len(shape) <= 4 if how == "at most" else
                                        len(shape) == 4):
        return
    n = len(shape)
    if field is None:
        raise ShapeError(f"{where}: the bottom {shape} has {n} axes, and BVLC Caffe's {ltype} "
                         f"takes {how} 4")
    p = getattr(layer, field, None)
    engine = getattr(p, "engine", 0)
    if not (engine and p.Engine.Name(engine) == "CAFFE"):
        raise ShapeError(f"{where}: field '{field}.engine': the bottom {shape} has {n} axes, "
                         f"and {ltype} as cuDNN's layer (engine DEFAULT or CUDNN in a Caffe "
                         f"built with cuDNN) takes {how} 4; '{field} {{ engine: CAFFE }}' "
                         "takes any number")


class ShapeError(PrototxtError):
    """A net Caffe would refuse, or whose shapes cannot be known; the message names the file,
    the layer and the field (or the blob to give a shape for)."""


def parse_input_shape(text: str, option: str = "--input-shape") -> Tuple[str, Shape]:
    """``BLOB=N,C,H,W`` -> (blob, shape)."""
    blob, sep, dims = str(text).partition("=")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if sep and dims.strip() else ()
    except ValueError:
        shape = ()
    if not blob.strip() or not shape or any(d < 1 for d in shape):
        raise ShapeError(f"{option}: expected BLOB=N,C,H,W (positive integers), got {text!r}")
    return blob.strip(), shape


def parse_layer_shape(text: str, option: str = "--layer-shape") -> Tuple[str, int]:
    """``TYPE=same`` or ``TYPE=same:K`` -> (type, K): a layer type whose tops have the shape
    of its bottom K (0 where not given; Note [Unknown layer types] in
    :mod:`ucudnn.caffe.proto`)."""
    ltype, sep, rule = str(text).partition("=")
    word, colon, k = rule.strip().partition(":")
    if sep and ltype.strip() and word == "same" and (not colon or k.strip().isdigit()):
        return ltype.strip(), int(k) if colon else 0
    raise ShapeError(f"{option}: expected TYPE=same or TYPE=same:K (its tops have the shape "
                     f"of its bottom K, from 0), got {text!r}")


def _values(msg, name: str) -> list:
    """A field's values as a list: a repeated field's, an optional field's where it is set,
    none where the schema has no such field (a fork's that BVLC lacks, read with BVLC's)."""
    f = declared(msg, name)
    if f is None:
        return []
    if is_repeated(f):
        return list(getattr(msg, name))
    return [getattr(msg, name)] if msg.HasField(name) else []


def _positive(value, where: str, field: str, minimum: int = 1) -> int:
    if value < minimum:
        raise ShapeError(f"{where}: field {field!r} must be >= {minimum}, got {value}")
    return value


def _dims(shape, where: str, field: str) -> Shape:
    dims = tuple(_positive(d, where, f"{field}.dim", 0) for d in shape.dim)
    if not dims:
        raise ShapeError(f"{where}: field {field!r} has no dim")
    return dims


def _rule_matches(rule, phase: str, level: int, stages: Sequence[str]) -> bool:
    """Caffe's StateMeetsRule."""
    if rule.HasField("phase") and rule.phase != PHASES.index(phase):
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


def _spatial(p, name: str, where: str, field: str, default: Optional[int],
             axes: Optional[int] = 2, shape: Optional[Shape] = None) -> Tuple[int, ...]:
    """Caffe's ``x`` / ``x_h``+``x_w`` pairs (kernel_size, pad, stride, dilation): one value
    per spatial axis of ``shape`` (``axes`` of them; None: not known, the count unchecked)."""
    plain = "kernel_size" if name == "kernel" else name
    vals = _values(p, plain)
    hw = [_values(p, f"{name}_{a}") for a in "hw"]
    if hw[0] or hw[1]:
        if vals:
            raise ShapeError(f"{where}: field '{field}.{plain}': give either {plain} or "
                             f"{name}_h/{name}_w, not both")
        if not (hw[0] and hw[1]):
            raise ShapeError(f"{where}: field '{field}.{name}_h': {name}_h and {name}_w must "
                             "be given together")
        if axes not in (2, None):
            raise ShapeError(f"{where}: field '{field}.{name}_h': {name}_h and {name}_w are for "
                             f"2-D convolutions only; the bottom {shape} has {axes} spatial "
                             f"axes: give {plain} once or {axes} times")
        vals = hw[0] + hw[1]
    if not vals:
        if default is None:
            raise ShapeError(f"{where}: field '{field}.{plain}' is missing")
        vals = [default]
    if len(vals) == 1 and axes is not None:
        vals = vals * axes
    if axes is not None and len(vals) != axes:
        what = (f"the bottom {shape} has {axes} spatial axes" if shape is not None
                else f"{axes} spatial axes")
        raise ShapeError(f"{where}: field '{field}.{plain}': {len(vals)} values, but {what} "
                         f"(Caffe takes one value, or one per spatial axis)")
    minimum = 1 if name in ("kernel", "stride", "dilation") else 0
    return tuple(_positive(v, where, f"{field}.{plain}", minimum) for v in vals)


def off_cudnn_reason(engine: str, axes: int, dilated: bool = False) -> Optional[str]:
    """Why the patched Caffe's layer factory runs a Convolution without cuDNN (im2col), None
    where it makes the cuDNN layer (Note [Convolutions that reach cuDNN]; it mirrors
    ``GetConvolutionLayer`` in the patched ``src/caffe/layer_factory.cpp``). ``engine``: the
    layer's ``convolution_param.engine`` name; ``axes``: its spatial axes; ``dilated``: a
    dilation above 1 on some axis."""
    dims = "" if axes == 2 else f" ({axes}-D)"
    if engine == "CAFFE":
        return "engine: CAFFE" + dims
    if engine == "DEFAULT" and dilated:
        return "dilated, engine: DEFAULT" + dims + " (engine: CUDNN runs it on cuDNN)"
    return None


def _learnable(layer, n_blobs: int) -> bool:
    """Whether any of the layer's ``n_blobs`` parameter blobs has lr_mult != 0."""
    specs = layer.param
    return any((specs[i].lr_mult if i < len(specs) else 1.0) != 0 for i in range(n_blobs))


def _canon_axis(axis: int, ndim: int, where: str, field: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{where}: field {field!r}: axis {axis} out of range for {ndim} axes")
    return axis % ndim


def _unknown_input(where: str, blob: str, root: str, maker: str, ltype: str) -> ShapeError:
    """The error for a layer's input ``blob`` of unknown shape, from blob ``root`` that layer
    ``maker`` of type ``ltype`` makes (Note [Shapes the prototxt does not settle])."""
    via = "" if root == blob else f", which comes from blob {root!r}"
    rule = ("" if ltype in _FILE_DATA | {"Python", "MemoryData"} else
            f", or --layer-shape {ltype}=same[:K] where its tops have its bottom K's shape")
    return ShapeError(f"{where}: the shape of its input {blob!r}{via} is not known: layer "
                      f"{maker!r} (type {ltype}) reads it from files or computes it outside "
                      f"Caffe's shape rules; pass --input-shape {root}=N,C,H,W{rule}")


def _net_input_where(source: str, text: Optional[str]) -> str:
    """``source:LINE: net input``, the line of the net's first ``input`` where ``text`` has
    one."""
    at = None if text is None else position(text, [("input", None)])
    return (source if at is None else f"{source}:{line_col(text, at)[0]}") + ": net input"


def phase_layers(net, phase: str, source: str, stages: Optional[Sequence[str]] = None,
                 lines: Optional[Sequence[int]] = None):
    """(layer, name, where) for the layers of ``phase`` (Caffe's FilterNet) in the net's state
    (``stages``: instead of the net's own, as a solver's test_state gives them). Caffe allows
    two layers of one name (a layer is found by its first). ``where`` names ``source``, the
    layer's line (``lines``: one per layer of the net,
    :func:`~ucudnn.caffe.textscan.layer_lines`), the layer and its type."""
    if phase not in PHASES:
        raise ShapeError(f"phase: expected TRAIN or TEST, got {phase!r}")
    if not len(net.layer) and len(net.layers):
        raise ShapeError(f"{source}: V1 'layers' definitions are not supported; upgrade the "
                         "net with Caffe's upgrade_net_proto_text")
    level = net.state.level
    stages = list(net.state.stage) if stages is None else list(stages)
    for i, layer in enumerate(net.layer):
        name = layer.name if layer.HasField("name") else f"#{i + 1}"
        at = source if lines is None else f"{source}:{lines[i]}"
        where = f"{at}: layer {name!r}"
        if not layer.HasField("type"):
            raise ShapeError(f"{where}: field 'type' is missing")
        where = f"{at}: layer {name!r} (type {layer.type})"
        if len(layer.include) and len(layer.exclude):
            raise ShapeError(f"{where}: a layer may have include or exclude rules, not both")
        if len(layer.include):
            keep = any(_rule_matches(r, phase, level, stages) for r in layer.include)
        else:
            keep = not any(_rule_matches(r, phase, level, stages) for r in layer.exclude)
        if not keep:
            continue
        yield layer, name, where


def rule_stages(net) -> List[str]:
    """The stages the layers' include/exclude rules name (a solver runs a net in one of
    them), in the order they first appear."""
    out: List[str] = []
    for layer in net.layer:
        for rule in list(layer.include) + list(layer.exclude):
            for s in list(rule.stage) + list(rule.not_stage):
                if s not in out:
                    out.append(s)
    return out


class NetShapes:
    """Every blob's shape in ``phase`` (None: unknown, Note [Shapes the prototxt does not
    settle]) and the net's convolutions (:attr:`convs`). ``batch`` replaces the first axis of
    every data layer's and net input's tops; ``given`` maps blobs to shapes for what the
    prototxt does not settle. ``need_convs``: a Convolution whose input is unknown is an error
    asking for it (planning); else it is skipped (checking). ``text``: the net's prototxt,
    whose lines the errors name."""

    def __init__(self, net, phase: str, *, batch: Optional[int] = None,
                 given: Optional[Mapping[str, Shape]] = None, source: str = "<prototxt>",
                 need_convs: bool = True, stages: Optional[Sequence[str]] = None,
                 layer_shapes: Optional[Mapping[str, int]] = None,
                 text: Optional[str] = None):
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)
                                  or batch < 1):
            raise ShapeError(f"batch: must be a positive integer, got {batch!r}")
        self.net, self.phase, self.batch, self.source = as_bvlc(net), phase, batch, source
        self.stages = stages
        #: the net's text (None: not known), for the lines errors name
        self.text = text
        #: the line of each layer of the net (None: not known)
        self.lines = None if text is None else layer_lines(text, len(net.layer))
        #: a fork's layer type -> the bottom whose shape its tops have (--layer-shape)
        self.layer_shapes = dict(layer_shapes or {})
        self.given, self.need_convs = dict(given or {}), need_convs
        self.shapes: Dict[str, Optional[Shape]] = {}
        self.maker: Dict[str, str] = {}             # blob -> the first layer writing it
        #: an unknown blob -> the blob whose unknown shape it comes from (a data or Python
        #: layer's top: what --input-shape must give)
        self.origin: Dict[str, str] = {}
        self.need_backward: Dict[str, bool] = {}
        self.force = net.force_backward
        self.convs: List[LayerSpec] = []
        #: the Convolution layers Caffe runs without cuDNN: name -> why (Note [Convolutions
        #: that reach cuDNN])
        self.off_cudnn: Dict[str, str] = {}
        self._used_given = set()

    def data_shape(self, dims: Optional[Shape]) -> Optional[Shape]:
        if dims is not None and self.batch is not None and dims:
            dims = (self.batch,) + tuple(dims[1:])
        return None if dims is None else tuple(dims)

    def add_blob(self, name: str, shape: Optional[Shape], need_backward: bool,
                 maker: str) -> None:
        self.shapes[name] = shape
        self.maker.setdefault(name, maker)      # not an in-place layer after it
        self.need_backward[name] = need_backward or self.force

    def ask(self, blob: str, where: str) -> ShapeError:
        root = self.origin.get(blob, blob)
        maker = self.maker.get(root, "?")
        ltype = next((l.type for l in self.net.layer if l.name == maker), "Python")
        return _unknown_input(where, blob, root, maker, ltype)

    def net_inputs(self) -> None:
        inputs = list(self.net.input)
        where = _net_input_where(self.source, self.text)
        shapes = [_dims(s, where, "input_shape") for s in self.net.input_shape]
        dims = list(self.net.input_dim)
        if dims:
            if len(dims) != 4 * len(inputs):
                raise ShapeError(f"{where}: field 'input_dim': {len(dims)} values for "
                                 f"{len(inputs)} input(s), expected 4 per input")
            shapes = [tuple(_positive(d, where, "input_dim", 0) for d in dims[4 * i:4 * i + 4])
                      for i in range(len(inputs))]
        if len(shapes) != len(inputs):
            raise ShapeError(f"{where}: {len(inputs)} input(s) but {len(shapes)} "
                             "input_shape/input_dim shape(s)")
        for name, shape in zip(inputs, shapes):
            self.add_blob(name, self.data_shape(self.given.get(name, shape)), False, "(input)")

    def run(self) -> "NetShapes":
        self.net_inputs()
        for layer, name, where in phase_layers(self.net, self.phase, self.source, self.stages,
                                               self.lines):
            bottoms, tops = list(layer.bottom), list(layer.top)
            for b in bottoms:
                if b not in self.shapes:
                    raise ShapeError(f"{where}: bottom blob {b!r} is not produced by any "
                                     f"earlier layer or net input in phase {self.phase}")
            in_shapes = [self.shapes[b] for b in bottoms]
            in_backward = any(self.need_backward[b] for b in bottoms)
            out_shapes, learnable = self.layer(layer, name, where, in_shapes, tops)
            if out_shapes is None:                  # no shape rule: tops unknown
                out_shapes = [None] * len(tops)
            if len(out_shapes) != len(tops):
                raise ShapeError(f"{where}: {len(tops)} top blob(s), the layer produces "
                                 f"{len(out_shapes)}")
            unknown = [b for b, s in zip(bottoms, in_shapes) if s is None]
            for t, s in zip(tops, out_shapes):
                if t in self.given:
                    s = self.data_shape(self.given[t])
                    self._used_given.add(t)
                self.add_blob(t, s, in_backward or learnable, name)
                if s is None:
                    self.origin[t] = self.origin.get(unknown[0], unknown[0]) if unknown else t
        unused = sorted(set(self.given) - self._used_given - set(self.net.input))
        if unused:
            raise ShapeError(f"--input-shape: no layer of phase {self.phase} makes a blob "
                             f"{unused[0]!r}")
        return self

    # -- layers ------------------------------------------------------------------------------
    def layer(self, layer, name, where, bottoms, tops):
        """(top shapes or None for 'no rule', whether it has learnable parameters)."""
        ltype = layer.type

        def need(n_min, n_max=-1):
            """Check the number of bottoms; ``n_max`` -1: exactly n_min, None: no maximum."""
            n_max = n_min if n_max == -1 else (10**9 if n_max is None else n_max)
            if not n_min <= len(bottoms) <= n_max:
                want = (str(n_min) if n_min == n_max else
                        f"at least {n_min}" if n_max == 10**9 else f"{n_min} to {n_max}")
                raise ShapeError(f"{where}: expects {want} bottom blob(s), got {len(bottoms)}")

        if ltype in self.layer_shapes:
            k = self.layer_shapes[ltype]
            if k >= len(bottoms):
                raise ShapeError(f"{where}: --layer-shape {ltype}=same:{k}: the layer has "
                                 f"{len(bottoms)} bottom(s)")
            return [bottoms[k]] * len(tops), _learnable(layer, len(layer.param))
        if ltype in _FILE_DATA or ltype == "MemoryData":
            need(0)
            return self.file_data(layer, where, tops), False
        if ltype == "Python":       # its tops are asked for where a convolution needs them
            return None, _learnable(layer, len(layer.param))
        if ltype == "Input":
            need(0)
            shapes = [_dims(s, where, "input_param.shape") for s in layer.input_param.shape]
            return self.broadcast_shapes(shapes, tops, where, "input_param.shape"), False
        if ltype == "DummyData":
            need(0)
            return self.dummy_data(layer, where, tops), False
        if ltype == "Convolution":
            need(1, None)
            return self.convolution(layer, name, where, bottoms, tops)
        if None in bottoms:                 # below: rules that need known bottoms
            return None, ltype in ("InnerProduct", "Scale", "Bias", "PReLU", "Deconvolution")
        _check_four_axes(layer, ltype, bottoms, where)
        if ltype in _RULES:
            return _RULES[ltype](layer, where, bottoms, tops)
        if ltype == "Pooling":
            need(1)
            return [self.pooling(layer, where, bottoms[0])] * len(tops), False
        if ltype == "InnerProduct":
            need(1)
            p = layer.inner_product_param
            if not p.HasField("num_output"):
                raise ShapeError(f"{where}: field 'inner_product_param.num_output' is missing")
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
                raise ShapeError(f"{where}: bottoms differ in shape: {bottoms}")
            return [bottoms[0]], False
        if ltype == "Concat":
            need(1, None)
            p = layer.concat_param
            axis = p.concat_dim if p.HasField("concat_dim") else p.axis
            axis = _canon_axis(axis, len(bottoms[0]), where, "concat_param.axis")
            for s in bottoms:
                if len(s) != len(bottoms[0]) or any(a != b for i, (a, b) in
                                                    enumerate(zip(s, bottoms[0])) if i != axis):
                    raise ShapeError(f"{where}: bottoms differ outside axis {axis}: {bottoms}")
            out = list(bottoms[0])
            out[axis] = sum(s[axis] for s in bottoms)
            return [tuple(out)], False
        if ltype == "Slice":
            need(1)
            return self.slice(layer, where, bottoms[0], tops), False
        if ltype == "Flatten":
            need(1)
            p, s = layer.flatten_param, bottoms[0]
            a = _canon_axis(p.axis, len(s), where, "flatten_param.axis")
            e = _canon_axis(p.end_axis, len(s), where, "flatten_param.end_axis")
            return [s[:a] + (math.prod(s[a:e + 1]),) + s[e + 1:]], False
        if ltype == "Reshape":
            need(1)
            return [_reshape(layer, where, bottoms[0])], False
        if ltype in _LOSSES or ltype == "Accuracy":
            need(2, 3)
            if not tops:                # Caffe gives a loss layer an anonymous top
                return [], False
            out = [()]
            if len(tops) > 1:
                if ltype == "SoftmaxWithLoss":
                    out.append(bottoms[0])
                elif ltype == "Accuracy":
                    axis = _canon_axis(layer.accuracy_param.axis, len(bottoms[0]), where,
                                       "accuracy_param.axis")
                    out.append((bottoms[0][axis],))
            return out, False
        if ltype in _NO_TOPS:
            return [], False
        return None, _learnable(layer, len(layer.param))

    def broadcast_shapes(self, shapes, tops, where, field):
        if len(shapes) == 1 and len(tops) > 1:
            shapes = shapes * len(tops)
        if len(shapes) != len(tops):
            raise ShapeError(f"{where}: field {field!r}: {len(shapes)} shape(s) for "
                             f"{len(tops)} top(s)")
        return [self.data_shape(s) for s in shapes]

    def dummy_data(self, layer, where, tops):
        p = layer.dummy_data_param
        shapes = [_dims(s, where, "dummy_data_param.shape") for s in p.shape]
        names = ("num", "channels", "height", "width")
        legacy = [list(getattr(p, f)) for f in names]
        if any(legacy):
            if shapes:
                raise ShapeError(f"{where}: give dummy_data_param shape or "
                                 "num/channels/height/width, not both")
            n = max(len(x) for x in legacy)
            if any(len(x) not in (1, n) for x in legacy) or not all(legacy):
                raise ShapeError(f"{where}: dummy_data_param num/channels/height/width "
                                 "must each be given once or once per top")
            shapes = [tuple(x[i if len(x) > 1 else 0] for x in legacy) for i in range(n)]
        return self.broadcast_shapes(shapes, tops, where, "dummy_data_param.shape")

    def file_data(self, layer, where, tops):
        """Note [Shapes the prototxt does not settle]: (data, label) tops, None where only
        the files know."""
        ltype, t = layer.type, layer.transform_param
        crop = t.crop_size if t.crop_size > 0 else None
        means = len(t.mean_value)
        channels = means if means > 1 else None
        if ltype == "MemoryData":
            p = layer.memory_data_param
            n, data = p.batch_size, (p.batch_size, p.channels, p.height, p.width)
        elif ltype == "HDF5Data":
            n, data = layer.hdf5_data_param.batch_size, None
        elif ltype == "ImageData":
            p = layer.image_data_param
            if (p.new_height > 0) != (p.new_width > 0):
                raise ShapeError(f"{where}: field 'image_data_param.new_height': new_height "
                                 "and new_width must be set together")
            hw = (crop, crop) if crop else ((p.new_height, p.new_width) if p.new_height
                                            else None)
            n = p.batch_size
            data = (n, 3 if p.is_color else 1) + hw if hw else None
        elif ltype == "WindowData":
            n = layer.window_data_param.batch_size
            if not crop:
                raise ShapeError(f"{where}: field 'transform_param.crop_size' must be > 0 "
                                 "for WindowData")
            data = (n, channels, crop, crop) if channels else None
        else:
            n = layer.data_param.batch_size
            data = (n, channels, crop, crop) if channels and crop else None
        field = {"Data": "data_param", "ImageData": "image_data_param",
                 "HDF5Data": "hdf5_data_param", "WindowData": "window_data_param",
                 "MemoryData": "memory_data_param"}[ltype]
        _positive(n, where, f"{field}.batch_size")
        if ltype == "HDF5Data":
            return [None] * len(tops)
        out = [self.data_shape(data), self.data_shape((n,))]
        return out[:len(tops)] + [None] * (len(tops) - 2)

    def convolution(self, layer, name, where, bottoms, tops):
        if not layer.HasField("convolution_param"):
            raise ShapeError(f"{where}: field 'convolution_param' is missing")
        p = layer.convolution_param
        field = "convolution_param"
        if not p.HasField("num_output"):
            raise ShapeError(f"{where}: field 'convolution_param.num_output' is missing")
        num = _positive(p.num_output, where, "convolution_param.num_output")
        group = _positive(p.group, where, "convolution_param.group")
        if len(bottoms) != len(tops):
            raise ShapeError(f"{where}: {len(bottoms)} bottoms but {len(tops)} tops")
        engine = p.Engine.Name(p.engine)
        learnable = _learnable(layer, 2 if p.bias_term else 1)
        s0 = bottoms[0]
        if s0 is None:
            for f, default in (("kernel", None), ("pad", 0), ("stride", 1), ("dilation", 1)):
                _spatial(p, f, where, field, default, None)
            if self.need_convs:
                raise self.ask(layer.bottom[0], where)
            return None, learnable
        if p.axis != 1:
            raise ShapeError(f"{where}: field 'convolution_param.axis': only 1 is supported")
        axes = len(s0) - 2
        if axes < 1:
            raise ShapeError(f"{where}: a convolution needs N x C x spatial axes, bottom has "
                             f"shape {s0}")
        kernel = _spatial(p, "kernel", where, field, None, axes, s0)
        pad = _spatial(p, "pad", where, field, 0, axes, s0)
        stride = _spatial(p, "stride", where, field, 1, axes, s0)
        dilation = _spatial(p, "dilation", where, field, 1, axes, s0)
        if any(s != s0 for s in bottoms):
            raise ShapeError(f"{where}: bottoms differ in shape: {bottoms}")
        c = s0[1]
        if c % group or num % group:
            raise ShapeError(f"{where}: field 'convolution_param.group': {group} does not "
                             f"divide input channels {c} and num_output {num}")
        out = tuple(out_size(x, k, pd, st, dl) for x, k, pd, st, dl in
                    zip(s0[2:], kernel, pad, stride, dilation))
        if min(out) < 1:
            raise ShapeError(f"{where}: the kernel {'x'.join(map(str, kernel))} is larger than "
                             f"the padded input {'x'.join(map(str, s0[2:]))}")
        off = off_cudnn_reason(engine, axes, any(d > 1 for d in dilation))
        if off is None and axes not in (2, 3):
            raise ShapeError(f"{where}: a {axes}-D convolution (bottom {s0}) with engine "
                             f"{engine}: CuDNNConvolution input must have 2 spatial axes (e.g., "
                             "height and width), or 3 through ucudnn. Use 'engine: CAFFE' for "
                             "general ND convolution. (Caffe's cuDNN layer)")
        if any(l.name == name for l in self.convs) or name in self.off_cudnn:
            raise ShapeError(f"{where}: a second Convolution layer named {name!r}: ucudnn plans "
                             "a net's convolutions by their names; rename one")
        if off is not None:         # Note [Convolutions that reach cuDNN]
            self.off_cudnn[name] = off
            return [(s0[0], num) + out] * len(tops), learnable
        layout = self.conv_layout(group)
        if axes == 3 and layout != "NCHW":
            raise ShapeError(f"{where}: a 3-D convolution in an {layout} net: layout NHWC needs "
                             "ucudnn, one group and 2 spatial axes (Caffe's cuDNN layer)")
        n, c, h, w = *s0[:2], *s0[-2:]         # 3-D: N x C x D x H x W
        depth = dict(d=s0[2], t=kernel[0]) if axes == 3 else {}
        bwd_data = any(self.need_backward[b] for b in layer.bottom)
        if len(layer.propagate_down):   # Caffe: an explicit propagate_down replaces the need
            bwd_data = any(layer.propagate_down)
        try:
            self.convs.append(LayerSpec(name=name, n=n, c=c, h=h, w=w, k=num, r=kernel[-2],
                                        s=kernel[-1], pad=pad, stride=stride, dilation=dilation,
                                        groups=group, count=len(bottoms),
                                        bwd_data=bwd_data or self.force,
                                        layout=layout, **depth))
        except LayerError as e:
            raise ShapeError(f"{where}: {e}") from None
        return [(n, num) + out] * len(tops), learnable

    def conv_layout(self, group: int) -> str:
        """The layout Caffe runs a convolution of ``group`` groups in: the net's
        ``ucudnn_param.layout`` for one group, NCHW for more (Note [NHWC in Caffe] in Caffe's
        ``include/caffe/util/layout.hpp``)."""
        if group != 1 or not self.net.HasField("ucudnn_param"):
            return "NCHW"
        return layout_of(self.net.ucudnn_param)

    def pooling(self, layer, where, s):
        if len(s) != 4:
            raise ShapeError(f"{where}: pooling needs an N x C x H x W bottom, got {s}")
        p = layer.pooling_param
        field = "pooling_param"
        n, c, h, w = s
        if p.global_pooling:
            if any(p.HasField(k) for k in ("kernel_size", "kernel_h", "kernel_w")):
                raise ShapeError(f"{where}: field 'pooling_param.kernel_size': global_pooling "
                                 "takes no kernel size")
            return (n, c, 1, 1)
        kh, kw = _spatial(p, "kernel", where, field, None)
        ph, pw = _spatial(p, "pad", where, field, 0)
        sh, sw = _spatial(p, "stride", where, field, 1)
        if ph >= kh or pw >= kw:
            raise ShapeError(f"{where}: field 'pooling_param.pad' must be smaller than the "
                             "kernel")
        ceil = p.round_mode == p.CEIL

        def out(x, k, pad, st):
            # integers throughout: a float quotient rounds sizes above 2^53
            o = (-((k - x - 2 * pad) // st) if ceil else (x + 2 * pad - k) // st) + 1
            if pad and (o - 1) * st >= x + pad:     # the last window must start inside the image
                o -= 1
            if o < 1:
                raise ShapeError(f"{where}: the pooling window is larger than the input")
            return o
        return (n, c, out(h, kh, ph, sh), out(w, kw, pw, sw))

    def slice(self, layer, where, s, tops):
        if not tops:        # Caffe's SliceLayer::MinTopBlobs
            raise ShapeError(f"{where}: Slice Layer takes at least 1 top blob(s) as output")
        p = layer.slice_param
        axis = p.slice_dim if p.HasField("slice_dim") else p.axis
        axis = _canon_axis(axis, len(s), where, "slice_param.axis")
        points = list(p.slice_point)
        if points:
            if len(points) != len(tops) - 1 or any(b <= a for a, b in zip([0] + points, points)) \
                    or points[-1] >= s[axis]:
                raise ShapeError(f"{where}: field 'slice_param.slice_point': {points} does not "
                                 f"split axis {axis} of {s} into {len(tops)} parts")
            sizes = [b - a for a, b in zip([0] + points, points + [s[axis]])]
        else:
            if s[axis] % len(tops):
                raise ShapeError(f"{where}: axis {axis} of {s} does not divide into "
                                 f"{len(tops)} equal parts")
            sizes = [s[axis] // len(tops)] * len(tops)
        return [s[:axis] + (k,) + s[axis + 1:] for k in sizes]


def _crop(layer, where, bottoms, tops):
    """Caffe's CropLayer: the first bottom cut to the second's size on the axes from
    ``crop_param.axis`` on, at the offsets given (one for all, or one per axis)."""
    if len(bottoms) != 2:
        raise ShapeError(f"{where}: expects 2 bottom blob(s), got {len(bottoms)}")
    p, (s, like) = layer.crop_param, bottoms
    axis = _canon_axis(p.axis, len(s), where, "crop_param.axis")
    offsets = list(p.offset)
    if len(like) != len(s):
        raise ShapeError(f"{where}: bottoms have {len(s)} and {len(like)} axes: {s}, {like}")
    if len(offsets) > 1 and len(offsets) != len(s) - axis:
        raise ShapeError(f"{where}: field 'crop_param.offset': number of offset values "
                         "specified must be equal to the number of dimensions following axis.")
    out = list(s)
    for i in range(axis, len(s)):
        off = offsets[0] if len(offsets) == 1 else offsets[i - axis] if offsets else 0
        if s[i] - off < like[i]:
            raise ShapeError(f"{where}: the crop for dimension {i} is out-of-bounds with size "
                             f"{like[i]} and offset {off} (bottom {s})")
        out[i] = like[i]
    return [tuple(out)], False


def _deconvolution(layer, where, bottoms, tops):
    """A Deconvolution's tops: each spatial axis ``stride * (x - 1) + dilation * (kernel -
    1) + 1 - 2 * pad``. Not planned: Caffe's factory gives it to its own cuDNN
    deconvolution layer (undilated, engine DEFAULT or CUDNN) or to im2col, not to
    ucudnn."""
    p, field = layer.convolution_param, "convolution_param"
    if not p.HasField("num_output"):
        raise ShapeError(f"{where}: field 'convolution_param.num_output' is missing")
    num = _positive(p.num_output, where, "convolution_param.num_output")
    group = _positive(p.group, where, "convolution_param.group")
    if not bottoms:
        raise ShapeError(f"{where}: expects at least 1 bottom blob(s), got 0")
    s0 = bottoms[0]
    if p.axis != 1:
        raise ShapeError(f"{where}: field 'convolution_param.axis': only 1 is supported")
    if len(bottoms) != len(tops) or any(s != s0 for s in bottoms):
        raise ShapeError(f"{where}: expects as many tops as bottoms, all of one shape: "
                         f"{bottoms}")
    axes = len(s0) - 2
    geometry = [_spatial(p, f, where, field, default, axes, s0) for f, default in
                (("kernel", None), ("pad", 0), ("stride", 1), ("dilation", 1))]
    if s0[1] % group or num % group:
        raise ShapeError(f"{where}: field 'convolution_param.group': {group} does not "
                         f"divide input channels {s0[1]} and num_output {num}")
    if p.engine == p.CUDNN and max(geometry[3]) > 1:
        raise ShapeError(f"{where}: field 'convolution_param.dilation': CuDNN doesn't "
                         f"support the dilated deconvolution at Layer {layer.name} "
                         "(Caffe's layer factory; engine: CAFFE runs it)")
    out = tuple(st * (x - 1) + dl * (k - 1) + 1 - 2 * pd
                for x, k, pd, st, dl in zip(s0[2:], *geometry))
    if min(out, default=1) < 1:
        raise ShapeError(f"{where}: pad {geometry[1]} leaves an output of size {out}")
    return [(s0[0], num) + out] * len(tops), _learnable(layer, 2 if p.bias_term else 1)


def _reshape(layer, where, s):
    """Caffe's Reshape layer: the top's shape for bottom shape ``s``."""
    p = layer.reshape_param
    dims = [_positive(d, where, "reshape_param.shape.dim", -1) for d in p.shape.dim]
    axis = _canon_axis(p.axis, len(s) + 1, where, "reshape_param.axis")
    end = len(s) if p.num_axes == -1 else axis + p.num_axes
    if not axis <= end <= len(s):
        raise ShapeError(f"{where}: field 'reshape_param.num_axes' out of range")
    mid = []
    for i, d in enumerate(dims):
        if d == 0:
            if axis + i >= len(s):
                raise ShapeError(f"{where}: dim 0 copies a missing axis")
            mid.append(s[axis + i])
        else:
            mid.append(d)
    if mid.count(-1) > 1:
        raise ShapeError(f"{where}: at most one dim may be -1")
    total = math.prod(s[axis:end])
    if -1 in mid:
        known = math.prod(d for d in mid if d != -1)
        if known == 0 or total % known:
            raise ShapeError(f"{where}: cannot infer the -1 dim of {dims} from {s}")
        mid[mid.index(-1)] = total // known
    if math.prod(mid) != total:
        raise ShapeError(f"{where}: reshape {dims} does not keep the count of {s}")
    return tuple(s[:axis]) + tuple(mid) + tuple(s[end:])


#: shape rules of layers that only need their bottoms' shapes: type -> (layer, where, bottom
#: shapes, top names) -> (top shapes, whether it has learnable parameters)
_RULES = {"Deconvolution": _deconvolution, "Crop": _crop}
