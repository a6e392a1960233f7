"""Caffe network definitions (``.prototxt``) without Caffe: what ``ucudnn plan --prototxt`` and
``ucudnn prototxt`` need of a net.

The text is parsed by protobuf's ``text_format`` into Caffe's ``NetParameter``
(:mod:`ucudnn.caffe.proto`). Over its layers of one phase, :func:`conv_layers` runs Caffe's
shape rules (:mod:`ucudnn.caffe.shapes`) and returns a :class:`~ucudnn.plan.layers.LayerSpec`
per ``Convolution`` layer; :func:`ucudnn_settings` gives the settings that Caffe's net makes of
the net's and each layer's ``ucudnn_param`` (:mod:`ucudnn.caffe.params`); :func:`check_net`
refuses, in both phases, what Caffe's ``Net::Init`` would refuse. :func:`load_prototxt` does the
first two for a file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..plan.layers import LayerSpec
from ..plan.settings import PlanSettings
from .params import check_params, check_shared_is_net_wide, merged_param, settings_of
from .proto import PrototxtError, check_layer_types, load_caffe_pb2, parse_net, read_text
from .shapes import PHASES, NetShapes, ShapeError, phase_layers, rule_stages
from .textscan import layer_lines, tokens

__all__ = ["PrototxtError", "ShapeError", "PrototxtNet", "parse_net_text", "conv_layers",
           "infer_shapes", "ucudnn_settings", "check_net", "load_prototxt", "read_prototxt",
           "merge_shapes"]

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class PrototxtNet:
    """What ``ucudnn plan --prototxt`` needs of a net, for one phase and batch."""
    source: str
    phase: str
    #: one per Convolution layer of the phase, in net order (Note [Convolution layers as
    #: LayerSpec] in ucudnn/caffe/shapes.py)
    layers: List[LayerSpec]
    #: the net-wide ucudnn_param's settings; None: the net sets none
    net_ucudnn: Optional[PlanSettings] = None
    #: per layer of ``layers``: its ucudnn_param merged over the net's, as Caffe does; None:
    #: the layer runs as stock Caffe
    ucudnn: Dict[str, Optional[PlanSettings]] = field(default_factory=dict)
    #: the Convolution layers of the phase Caffe runs without cuDNN, name -> why (Note
    #: [Convolutions that reach cuDNN] in ucudnn/caffe/shapes.py); not in ``layers``
    off_cudnn: Dict[str, str] = field(default_factory=dict)


def parse_net_text(text: str, source: str = "<prototxt>", caffe_proto: Optional[str] = None,
                   layer_types: Sequence[str] = ()):
    """A ``NetParameter`` from prototxt text, read as Caffe reads it (Note [Strict reading]
    in :mod:`ucudnn.caffe.proto`); ``layer_types``: a fork's types to take (Note [Unknown
    layer types] there)."""
    net = parse_net(load_caffe_pb2(caffe_proto), text, source)
    check_layer_types(net, text, source, layer_types)
    return net


def infer_shapes(net, phase: str = "TRAIN", batch: Optional[int] = None,
                 source: str = "<prototxt>",
                 given: Optional[Mapping[str, Shape]] = None) -> Dict[str, Optional[Shape]]:
    """Every blob's shape after the layers of ``phase`` (None: unknown, Note [Shapes the
    prototxt does not settle])."""
    return dict(NetShapes(net, phase, batch=batch, given=given, source=source,
                          need_convs=False).run().shapes)


def conv_layers(net, phase: str = "TRAIN", batch: Optional[int] = None,
                source: str = "<prototxt>",
                given: Optional[Mapping[str, Shape]] = None) -> List[LayerSpec]:
    """A LayerSpec per Convolution layer of ``phase`` ([] for a net without one).

    ``net`` is a parsed ``NetParameter``; ``batch`` replaces the batch size (first axis) of
    every data layer and net input; ``given``: shapes of blobs the prototxt does not settle
    (``--input-shape``)."""
    return NetShapes(net, phase, batch=batch, given=given, source=source).run().convs


def ucudnn_settings(net, phase: str = "TRAIN", source: str = "<prototxt>",
                    text: Optional[str] = None
                    ) -> Tuple[Optional[PlanSettings], Dict[str, Optional[PlanSettings]]]:
    """(the net's ucudnn_param settings, {Convolution layer of ``phase``: its merged
    settings}); None where none is set (the layer runs as stock Caffe). Invalid values (a
    negative workspace) are errors naming the layer and field (and its line, given the
    net's ``text``)."""
    net_p = net.ucudnn_param if net.HasField("ucudnn_param") else None
    net_s = settings_of(net_p, f"{source}: net") if net_p is not None else None
    per_layer = {}
    lines = None if text is None else layer_lines(text, len(net.layer))
    for layer, name, where in phase_layers(net, phase, source, lines=lines):
        own = layer.ucudnn_param if layer.HasField("ucudnn_param") else None
        check_shared_is_net_wide(net_p, own, where)
        if layer.type == "Convolution":
            p = merged_param(net_p, own)
            per_layer[name] = None if p is None else settings_of(p, where)
    return net_s, per_layer


def check_net(net, text: str, source: str = "<prototxt>") -> List[int]:
    """Refuse, in either phase, what Caffe's ``Net::Init`` and its layers' set-up refuse: a
    bottom nobody produces, ``pad`` with ``pad_h``, a kernel larger than the padded input, a
    ucudnn_param value (named at its line of ``text``)... Shapes the prototxt does not settle
    are not checked. A net without layers is refused too. Returns the mini-batch of every
    Convolution layer whose input shape the prototxt settles, in both phases."""
    if not len(net.layer):
        what = "an empty file" if next(tokens(text), None) is None else "a net without layers"
        raise PrototxtError(f"{source}: {what}: no Caffe net to write a variant of")
    check_layer_types(net, text, source)
    check_params(net, text, source)
    batches = []
    for phase in PHASES:
        batches += [l.n for l in _check_phase(net, phase, source, text).convs]
        ucudnn_settings(net, phase, source, text)
    return batches


def _check_phase(net, phase: str, source: str, text: Optional[str] = None) -> NetShapes:
    """The net of ``phase`` in its own state, else in the first stage its rules name that
    builds (a solver's test nets run in such a stage); the error of its own state where none
    does."""
    try:
        return NetShapes(net, phase, source=source, need_convs=False, text=text).run()
    except ShapeError as first:
        for stage in rule_stages(net):
            try:
                return NetShapes(net, phase, source=source, need_convs=False,
                                 stages=list(net.state.stage) + [stage], text=text).run()
            except ShapeError:
                continue
        raise first


def load_prototxt(path, phase: str = "TRAIN", batch: Optional[int] = None,
                  caffe_proto: Optional[str] = None,
                  given: Optional[Mapping[str, Shape]] = None,
                  layer_shapes: Optional[Mapping[str, int]] = None,
                  text: Optional[str] = None) -> PrototxtNet:
    """The convolution layers and ucudnn settings of the prototxt file at ``path``;
    ``layer_shapes``: {a fork's layer type: the bottom whose shape its tops have}
    (``--layer-shape``, :func:`~ucudnn.caffe.shapes.parse_layer_shape`); ``text``: the file's
    text where the caller has read it already (else it is read here)."""
    source = str(path)
    layer_shapes = dict(layer_shapes or {})
    text = read_text(path) if text is None else text
    net = parse_net_text(text, source, caffe_proto, tuple(layer_shapes))
    shapes = NetShapes(net, phase, batch=batch, given=given, source=source,
                       layer_shapes=layer_shapes, text=text).run()
    net_s, per_layer = ucudnn_settings(net, phase, source, text)
    per_layer = {k: v for k, v in per_layer.items() if k not in shapes.off_cudnn}
    return PrototxtNet(source=source, phase=phase, layers=shapes.convs, net_ucudnn=net_s,
                       ucudnn=per_layer, off_cudnn=dict(shapes.off_cudnn))


def read_prototxt(path, phase: str = "TRAIN", batch: Optional[int] = None,
                  caffe_proto: Optional[str] = None) -> List[LayerSpec]:
    """:func:`conv_layers` of the prototxt file at ``path``."""
    return load_prototxt(path, phase, batch, caffe_proto).layers


def merge_shapes(layers: Sequence[LayerSpec]) -> List[LayerSpec]:
    """Merge layers of identical geometry (and bwd_data) into one, summing their counts.

    The first layer of each shape keeps its name and position.
    """
    import dataclasses
    out: Dict[tuple, LayerSpec] = {}
    for l in layers:
        key = (l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride, l.dilation, l.groups,
               l.bwd_data)
        if key in out:
            out[key] = dataclasses.replace(out[key], count=out[key].count + l.count)
        else:
            out[key] = l
    return list(out.values())
