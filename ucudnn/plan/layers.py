"""A net's convolution layers as the planners see them (:class:`LayerSpec`), and the layer-list
CSV that stores them.

Note [Layers, groups and counts]
    The model is what Caffe (caffe_patch/0002) runs, so that offline predictions and cache keys
    are Caffe's:

    * ``c``, ``k`` are the layer's TOTAL input and output channels, as in the prototxt.
    * ``groups`` is Caffe's group count G: the layer runs each kernel G times per pass, one
      cuDNN call per group on C/G -> K/G channels (a strided view into the whole blob, see
      Note [Grouped layers] in :mod:`ucudnn.plan.conv`), all G calls with ONE plan, each call
      on its own workspace slot.
    * ``count`` is how many identical layers the net has (ResNet repeats shapes); each is a
      kernel of its own, with its own plan.

    So each (layer, op, repeat) is one kernel with one plan. A per-kernel ``limit`` applies to
    one group call (Caffe's ``workspace_limit`` is per slot); the ILP chooses one plan per
    kernel, weighed by ``groups`` in time and workspace; totals count every group call.

Note [Layer list format]
    A CSV with a header: ``name,N,C,H,W,K,R,S`` then the spatial parameters per axis,
    ``pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w`` (or, for square ones,
    ``pad,stride,dilation``; not both for one parameter), then, optional,
    ``groups,count,bwd_data``. The header may be a comment line (``# name,N,...``, a remark in
    parentheses after the columns allowed); columns named ``unused`` are ignored, and any other
    name is an error. :func:`write_layers` writes the per-axis form.
"""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from .conv import out_size
from .table import read_text
from ..vocab import LAYOUTS, OPS, InputError

__all__ = ["LayerSpec", "LayerError", "LAYER_COLUMNS", "read_layers", "write_layers"]


class LayerError(InputError):
    """A layer list or layer is malformed; the message names the file, line, layer and field."""


Pair = Tuple[int, int]


def _pair(v, name: str, field: str) -> Pair:
    if isinstance(v, int) and not isinstance(v, bool):
        return (v, v)
    if isinstance(v, tuple) and len(v) == 2 and all(
            isinstance(x, int) and not isinstance(x, bool) for x in v):
        return v
    raise LayerError(f"layer {name!r}: field {field!r} must be an integer or a (height, width) "
                     f"pair of integers, got {v!r}")


@dataclass(frozen=True)
class LayerSpec:
    """One convolution layer: input N x C x H x W, K output channels, R x S filters, and per
    axis (height, width) its ``pad``, ``stride`` and ``dilation`` (an integer means both axes).

    ``c``, ``k``: the layer's total channels (as in the prototxt); ``groups``: Caffe's group
    count; ``count``: identical layers in the net (Note [Layers, groups and counts]);
    ``bwd_data``: whether backward-data runs (not for the first layer); ``layout``: the
    activations' layout Caffe runs the layer in (NHWC: filters KRSC, one group only; Note
    [NHWC kernels] in :mod:`ucudnn.plan.conv`)."""
    name: str
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: Pair = (0, 0)
    stride: Pair = (1, 1)
    dilation: Pair = (1, 1)
    groups: int = 1
    count: int = 1
    bwd_data: bool = True
    layout: str = "NCHW"

    def __post_init__(self):
        for f in ("pad", "stride", "dilation"):
            object.__setattr__(self, f, _pair(getattr(self, f), self.name, f))
        for f in ("n", "c", "h", "w", "k", "r", "s", "groups", "count"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise LayerError(f"layer {self.name!r}: field {f!r} must be a positive integer, "
                                 f"got {v!r}")
        for f, least in (("pad", 0), ("stride", 1), ("dilation", 1)):
            for axis, v in zip("hw", getattr(self, f)):
                if v < least:
                    raise LayerError(f"layer {self.name!r}: field '{f}_{axis}' must be >= "
                                     f"{least}, got {v}")
        if self.layout not in LAYOUTS:
            raise LayerError(f"layer {self.name!r}: field 'layout': {self.layout!r} is not one "
                             f"of {', '.join(LAYOUTS)}")
        if self.layout != "NCHW" and self.groups != 1:
            raise LayerError(f"layer {self.name!r}: field 'layout': a grouped layer runs NCHW "
                             "only (Note [Grouped layers] in ucudnn/plan/conv.py)")
        if self.c % self.groups or self.k % self.groups:
            raise LayerError(f"layer {self.name!r}: field 'groups': {self.groups} does not divide "
                             f"C={self.c} and K={self.k} (C and K are the layer's total channels)")
        for axis, oh in zip("HW", self.out_hw):
            if oh < 1:
                raise LayerError(f"layer {self.name!r}: the filter is larger than the padded "
                                 f"input along {axis}")

    @property
    def ops(self) -> Tuple[str, ...]:
        return OPS if self.bwd_data else ("fwd", "bwd_filter")

    @property
    def out_hw(self) -> Pair:
        return (out_size(self.h, self.r, self.pad[0], self.stride[0], self.dilation[0]),
                out_size(self.w, self.s, self.pad[1], self.stride[1], self.dilation[1]))

    @property
    def calls(self) -> int:
        """cuDNN calls per pass: every op of every identical layer, once per group."""
        return self.count * self.groups * len(self.ops)

    def describe(self) -> str:
        """``C=96 27x27 K=256 5x5 pad 2 stride 1, group 2`` (pairs only where they differ)."""
        def pair(p):
            return str(p[0]) if p[0] == p[1] else f"{p[0]}x{p[1]}"
        dil = f" dilation {pair(self.dilation)}" if self.dilation != (1, 1) else ""
        g = f", group {self.groups}" if self.groups > 1 else ""
        layout = f", {self.layout}" if self.layout != "NCHW" else ""
        return (f"C={self.c} {self.h}x{self.w} K={self.k} {self.r}x{self.s} pad {pair(self.pad)} "
                f"stride {pair(self.stride)}{dil}{g}{layout}")


#: The columns :func:`write_layers` writes (Note [Layer list format]).
LAYER_COLUMNS = ("name", "N", "C", "H", "W", "K", "R", "S", "pad_h", "pad_w", "stride_h",
                 "stride_w", "dilation_h", "dilation_w", "groups", "count", "bwd_data")
_REQUIRED = ("name", "N", "C", "H", "W", "K", "R", "S")
_SCALARS = (("N", "n"), ("C", "c"), ("H", "h"), ("W", "w"), ("K", "k"), ("R", "r"), ("S", "s"),
            ("groups", "groups"), ("count", "count"))
#: a header without names (a file of values only): the square form's order
_KNOWN = set(LAYER_COLUMNS) | {"pad", "stride", "dilation"}
_DEFAULT_HEADER = ["name", "N", "C", "H", "W", "K", "R", "S", "pad", "stride", "dilation",
                   "groups", "count", "bwd_data"]


def _int(where: str, col: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LayerError(f"{where}: field {col!r}: cannot parse {text!r}") from None


def _spatial(d: Dict[str, str], where: str, name: str, default: int) -> Pair:
    square = d.get(name, "")
    hw = [d.get(f"{name}_{a}", "") for a in "hw"]
    if square and any(hw):
        raise LayerError(f"{where}: give {name!r} or {name}_h/{name}_w, not both")
    if any(hw):
        if not all(hw):
            raise LayerError(f"{where}: {name}_h and {name}_w must be given together")
        return (_int(where, f"{name}_h", hw[0]), _int(where, f"{name}_w", hw[1]))
    v = _int(where, name, square) if square else default
    return (v, v)


def _columns(cells: List[str]) -> List[str]:
    """The column names of a comment header: a remark after them in parentheses (``unused
    (bvlc_alexnet, grouped layers per group)``) is not a column."""
    out = []
    for cell in cells:
        name, paren, _ = cell.partition("(")
        if name.strip():
            out.append(name.split()[0])
        if paren:
            break
    return out


def read_layers(path: str | os.PathLike, text: Optional[str] = None) -> List[LayerSpec]:
    """Read a layer list CSV (Note [Layer list format]); ``text``: the file's text where the
    caller has read it already (else it is read here)."""
    path = os.fspath(path)
    header: Optional[List[str]] = None
    lineno_checked = None
    layers: List[LayerSpec] = []
    if text is None:
        text = read_text(path, LayerError, "a layer list")
    for lineno, rec in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        rec = [x.strip() for x in rec]
        if not rec or not "".join(rec):
            continue
        if rec[0].startswith("#"):
            if header is None and rec[0].lstrip("# ").strip() == "name":
                header = ["name"] + _columns(rec[1:])
            continue
        if header is None and rec[0] == "name":
            header = rec
            continue
        if header is not None and lineno_checked is None:
            unknown = [c for c in header if c not in _KNOWN and c != "unused"]
            if unknown:
                raise LayerError(f"{path}: unknown column(s) {', '.join(unknown)} (expected "
                                 f"{', '.join(LAYER_COLUMNS)}; see Note [Layer list format])")
            lineno_checked = lineno
        cols = header or _DEFAULT_HEADER
        if len(rec) > len(cols):
            raise LayerError(f"{path}:{lineno}: {len(rec)} fields, expected at most {len(cols)}")
        d = dict(zip(cols, rec))
        where = f"{path}:{lineno}: layer {d.get('name', '?')!r}"
        kw = {}
        for col, attr in _SCALARS:
            if d.get(col, "") != "":
                kw[attr] = _int(where, col, d[col])
            elif col in _REQUIRED:
                raise LayerError(f"{where}: field {col!r} is missing")
        for name, default in (("pad", 0), ("stride", 1), ("dilation", 1)):
            kw[name] = _spatial(d, where, name, default)
        if d.get("bwd_data", "") != "":
            if d["bwd_data"] not in ("0", "1"):
                raise LayerError(f"{where}: field 'bwd_data' must be 0 or 1, got {d['bwd_data']!r}")
            kw["bwd_data"] = d["bwd_data"] == "1"
        try:
            layers.append(LayerSpec(name=d["name"], **kw))
        except LayerError as e:
            raise LayerError(f"{path}:{lineno}: {e}") from None
    if not layers:
        raise LayerError(f"{path}: the layer list is empty")
    names = [l.name for l in layers]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise LayerError(f"{path}: duplicate layer name(s) {sorted(dup)}")
    return layers


def write_layers(path: str | os.PathLike, layers: Iterable[LayerSpec]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(LAYER_COLUMNS)
        for l in layers:
            w.writerow([l.name, l.n, l.c, l.h, l.w, l.k, l.r, l.s, *l.pad, *l.stride,
                        *l.dilation, l.groups, l.count, int(l.bwd_data)])
