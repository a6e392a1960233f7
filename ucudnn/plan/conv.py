"""Convolution geometry, in one place: the output-size rule (:func:`out_size`) and the kernel
record (:class:`ConvShape`) that the benchmark cache keys on and the core builds cuDNN
descriptors from. A layer (:class:`ucudnn.plan.layers.LayerSpec`) gives its kernel with
:meth:`ConvShape.from_layer`.

Every spatial parameter is per axis (height, width): kernel R x S, pad, stride, dilation; a
3-D convolution adds the depth axis in front (Note [N-D geometry]). Tensor strides are in
elements, in NCHW (NCDHW) dimension order whatever the layout; ``None`` means a packed tensor
of the shape's ``layout``: NCHW (filters KCRS) or NHWC (filters KRSC, Note [NHWC kernels]).
Caffe's grouped
layers run each group as a strided view into the whole blob (for group g of G: channel stride
H*W, sample stride C_total*H*W), so strides are part of a kernel's identity.

Note [Grouped layers]
    A Caffe convolution layer with ``group: G`` over C input and K output channels is run by
    Caffe's cuDNN layer (with caffe_patch/0002 too) as G separate cuDNN calls,
    each on C/G input and K/G output channels with cuDNN's own group count 1, on a strided view
    into the whole blobs: x strides (C*H*W, H*W, W, 1), y strides (K*OH*OW, OH*OW, OW, 1).
    All G calls share one kernel and one plan, each on its own workspace slot.
    :meth:`ConvShape.from_layer` builds exactly that kernel from a
    :class:`~ucudnn.plan.layers.LayerSpec` (whose ``c``, ``k`` are the layer's totals and
    ``groups`` Caffe's group count), so the benchmark cache key computed offline is the one
    Caffe's run computes. A layer with G = 1 is a packed tensor (strides ``None``), which is
    the same key as Caffe's explicit packed strides.

Note [NHWC kernels]
    An NHWC kernel keeps its dimensions in NCHW order and says the layout through its strides:
    x (H*W*C, 1, W*C, C), y (OH*OW*K, 1, OW*K, K), and its filter is KRSC. A sample is still
    one contiguous block of C*H*W elements, so a micro-batch is a slice along N exactly as in
    NCHW. The layout is part of the kernel's identity: its cache key names it, except NCHW, the
    default, which the key leaves out (so NCHW keys stay those of every existing cache).

Note [N-D geometry]
    One record describes 2-D and 3-D convolutions. A 3-D one has a depth: input depth ``d``,
    filter depth ``t``, and ``pad_d``, ``stride_d``, ``dil_d``; a 2-D one has ``d = 0`` and
    the depth fields at their neutral values (t 0, pad 0, stride 1, dilation 1), which its
    text forms leave out, so a 2-D shape's cache key and plan-record fields are those it
    always had. The tuple views (:attr:`ConvShape.spatial`, ``kernel``, ``pad``, ``stride``,
    ``dilation``, ``out_spatial``) list the axes outermost first: (h, w) or (d, h, w), as
    cuDNN's N-D descriptors and PyTorch's ``Conv3d`` take them; :meth:`ConvShape.nd` builds a
    shape from them. Tensor strides of a 3-D shape are five (n, c, d, h, w); its ``layout``
    is NCHW for NCDHW tensors (filters KCTRS) and NHWC for NDHWC (filters KTRSC): the layout
    says where the channels are, and the names NCDHW and NDHWC are accepted for it. The
    depth fields come after the 2-D ones, so the 2-D constructor's positional arguments
    are unchanged.

Note [Transposed convolutions]
    A transposed convolution (PyTorch's ``ConvTranspose2d/3d``) is the backward-data of the
    convolution that maps its output back onto its input; no flag is needed, the op says it.
    For ``ConvTranspose`` from ``C_in`` to ``C_out`` channels with kernel, pad, stride,
    dilation and ``output_padding`` (each below its stride or dilation), input extents
    ``i`` give output extents ``o = (i - 1) * stride - 2 * pad + dilation * (kernel - 1) +
    output_padding + 1``; :func:`transposed` returns the :class:`ConvShape` whose input is
    that output (``c = C_out``, extents ``o``) and whose output is the transposed
    convolution's input (``k = C_in``, extents ``i``: ``out_size`` of ``o`` floors the
    output padding away), with weights ``C_in x C_out/groups x kernel``, PyTorch's own
    layout. Its ops map by :data:`TRANSPOSED_OPS`: the transposed forward is that shape's
    ``bwd_data`` (dy = the transposed input, dx = its output), its input gradient the
    shape's ``fwd``, its weight gradient the shape's ``bwd_filter`` with x = the output's
    gradient and dy = the transposed input. So it is benchmarked, cached and planned as
    exactly that op of that shape.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict, replace
from typing import List, Optional, Tuple

from ..vocab import LAYOUTS, packed_strides_nd
from .slabs import Slab, shape_slabs

__all__ = ["out_size", "ConvShape", "transposed", "TRANSPOSED_OPS", "LAYOUT_ALIASES"]

Strides = Optional[Tuple[int, ...]]
#: 3-D layout names, as the channel position ``layout`` records (Note [N-D geometry])
LAYOUT_ALIASES = {"NCDHW": "NCHW", "NDHWC": "NHWC"}
#: Note [Transposed convolutions]: the op of the convolution shape that runs each op of a
#: transposed convolution
TRANSPOSED_OPS = {"fwd": "bwd_data", "bwd_data": "fwd", "bwd_filter": "bwd_filter"}
_DEPTH = ("d", "t", "pad_d", "stride_d", "dil_d")
_DEPTH_NEUTRAL = {"d": 0, "t": 0, "pad_d": 0, "stride_d": 1, "dil_d": 1}


def out_size(size: int, kernel: int, pad: int, stride: int, dilation: int) -> int:
    """The output extent of one spatial axis (Caffe's and cuDNN's rule): positions of a
    ``kernel``-tap filter dilated by ``dilation`` over ``size`` padded by ``pad`` on both
    sides, every ``stride``. Below 1 the filter is larger than the padded input."""
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


@dataclass(frozen=True)
class ConvShape:
    c: int              # input channels of this kernel (C/G of a Caffe layer with group G)
    h: int
    w: int
    k: int              # output channels of this kernel (K/G of a Caffe layer with group G)
    r: int              # filter height
    s: int              # filter width
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    dil_h: int = 1
    dil_w: int = 1
    groups: int = 1     # cuDNN's own group count (filter is K x C/groups x R x S); Caffe: 1
    x_strides: Strides = None
    y_strides: Strides = None
    layout: str = "NCHW"    # Note [NHWC kernels]
    d: int = 0              # input depth of a 3-D convolution; 0: 2-D (Note [N-D geometry])
    t: int = 0              # filter depth (3-D)
    pad_d: int = 0
    stride_d: int = 1
    dil_d: int = 1

    def __post_init__(self):
        three = self.d != 0
        if three and self.layout in LAYOUT_ALIASES:
            object.__setattr__(self, "layout", LAYOUT_ALIASES[self.layout])
        positive = ("c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "dil_h", "dil_w",
                    "groups") + (("d", "t", "stride_d", "dil_d") if three else ())
        for f in positive:
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"convolution field {f!r} must be a positive integer, got {v!r}")
        for f in ("pad_h", "pad_w") + (("pad_d",) if three else ()):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"convolution field {f!r} must be >= 0, got {v!r}")
        if not three:
            for f in _DEPTH:
                if getattr(self, f) != _DEPTH_NEUTRAL[f]:
                    raise ValueError(f"convolution field {f!r}: a 2-D convolution (d = 0) has "
                                     f"no depth, got {getattr(self, f)!r}")
        if self.c % self.groups or self.k % self.groups:
            raise ValueError(f"convolution field 'groups': {self.groups} does not divide "
                             f"C={self.c} and K={self.k}")
        if min(self.out_spatial) < 1:
            raise ValueError("convolution: the filter is larger than the padded input")
        if self.layout not in LAYOUTS:
            names = LAYOUTS + (tuple(LAYOUT_ALIASES) if three else ())
            raise ValueError(f"convolution field 'layout': {self.layout!r} is not one of "
                             f"{', '.join(names)}")
        dims = self.ndim + 2
        for f in ("x_strides", "y_strides"):
            v = getattr(self, f)
            if v is not None and (len(v) != dims or any(int(x) < 1 for x in v)):
                raise ValueError(f"convolution field {f!r}: {dims} positive strides expected, "
                                 f"got {v!r}")

    @classmethod
    def nd(cls, c: int, k: int, spatial, kernel, pad=0, stride=1, dilation=1, groups: int = 1,
           layout: str = "NCHW", x_strides: Strides = None,
           y_strides: Strides = None) -> "ConvShape":
        """A shape from spatial tuples, outermost axis first (Note [N-D geometry]):
        ``spatial`` (h, w) or (d, h, w) input extents, ``kernel`` the filter's; ``pad``,
        ``stride``, ``dilation`` a tuple of as many or one integer for every axis."""
        spatial, kernel = tuple(spatial), tuple(kernel)
        n = len(spatial)
        if n not in (2, 3) or len(kernel) != n:
            raise ValueError(f"convolution: 2 or 3 spatial axes expected, got input extents "
                             f"{spatial!r} and kernel {kernel!r}")
        per = []
        for name, v in (("pad", pad), ("stride", stride), ("dilation", dilation)):
            v = (v,) * n if isinstance(v, int) and not isinstance(v, bool) else tuple(v)
            if len(v) != n:
                raise ValueError(f"convolution field {name!r}: {n} values expected, got {v!r}")
            per.append(v)
        (p, st, dl), hw = per, slice(n - 2, n)
        depth = {}
        if n == 3:
            depth = dict(d=spatial[0], t=kernel[0], pad_d=p[0], stride_d=st[0], dil_d=dl[0])
        return cls(c, *spatial[hw], k, *kernel[hw], *p[hw], *st[hw], *dl[hw], groups,
                   x_strides, y_strides, layout, **depth)

    @property
    def ndim(self) -> int:
        """Spatial axes: 2 or 3."""
        return 3 if self.d else 2

    def _axes(self, depth, h, w):
        return (depth, h, w) if self.d else (h, w)

    @property
    def spatial(self) -> Tuple[int, ...]:
        return self._axes(self.d, self.h, self.w)

    @property
    def kernel(self) -> Tuple[int, ...]:
        return self._axes(self.t, self.r, self.s)

    @property
    def pad(self) -> Tuple[int, ...]:
        return self._axes(self.pad_d, self.pad_h, self.pad_w)

    @property
    def stride(self) -> Tuple[int, ...]:
        return self._axes(self.stride_d, self.stride_h, self.stride_w)

    @property
    def dilation(self) -> Tuple[int, ...]:
        return self._axes(self.dil_d, self.dil_h, self.dil_w)

    @property
    def out_spatial(self) -> Tuple[int, ...]:
        return tuple(out_size(*a) for a in zip(self.spatial, self.kernel, self.pad,
                                               self.stride, self.dilation))

    @property
    def out_h(self) -> int:
        return out_size(self.h, self.r, self.pad_h, self.stride_h, self.dil_h)

    @property
    def out_w(self) -> int:
        return out_size(self.w, self.s, self.pad_w, self.stride_w, self.dil_w)

    @property
    def out_d(self) -> int:
        """Output depth of a 3-D shape (0 for 2-D)."""
        return self.out_spatial[0] if self.d else 0

    def packed_x_strides(self) -> Tuple[int, ...]:
        return self.x_strides or packed_strides_nd(self.c, self.spatial, self.layout)

    def packed_y_strides(self) -> Tuple[int, ...]:
        return self.y_strides or packed_strides_nd(self.k, self.out_spatial, self.layout)

    def filter_strides(self) -> Tuple[int, ...]:
        """Strides of the K x C/groups x R x S filter: KCRS for NCHW, KRSC for NHWC (3-D:
        KCTRS, KTRSC)."""
        return packed_strides_nd(self.c // self.groups, self.kernel, self.layout)

    def x_dims(self, n: int) -> Tuple[int, ...]:
        """Dimensions of the input side at ``n`` samples: (n, c, *spatial)."""
        return (n, self.c, *self.spatial)

    def y_dims(self, n: int) -> Tuple[int, ...]:
        """Dimensions of the output side at ``n`` samples: (n, k, *out_spatial)."""
        return (n, self.k, *self.out_spatial)

    def w_dims(self) -> Tuple[int, ...]:
        """Dimensions of the filter: (k, c/groups, *kernel)."""
        return (self.k, self.c // self.groups, *self.kernel)

    @classmethod
    def from_layer(cls, layer) -> "ConvShape":
        """The kernel Caffe runs for a :class:`ucudnn.plan.layers.LayerSpec`: one group's
        C/G -> K/G channels as a strided view into the whole blobs when ``layer.groups`` > 1
        (Note [Grouped layers]), a packed tensor otherwise. The batch size ``layer.n`` is not
        part of the kernel."""
        g = layer.groups
        if layer.c % g or layer.k % g:
            raise ValueError(f"layer {layer.name!r}: field 'groups': {g} does not divide "
                             f"C={layer.c} and K={layer.k}")
        shape = cls.nd(layer.c // g, layer.k // g, layer.spatial, layer.kernel, layer.pad,
                       layer.stride, layer.dilation, 1, layer.layout)
        if g == 1:
            return shape
        x = packed_strides_nd(layer.c, shape.spatial, "NCHW")
        y = packed_strides_nd(layer.k, shape.out_spatial, "NCHW")
        return replace(shape, x_strides=x, y_strides=y)

    def fields(self) -> dict:
        """The fields as plan records write them: a 2-D shape's without the depth fields, an
        NCHW shape's without its layout (Notes [NHWC kernels], [N-D geometry])."""
        d = asdict(self)
        if self.layout == "NCHW":
            del d["layout"]
        if not self.d:
            for f in _DEPTH:
                del d[f]
        return d

    def slabs(self, op: str, pieces: int) -> List[Slab]:
        """The pieces of ``op`` split along the outermost spatial axis (Note [Slabs below one
        sample] in ucudnn/plan/slabs.py); ValueError where it cannot be split so."""
        return shape_slabs(self, op, pieces)

    def key(self) -> str:
        """A stable text form for cache keys (an NCHW shape's without its layout, a 2-D
        shape's without the depth fields: Notes [NHWC kernels], [N-D geometry])."""
        d = self.fields()
        d["x_strides"] = list(self.packed_x_strides())
        d["y_strides"] = list(self.packed_y_strides())
        return ",".join(f"{k}={v}" for k, v in d.items()).replace(" ", "")


def transposed(c_in: int, c_out: int, spatial, kernel, pad=0, stride=1, dilation=1,
               output_padding=0, groups: int = 1, layout: str = "NCHW") -> ConvShape:
    """The convolution shape whose ``bwd_data`` is a transposed convolution from ``c_in`` to
    ``c_out`` channels over input extents ``spatial`` (Note [Transposed convolutions]; its
    ops map by :data:`TRANSPOSED_OPS`). ``groups`` is cuDNN's group count."""
    spatial, kernel = tuple(spatial), tuple(kernel)
    n = len(spatial)
    per = [(v,) * n if isinstance(v, int) and not isinstance(v, bool) else tuple(v)
           for v in (pad, stride, dilation, output_padding)]
    if any(len(v) != n for v in per) or len(kernel) != n:
        raise ValueError(f"transposed convolution: {n} values per spatial parameter expected")
    p, st, dl, op = per
    if any(o < 0 or (o >= s and o >= d) for o, s, d in zip(op, st, dl)):
        raise ValueError(f"transposed convolution field 'output_padding': {op!r} must be "
                         f"below the stride {st!r} or the dilation {dl!r}")
    out = tuple((i - 1) * s - 2 * q + d * (kk - 1) + o + 1
                for i, s, q, d, kk, o in zip(spatial, st, p, dl, kernel, op))
    shape = ConvShape.nd(c_out, c_in, out, kernel, p, st, dl, groups, layout)
    if shape.out_spatial != spatial:
        raise ValueError(f"transposed convolution: input extents {spatial!r} do not come "
                         f"back from the output extents {out!r}")
    return shape
