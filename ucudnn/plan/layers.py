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
    ``groups,count,bwd_data``; a 3-D layer adds, optional, ``D`` (input depth) and ``T`` (filter
    depth) and the depth axis's ``pad_d,stride_d,dilation_d`` (the square columns apply to
    all three axes), so a list of 2-D layers reads and writes as it always did. The header may be a comment line (``# name,N,...``, a remark in
    parentheses after the columns allowed); columns named ``unused`` are ignored, and any other
    name is an error. :func:`write_layers` writes the per-axis form, with the depth columns
    last where a layer is 3-D (empty for its 2-D layers).
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

__all__ = ["LayerSpec", "LayerError", "LAYER_COLUMNS", "DEPTH_COLUMNS", "read_layers",
           "write_layers"]


class LayerError(InputError):
    """A layer list or layer is malformed; the message names the file, line, layer and field."""


Pair = Tuple[int, ...]


def _pair(v, name: str, field: str, n: int = 2) -> Pair:
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,) * n
    if isinstance(v, tuple) and len(v) == n and all(
            isinstance(x, int) and not isinstance(x, bool) for x in v):
        return v
    what = "a (height, width) pair" if n == 2 else "a (depth, height, width) triple"
    raise LayerError(f"layer {name!r}: field {field!r} must be an integer or {what} of "
                     f"integers, got {v!r}")


@dataclass(frozen=True)
class LayerSpec:
    """One convolution layer: input N x C x H x W, K output channels, R x S filters, and per
    axis (height, width) its ``pad``, ``stride`` and ``dilation`` (an integer means both axes).
    A 3-D layer has an input depth ``d`` and filter depth ``t`` (0 for 2-D), and its per-axis
    parameters are (depth, height, width) triples (Note [N-D geometry] in
    :mod:`ucudnn.plan.conv`).

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
    pad: Pair = 0           # an integer: the same on every axis
    stride: Pair = 1
    dilation: Pair = 1
    groups: int = 1
    count: int = 1
    bwd_data: bool = True
    layout: str = "NCHW"
    d: int = 0
    t: int = 0

    def __post_init__(self):
        three = self.d != 0 or self.t != 0
        for f in ("pad", "stride", "dilation"):
            object.__setattr__(self, f, _pair(getattr(self, f), self.name, f, 3 if three else 2))
        for f in ("n", "c", "h", "w", "k", "r", "s", "groups", "count") + (
                ("d", "t") if three else ()):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise LayerError(f"layer {self.name!r}: field {f!r} must be a positive integer, "
                                 f"got {v!r}")
        for f, least in (("pad", 0), ("stride", 1), ("dilation", 1)):
            for axis, v in zip("dhw" if three else "hw", getattr(self, f)):
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
        for axis, oh in zip("DHW" if three else "HW", self.out_spatial):
            if oh < 1:
                raise LayerError(f"layer {self.name!r}: the filter is larger than the padded "
                                 f"input along {axis}")

    @property
    def ops(self) -> Tuple[str, ...]:
        return OPS if self.bwd_data else ("fwd", "bwd_filter")

    @property
    def spatial(self) -> Pair:
        """Input extents, outermost first: (h, w) or (d, h, w)."""
        return (self.d, self.h, self.w) if self.d else (self.h, self.w)

    @property
    def kernel(self) -> Pair:
        """Filter extents, as :attr:`spatial`."""
        return (self.t, self.r, self.s) if self.d else (self.r, self.s)

    @property
    def out_spatial(self) -> Pair:
        return tuple(out_size(*a) for a in zip(self.spatial, self.kernel, self.pad,
                                               self.stride, self.dilation))

    @property
    def out_hw(self) -> Tuple[int, int]:
        return self.out_spatial[-2:]

    @property
    def calls(self) -> int:
        """cuDNN calls per pass: every op of every identical layer, once per group."""
        return self.count * self.groups * len(self.ops)

    def describe(self) -> str:
        """``C=96 27x27 K=256 5x5 pad 2 stride 1, group 2`` (pairs only where they differ)."""
        def pair(p):
            return str(p[0]) if len(set(p)) == 1 else "x".join(map(str, p))
        dil = f" dilation {pair(self.dilation)}" if set(self.dilation) != {1} else ""
        g = f", group {self.groups}" if self.groups > 1 else ""
        layout = f", {self.layout}" if self.layout != "NCHW" else ""
        size, kernel = "x".join(map(str, self.spatial)), "x".join(map(str, self.kernel))
        return (f"C={self.c} {size} K={self.k} {kernel} pad {pair(self.pad)} "
                f"stride {pair(self.stride)}{dil}{g}{layout}")


#: The columns :func:`write_layers` writes (Note [Layer list format]).
LAYER_COLUMNS = ("name", "N", "C", "H", "W", "K", "R", "S", "pad_h", "pad_w", "stride_h",
                 "stride_w", "dilation_h", "dilation_w", "groups", "count", "bwd_data")
#: The depth columns of 3-D layers, written after :data:`LAYER_COLUMNS` where a list has any
DEPTH_COLUMNS = ("D", "T", "pad_d", "stride_d", "dilation_d")
_REQUIRED = ("name", "N", "C", "H", "W", "K", "R", "S")
_SCALARS = (("N", "n"), ("C", "c"), ("H", "h"), ("W", "w"), ("K", "k"), ("R", "r"), ("S", "s"),
            ("groups", "groups"), ("count", "count"), ("D", "d"), ("T", "t"))
#: a header without names (a file of values only): the square form's order
_KNOWN = set(LAYER_COLUMNS) | set(DEPTH_COLUMNS) | {"pad", "stride", "dilation"}
_DEFAULT_HEADER = ["name", "N", "C", "H", "W", "K", "R", "S", "pad", "stride", "dilation",
                   "groups", "count", "bwd_data"]


def _int(where: str, col: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LayerError(f"{where}: field {col!r}: cannot parse {text!r}") from None


def _spatial(d: Dict[str, str], where: str, name: str, default: int, three: bool) -> Pair:
    square = d.get(name, "")
    axes = "dhw" if three else "hw"
    if not three and d.get(f"{name}_d", ""):
        raise LayerError(f"{where}: field '{name}_d' is given for a 2-D layer (no 'D')")
    hw = [d.get(f"{name}_{a}", "") for a in axes]
    if square and any(hw):
        raise LayerError(f"{where}: give {name!r} or {'/'.join(f'{name}_{a}' for a in axes)}, "
                         "not both")
    if any(hw):
        if not all(hw):
            raise LayerError(f"{where}: {' and '.join(f'{name}_{a}' for a in axes)} must be "
                             "given together")
        return tuple(_int(where, f"{name}_{a}", v) for a, v in zip(axes, hw))
    v = _int(where, name, square) if square else default
    return (v,) * len(axes)


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
        if ("d" in kw) != ("t" in kw):
            raise LayerError(f"{where}: fields 'D' and 'T' must be given together (a 3-D layer)")
        for name, default in (("pad", 0), ("stride", 1), ("dilation", 1)):
            kw[name] = _spatial(d, where, name, default, "d" in kw)
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
    layers = list(layers)
    three = any(l.d for l in layers)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(LAYER_COLUMNS + (DEPTH_COLUMNS if three else ()))
        for l in layers:
            hw = slice(-2, None)
            row = [l.name, l.n, l.c, l.h, l.w, l.k, l.r, l.s, *l.pad[hw], *l.stride[hw],
                   *l.dilation[hw], l.groups, l.count, int(l.bwd_data)]
            if three:
                row += ([l.d, l.t, l.pad[0], l.stride[0], l.dilation[0]] if l.d
                        else [""] * len(DEPTH_COLUMNS))
            w.writerow(row)
