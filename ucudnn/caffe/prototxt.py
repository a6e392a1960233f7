"""Caffe network definitions (``.prototxt``) without Caffe: parsing and shape inference.

:func:`parse_prototxt` reads protobuf text format into nested dicts without a schema: a field
seen once holds its value, a field seen several times a list of values (use :func:`as_list` for
fields that may repeat). Messages become dicts, ``true``/``false`` bools, other identifiers
(enum values such as ``MAX`` or ``TRAIN``) strings.

:func:`conv_layers` runs Caffe's shape rules over the layers of one phase and returns a
:class:`~ucudnn.plan.network.LayerSpec` for every ``Convolution`` layer.

Note [Grouped convolutions in Caffe]
    Caffe's cuDNN layer calls cuDNN once per group, on C/g input and K/g output channels. Such a
    layer becomes one LayerSpec with C/g, K/g, ``groups=1`` and ``count=g`` (g kernel instances
    per iteration), as in the benchmark tables of ``../shared/data``.

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
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..plan.network import LayerSpec

__all__ = ["PrototxtError", "parse_prototxt", "as_list", "conv_layers", "read_prototxt",
           "merge_shapes", "infer_shapes"]


class PrototxtError(ValueError):
    """Malformed or unsupported prototxt; the message names the source, line/layer and field."""


# ---------------------------------------------------------------------------------------------
# Text format parser
# ---------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+) | (?P<nl>\n) | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?[fF]?)
               (?![A-Za-z_0-9.]))
  | (?P<ident>[-+]?[A-Za-z_][A-Za-z_0-9.]*)
  | (?P<punct>[:{}<>\[\],;])
""", re.VERBOSE)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v",
            "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _unescape(body: str, where: str) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        i += 1
        e = body[i]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 1
        elif e in "xX":
            m = re.match(r"[0-9a-fA-F]{1,2}", body[i + 1:])
            if not m:
                raise PrototxtError(f"{where}: bad \\x escape in string")
            out.append(chr(int(m.group(), 16)))
            i += 1 + len(m.group())
        elif e in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i:])
            out.append(chr(int(m.group(), 8)))
            i += len(m.group())
        else:
            raise PrototxtError(f"{where}: unknown escape \\{e} in string")
    return "".join(out)


def _tokens(text: str, source: str) -> List[Tuple[str, Any, str]]:
    toks, pos, line, col0 = [], 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        where = f"{source}:{line}:{pos - col0 + 1}"
        if not m:
            raise PrototxtError(f"{where}: unexpected character {text[pos]!r}")
        kind, value = m.lastgroup, m.group()
        pos = m.end()
        if kind == "nl":
            line, col0 = line + 1, pos
        elif kind == "string":
            toks.append(("string", _unescape(value[1:-1], where), where))
        elif kind in ("number", "ident", "punct"):
            toks.append((kind, value, where))
    return toks


def _number(text: str, where: str):
    t = text.lower()
    if t.lstrip("+-") in ("inf", "infinity", "nan"):
        return float(t)
    if "x" in t:
        return int(t, 16)
    if any(c in t for c in ".e") or t.endswith("f"):
        try:
            return float(t.rstrip("f"))
        except ValueError:
            raise PrototxtError(f"{where}: cannot parse number {text!r}") from None
    return int(t, 10)


class _Parser:
    def __init__(self, text: str, source: str):
        self.toks = _tokens(text, source)
        self.i = 0
        self.source = source

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", None, f"{self.source}:end")

    def take(self):
        tok = self.peek()
        self.i += 1
        return tok

    def expect(self, value: str):
        kind, v, where = self.take()
        if v != value or kind != "punct":
            raise PrototxtError(f"{where}: expected {value!r}, got {v if v is not None else 'end of input'!r}")

    def message(self, close: Optional[str]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        while True:
            kind, v, where = self.peek()
            if kind == "eof":
                if close is not None:
                    raise PrototxtError(f"{where}: missing {close!r} at end of input")
                return out
            if kind == "punct" and v == close:
                self.take()
                return out
            if kind == "punct" and v in ",;":
                self.take()
                continue
            if kind != "ident":
                raise PrototxtError(f"{where}: expected a field name, got {v!r}")
            self.take()
            name = v
            if self.peek()[1] == "[" and self.peek()[0] == "punct":   # extension [a.b.c]
                raise PrototxtError(f"{where}: extensions are not supported")
            k2, v2, w2 = self.peek()
            colon = k2 == "punct" and v2 == ":"
            if colon:
                self.take()
                k2, v2, w2 = self.peek()
            if k2 == "punct" and v2 in "{<":
                self.take()
                values = [self.message("}" if v2 == "{" else ">")]
            elif not colon:
                raise PrototxtError(f"{w2}: expected ':' or '{{' after field {name!r}")
            elif k2 == "punct" and v2 == "[":
                self.take()
                values = self.list_values()
            else:
                values = [self.scalar()]
            for value in values:
                if name in out:
                    if not isinstance(out[name], _Repeated):
                        out[name] = _Repeated([out[name]])
                    out[name].append(value)
                else:
                    out[name] = value

    def list_values(self) -> list:
        values = []
        if self.peek()[1] == "]":
            self.take()
            return values
        while True:
            k, v, w = self.peek()
            if k == "punct" and v in "{<":
                self.take()
                values.append(self.message("}" if v == "{" else ">"))
            else:
                values.append(self.scalar())
            k, v, w = self.take()
            if v == "]":
                return values
            if v != ",":
                raise PrototxtError(f"{w}: expected ',' or ']' in a list, got {v!r}")

    def scalar(self):
        kind, v, where = self.take()
        if kind == "string":
            parts = [v]
            while self.peek()[0] == "string":          # adjacent strings concatenate
                parts.append(self.take()[1])
            return "".join(parts)
        if kind == "number":
            return _number(v, where)
        if kind == "ident":
            low = v.lower()
            if low.lstrip("+-") in ("inf", "infinity", "nan"):
                return float(low)
            if v in ("true", "True", "t"):
                return True
            if v in ("false", "False", "f"):
                return False
            if v[0] in "+-":
                raise PrototxtError(f"{where}: cannot parse value {v!r}")
            return v
        raise PrototxtError(f"{where}: expected a value, got {v if v is not None else 'end of input'!r}")


class _Repeated(list):
    """A field that occurred more than once (a plain list for callers)."""


def parse_prototxt(text: str, source: str = "<prototxt>") -> Dict[str, Any]:
    """Parse protobuf text format into nested dicts (see the module docstring)."""
    out = _Parser(text, source).message(None)
    return _plain(out)


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def as_list(value) -> list:
    """A possibly repeated field as a list (``None`` -> ``[]``)."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


# ---------------------------------------------------------------------------------------------
# Shape inference
# ---------------------------------------------------------------------------------------------

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


def _int(value, where: str, field: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PrototxtError(f"{where}: field {field!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _dims(shape_msg, where: str, field: str) -> Shape:
    if not isinstance(shape_msg, dict):
        raise PrototxtError(f"{where}: field {field!r} must be a message {{ dim: ... }}")
    dims = tuple(_int(d, where, f"{field}.dim", 0) for d in as_list(shape_msg.get("dim")))
    if not dims:
        raise PrototxtError(f"{where}: field {field!r} has no dim")
    return dims


def _rule_matches(rule: dict, phase: str, level: int, stages: Sequence[str]) -> bool:
    """Caffe's StateMeetsRule."""
    if "phase" in rule and rule["phase"] != phase:
        return False
    if "min_level" in rule and level < rule["min_level"]:
        return False
    if "max_level" in rule and level > rule["max_level"]:
        return False
    if any(s not in stages for s in as_list(rule.get("stage"))):
        return False
    if any(s in stages for s in as_list(rule.get("not_stage"))):
        return False
    return True


def _included(layer: dict, phase: str, where: str) -> bool:
    inc, exc = as_list(layer.get("include")), as_list(layer.get("exclude"))
    if inc and exc:
        raise PrototxtError(f"{where}: a layer may have include or exclude rules, not both")
    for r in inc + exc:
        if not isinstance(r, dict) or ("phase" in r and r["phase"] not in _PHASES):
            raise PrototxtError(f"{where}: field 'include/exclude.phase' must be TRAIN or TEST, "
                                f"got {r!r}")
    if inc:
        return any(_rule_matches(r, phase, 0, ()) for r in inc)
    return not any(_rule_matches(r, phase, 0, ()) for r in exc)


def _spatial(param: dict, name: str, where: str, default: int, n: int = 2) -> Tuple[int, int]:
    """Caffe's ``x`` / ``x_h``+``x_w`` pairs (kernel_size, pad, stride, dilation)."""
    plain = "kernel_size" if name == "kernel" else name
    h, w = param.get(f"{name}_h"), param.get(f"{name}_w")
    vals = as_list(param.get(plain))
    if h is not None or w is not None:
        if vals:
            raise PrototxtError(f"{where}: give either {plain} or {name}_h/{name}_w, not both")
        if h is None or w is None:
            raise PrototxtError(f"{where}: {name}_h and {name}_w must be given together")
        vals = [h, w]
    if not vals:
        if default is None:
            raise PrototxtError(f"{where}: field {plain!r} is missing")
        vals = [default]
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n:
        raise PrototxtError(f"{where}: field {plain!r}: {len(vals)} values for {n} spatial axes")
    minimum = 1 if name in ("kernel", "stride", "dilation") else 0
    return tuple(_int(v, where, plain, minimum) for v in vals)


def _learnable(layer: dict, n_blobs: int) -> bool:
    """Whether any of the layer's ``n_blobs`` parameter blobs has lr_mult != 0."""
    specs = as_list(layer.get("param"))
    for i in range(n_blobs):
        lr = specs[i].get("lr_mult", 1.0) if i < len(specs) and isinstance(specs[i], dict) else 1.0
        if lr != 0:
            return True
    return False


def _canon_axis(axis: int, ndim: int, where: str, field: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise PrototxtError(f"{where}: field {field!r}: axis {axis} out of range for {ndim} axes")
    return axis % ndim


class _Net:
    def __init__(self, net: dict, phase: str, batch: Optional[int], source: str):
        if phase not in _PHASES:
            raise PrototxtError(f"phase: expected TRAIN or TEST, got {phase!r}")
        if batch is not None and (not isinstance(batch, int) or batch < 1):
            raise PrototxtError(f"batch: must be a positive integer, got {batch!r}")
        self.net, self.phase, self.batch, self.source = net, phase, batch, source
        self.shapes: Dict[str, Shape] = {}
        self.need_backward: Dict[str, bool] = {}
        self.force = bool(net.get("force_backward", False))
        self.convs: List[LayerSpec] = []

    def data_shape(self, dims: Shape, where: str) -> Shape:
        if self.batch is not None and dims:
            dims = (self.batch,) + tuple(dims[1:])
        return tuple(dims)

    def add_blob(self, name: str, shape: Shape, need_backward: bool) -> None:
        self.shapes[name] = shape
        self.need_backward[name] = need_backward or self.force

    def net_inputs(self) -> None:
        inputs = as_list(self.net.get("input"))
        where = f"{self.source}: net input"
        shapes = [_dims(s, where, "input_shape") for s in as_list(self.net.get("input_shape"))]
        dims = as_list(self.net.get("input_dim"))
        if dims:
            if len(dims) != 4 * len(inputs):
                raise PrototxtError(f"{where}: field 'input_dim': {len(dims)} values for "
                                    f"{len(inputs)} input(s), expected 4 per input")
            shapes = [tuple(_int(d, where, "input_dim") for d in dims[4 * i:4 * i + 4])
                      for i in range(len(inputs))]
        if len(shapes) != len(inputs):
            raise PrototxtError(f"{where}: {len(inputs)} input(s) but {len(shapes)} "
                                "input_shape/input_dim shape(s)")
        for name, shape in zip(inputs, shapes):
            self.add_blob(name, self.data_shape(shape, where), False)

    def run(self) -> List[LayerSpec]:
        self.net_inputs()
        layers = as_list(self.net.get("layer"))
        if not layers and self.net.get("layers"):
            raise PrototxtError(f"{self.source}: V1 'layers' definitions are not supported; "
                                "upgrade the net with Caffe's upgrade_net_proto_text")
        seen = set()
        for i, layer in enumerate(layers):
            if not isinstance(layer, dict):
                raise PrototxtError(f"{self.source}: layer #{i + 1} is not a message")
            name = layer.get("name", f"#{i + 1}")
            where = f"{self.source}: layer {name!r}"
            ltype = layer.get("type")
            if not isinstance(ltype, str):
                raise PrototxtError(f"{where}: field 'type' is missing")
            where = f"{self.source}: layer {name!r} (type {ltype})"
            if not _included(layer, self.phase, where):
                continue
            if name in seen:
                raise PrototxtError(f"{where}: duplicate layer name in phase {self.phase}")
            seen.add(name)
            bottoms = as_list(layer.get("bottom"))
            tops = as_list(layer.get("top"))
            for b in bottoms:
                if b not in self.shapes:
                    raise PrototxtError(f"{where}: bottom blob {b!r} is not produced by any "
                                        f"earlier layer or net input in phase {self.phase}")
            in_shapes = [self.shapes[b] for b in bottoms]
            in_backward = any(self.need_backward[b] for b in bottoms)
            out_shapes, learnable = self.layer(layer, ltype, name, where, in_shapes, tops)
            if len(out_shapes) != len(tops):
                raise PrototxtError(f"{where}: {len(tops)} top blob(s), the layer produces "
                                    f"{len(out_shapes)}")
            for t, s in zip(tops, out_shapes):
                self.add_blob(t, s, in_backward or learnable)
        return self.convs

    # -- layers ------------------------------------------------------------------------------
    def layer(self, layer, ltype, name, where, bottoms, tops):
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
            shapes = [_dims(s, where, "input_param.shape")
                      for s in as_list(layer.get("input_param", {}).get("shape"))]
            return self.broadcast_shapes(shapes, tops, where, "input_param.shape"), False
        if ltype == "DummyData":
            need(0)
            p = layer.get("dummy_data_param", {})
            shapes = [_dims(s, where, "dummy_data_param.shape") for s in as_list(p.get("shape"))]
            legacy = [as_list(p.get(f)) for f in ("num", "channels", "height", "width")]
            if any(legacy):
                if shapes:
                    raise PrototxtError(f"{where}: give dummy_data_param shape or "
                                        "num/channels/height/width, not both")
                n = max(len(x) for x in legacy)
                if any(len(x) not in (1, n) for x in legacy) or not all(legacy):
                    raise PrototxtError(f"{where}: dummy_data_param num/channels/height/width "
                                        "must each be given once or once per top")
                shapes = [tuple(_int(x[i if len(x) > 1 else 0], where, f, 0)
                                for x, f in zip(legacy, ("num", "channels", "height", "width")))
                          for i in range(n)]
            return self.broadcast_shapes(shapes, tops, where, "dummy_data_param.shape"), False
        if ltype == "Convolution":
            need(1, None)
            return self.convolution(layer, name, where, bottoms, tops)
        if ltype == "Pooling":
            need(1)
            return [self.pooling(layer, where, bottoms[0])] * len(tops), False
        if ltype == "InnerProduct":
            need(1)
            p = layer.get("inner_product_param", {})
            num = _int(p.get("num_output"), where, "inner_product_param.num_output", 1)
            axis = _canon_axis(p.get("axis", 1), len(bottoms[0]), where, "inner_product_param.axis")
            n_blobs = 2 if p.get("bias_term", True) else 1
            return [bottoms[0][:axis] + (num,)], _learnable(layer, n_blobs)
        if ltype in _ELEMENTWISE:
            need(1, 2 if ltype in ("Scale", "Bias") else 1)
            learnable = False
            if ltype == "Scale":
                bias = layer.get("scale_param", {}).get("bias_term", False)
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
            p = layer.get("concat_param", {})
            axis = p.get("axis", p.get("concat_dim", 1))
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
            p = layer.get("flatten_param", {})
            s = bottoms[0]
            a = _canon_axis(p.get("axis", 1), len(s), where, "flatten_param.axis")
            e = _canon_axis(p.get("end_axis", -1), len(s), where, "flatten_param.end_axis")
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
                    axis = layer.get("accuracy_param", {}).get("axis", 1)
                    out.append((bottoms[0][_canon_axis(axis, len(bottoms[0]), where)],))
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
        return [self.data_shape(s, where) for s in shapes]

    def convolution(self, layer, name, where, bottoms, tops):
        p = layer.get("convolution_param")
        if not isinstance(p, dict):
            raise PrototxtError(f"{where}: field 'convolution_param' is missing")
        num = _int(p.get("num_output"), where, "convolution_param.num_output", 1)
        group = _int(p.get("group", 1), where, "convolution_param.group", 1)
        if p.get("axis", 1) != 1:
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
        bwd_data = any(self.need_backward[b] for b in as_list(layer.get("bottom")))
        pd = as_list(layer.get("propagate_down"))
        if pd:                  # Caffe: an explicit propagate_down replaces the inferred need
            bwd_data = any(pd)
        bwd_data = bwd_data or self.force
        self.convs.append(LayerSpec(name=name, n=n, c=c // group, h=h, w=w, k=num // group,
                                    r=kh, s=kw, pad=ph, stride=sh, dilation=dh, groups=1,
                                    count=group * len(bottoms), bwd_data=bwd_data))
        n_blobs = 2 if p.get("bias_term", True) else 1
        return [(n, num, oh, ow)] * len(tops), _learnable(layer, n_blobs)

    def pooling(self, layer, where, s):
        if len(s) != 4:
            raise PrototxtError(f"{where}: pooling needs an N x C x H x W bottom, got {s}")
        p = layer.get("pooling_param", {})
        n, c, h, w = s
        if p.get("global_pooling", False):
            if any(k in p for k in ("kernel_size", "kernel_h", "kernel_w")):
                raise PrototxtError(f"{where}: global_pooling takes no kernel size")
            return (n, c, 1, 1)
        kh, kw = _spatial(p, "kernel", where, None)
        ph, pw = _spatial(p, "pad", where, 0)
        sh, sw = _spatial(p, "stride", where, 1)
        if ph >= kh or pw >= kw:
            raise PrototxtError(f"{where}: pad must be smaller than the kernel")
        mode = p.get("round_mode", "CEIL")
        if mode not in ("CEIL", "FLOOR"):
            raise PrototxtError(f"{where}: field 'pooling_param.round_mode' must be CEIL or FLOOR")
        rnd = math.ceil if mode == "CEIL" else math.floor

        def out(x, k, pad, st):
            o = int(rnd((x + 2 * pad - k) / st)) + 1
            if pad and (o - 1) * st >= x + pad:     # the last window must start inside the image
                o -= 1
            if o < 1:
                raise PrototxtError(f"{where}: the pooling window is larger than the input")
            return o
        return (n, c, out(h, kh, ph, sh), out(w, kw, pw, sw))

    def reshape(self, layer, where, s):
        p = layer.get("reshape_param", {})
        shape = p.get("shape", {})
        if not isinstance(shape, dict):
            raise PrototxtError(f"{where}: field 'reshape_param.shape' must be a message")
        dims = [_int(d, where, "reshape_param.shape.dim", -1) for d in as_list(shape.get("dim"))]
        axis = _canon_axis(p.get("axis", 0), len(s) + 1, where, "reshape_param.axis")
        num_axes = p.get("num_axes", -1)
        end = len(s) if num_axes == -1 else axis + num_axes
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


def infer_shapes(net: dict, phase: str = "TRAIN", batch: Optional[int] = None,
                 source: str = "<prototxt>") -> Dict[str, Shape]:
    """Every blob's shape after the layers of ``phase``."""
    n = _Net(net, phase, batch, source)
    n.run()
    return dict(n.shapes)


def conv_layers(net: dict, phase: str = "TRAIN", batch: Optional[int] = None,
                source: str = "<prototxt>") -> List[LayerSpec]:
    """A LayerSpec per Convolution layer of ``phase`` (see the Notes of this module).

    ``net`` is a parsed prototxt (:func:`parse_prototxt`); ``batch`` replaces the batch size
    (first axis) of every data layer and net input.
    """
    convs = _Net(net, phase, batch, source).run()
    if not convs:
        raise PrototxtError(f"{source}: the net has no Convolution layer in phase {phase}")
    return convs


def read_prototxt(path, phase: str = "TRAIN", batch: Optional[int] = None) -> List[LayerSpec]:
    """:func:`conv_layers` of the prototxt file at ``path``."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PrototxtError(f"{path}: cannot read: {e.strerror or e}") from None
    return conv_layers(parse_prototxt(text, source=path), phase, batch, source=path)


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
