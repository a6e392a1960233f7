"""Caffe's ``ucudnn_param`` (caffe.proto's ``UcudnnParameter``) and the plan settings it means.

A net's ``ucudnn_param`` is every layer's default and a layer's own fields win
(:func:`merged_param`, as Caffe's net applies them); :func:`settings_of` turns the merged message
into a :class:`~ucudnn.plan.settings.PlanSettings`. The prototxt reader uses these for
``ucudnn plan --prototxt``, and the C API for Caffe's net (``ucudnn_net_plan`` hands over the
messages as text: :func:`net_settings`), so a prototxt means the same plan in both.
:func:`set_param` writes settings into a net (``ucudnn prototxt``).

Note [ucudnn_param merging]
    Caffe's ``MergeFrom``: the net's message is copied, then every field the layer sets
    replaces it, except ``micro_batch_size`` (a repeated field, which MergeFrom would append
    to): a layer that lists sizes replaces the net's list. ``optimizer: SHARED`` is net-wide
    (one arena that every layer reuses, Note [Shared arena] in ucudnn/plan/network.py): a layer
    may not ask for it unless the net does. ``layout`` is net-wide too (the blobs between the
    layers are in it, Note [NHWC in Caffe] in Caffe's ``include/caffe/util/layout.hpp``): a
    layer may not set it.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from ..plan.settings import PlanSettings
from ..vocab import ENGINE, LAYOUT, MATH, OPTIMIZER, POLICY, InputError
from .proto import PrototxtError, load_caffe_pb2, locate
from .textscan import position

__all__ = ["ParamError", "problem", "merged_param", "settings_of", "layout_of",
           "check_shared_is_net_wide", "check_params", "net_settings", "set_param"]


class ParamError(PrototxtError):
    """A ucudnn_param that Caffe's ucudnn layer would refuse; the message names the layer and
    the field."""


_LEAST = (("workspace_limit", 0), ("total_workspace", 0), ("benchmark_repeats", 1))


def problem(p) -> Optional[Tuple[str, Optional[int], str]]:
    """(field, index of the bad value of a repeated one, what is wrong) for a UcudnnParameter
    that Caffe's ucudnn layer refuses; None where it is valid."""
    for field, least in _LEAST:
        v = getattr(p, field)
        if v < least:
            return field, None, f"must be >= {least}, got {v}"
    bad = [i for i, b in enumerate(p.micro_batch_size) if b < 1]
    if bad:
        return "micro_batch_size", bad[0], f"must be >= 1, got {p.micro_batch_size[bad[0]]}"
    return None


def settings_of(p, where: str, dtype: str = "float32") -> PlanSettings:
    """The settings a merged ``UcudnnParameter`` ``p`` means (Note [Workspace budget] in
    :mod:`ucudnn.plan.settings`: an unset ``total_workspace`` is limit x calls); errors name
    ``where`` and the field."""
    bad = problem(p)
    if bad:
        raise ParamError(f"{where}: field 'ucudnn_param.{bad[0]}' {bad[2]}")
    try:
        return PlanSettings(policy=POLICY(p.policy), optimizer=OPTIMIZER(p.optimizer),
                            limit=p.workspace_limit,
                            budget=p.total_workspace if p.HasField("total_workspace") else None,
                            sizes=tuple(p.micro_batch_size) or None, math=MATH(p.math),
                            dtype=dtype, repeats=p.benchmark_repeats,
                            cache_path=p.cache_path or None,
                            exclude_winograd=p.exclude_winograd, engines=ENGINE(p.engines),
                            layout=layout_of(p))
    except InputError as e:
        raise ParamError(f"{where}: ucudnn_param: {e}") from None


def merged_param(net_param, layer_param):
    """The UcudnnParameter a layer runs with (Note [ucudnn_param merging]); ``net_param`` or
    ``layer_param`` None where it is not set; None where neither is."""
    if net_param is None:
        return layer_param
    merged = type(net_param)()
    merged.CopyFrom(net_param)
    if layer_param is not None:
        if len(layer_param.micro_batch_size):
            merged.ClearField("micro_batch_size")
        merged.MergeFrom(layer_param)
    return merged


_SHARED_MSG = ("field 'ucudnn_param.optimizer' SHARED is net-wide (one arena that every layer "
               "reuses): set it in the net's ucudnn_param")


def _shared_on_layer(net_param, layer_param) -> bool:
    shared = OPTIMIZER.code("shared")
    return (layer_param is not None and layer_param.HasField("optimizer")
            and layer_param.optimizer == shared
            and (net_param is None or net_param.optimizer != shared))


_LAYOUT_MSG = ("field 'ucudnn_param.layout' is net-wide (the blobs between the layers are in "
               "it): set it in the net's ucudnn_param")


def _has(message, field: str) -> bool:
    """Whether ``message`` sets ``field``; False where its caffe.proto has no such field (a
    Caffe before caffe_patch/0011)."""
    return field in message.DESCRIPTOR.fields_by_name and message.HasField(field)


def layout_of(p) -> str:
    """The layout a UcudnnParameter ``p`` asks for (None: no message): NCHW where it is unset
    or where its caffe.proto has no such field."""
    return LAYOUT(p.layout) if p is not None and _has(p, "layout") else "NCHW"


def _layout_on_layer(layer_param) -> bool:
    return layer_param is not None and _has(layer_param, "layout")


def check_shared_is_net_wide(net_param, layer_param, where: str) -> None:
    """Refuse ``optimizer: SHARED`` on a layer of a net that does not set it, and ``layout``
    on any layer (Note [ucudnn_param merging])."""
    if _shared_on_layer(net_param, layer_param):
        raise ParamError(f"{where}: {_SHARED_MSG}")
    if _layout_on_layer(layer_param):
        raise ParamError(f"{where}: {_LAYOUT_MSG}")


def check_params(net, text: str, source: str) -> None:
    """Every ucudnn_param of ``net`` (read from ``text``) as Caffe's ucudnn layer checks it:
    the error names ``source``, the line and column of the field and the layer."""

    def fail(steps, layer, what):
        at = position(text, steps)
        where = locate(text, source, at, layer) if at is not None else (
            f"{source}: " + ("net" if layer is None else f"layer {layer!r}"))
        raise ParamError(f"{where}: {what}")
    net_param = net.ucudnn_param if net.HasField("ucudnn_param") else None
    if net_param is not None and problem(net_param):
        field, index, what = problem(net_param)
        fail([("ucudnn_param", None), (field, index)], None, f"field 'ucudnn_param.{field}' "
             f"{what}")
    for i, layer in enumerate(net.layer):
        own = layer.ucudnn_param if layer.HasField("ucudnn_param") else None
        if own is not None and problem(own):
            field, index, what = problem(own)
            fail([("layer", i), ("ucudnn_param", None), (field, index)], layer.name,
                 f"field 'ucudnn_param.{field}' {what}")
        if _shared_on_layer(net_param, own):
            fail([("layer", i), ("ucudnn_param", None), ("optimizer", None)], layer.name,
                 _SHARED_MSG)
        if _layout_on_layer(own):
            fail([("layer", i), ("ucudnn_param", None), ("layout", None)], layer.name,
                 _LAYOUT_MSG)
        if _has(layer, "layout"):
            fail([("layer", i), ("layout", None)], layer.name, "field 'layout' is set by "
                 "Caffe's net from the net's ucudnn_param.layout: remove it")


def _parse(pb2, text: Optional[str], where: str):
    """The UcudnnParameter of ``text``; None for no message (``text`` None), the defaults for
    an empty one (``ucudnn_param {}``)."""
    from google.protobuf import text_format
    if text is None:
        return None
    msg = pb2.UcudnnParameter()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise ParamError(f"{where}: ucudnn_param: {str(e)[:300]}") from None
    return msg


def net_settings(net_text: Optional[str], layer_texts: Mapping[str, Optional[str]], *,
                 dtypes: Mapping[str, str], net: str = "net") -> Dict[str, PlanSettings]:
    """Each layer's settings from ucudnn_param messages in text format: the net's and every
    layer's own (None: no message; "": a message with every field at its default; Note
    [ucudnn_param merging]). What the C API makes of
    the messages Caffe's net hands over. A layer with neither is refused: only layers that
    run through ucudnn are handed over."""
    pb2 = load_caffe_pb2()
    net_param = _parse(pb2, net_text, f"net {net!r}")
    out = {}
    for name, text in layer_texts.items():
        where = f"net {net!r}: layer {name!r}"
        own = _parse(pb2, text, where)
        check_shared_is_net_wide(net_param, own, where)
        p = merged_param(net_param, own)
        if p is None:
            raise ParamError(f"{where}: no ucudnn_param on the layer or the net")
        out[name] = settings_of(p, where, dtypes[name])
    return out


_PROTO = {"policy": POLICY, "optimizer": OPTIMIZER, "math": MATH, "engines": ENGINE,
          "layout": LAYOUT}


def set_param(p, settings: Mapping[str, object]) -> None:
    """Write ``settings`` (PlanSettings field names: policy, optimizer, limit, budget, sizes,
    math, repeats, cache_path, exclude_winograd, engines, layout; values already checked) into
    the UcudnnParameter ``p``; a field absent from ``settings`` is left as it is."""
    for field, value in settings.items():
        if field in _PROTO:
            setattr(p, field, _PROTO[field].code(value))
        elif field == "limit":
            p.workspace_limit = value
        elif field == "budget":
            p.total_workspace = value
        elif field == "sizes":
            del p.micro_batch_size[:]
            p.micro_batch_size.extend(value)
        elif field == "repeats":
            p.benchmark_repeats = value
        elif field in ("cache_path", "exclude_winograd"):
            setattr(p, field, value)
        else:
            raise ValueError(f"set_param: unknown setting {field!r}")
