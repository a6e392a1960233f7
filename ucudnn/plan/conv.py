"""Convolution geometry, in one place: the output-size rule (:func:`out_size`) and the kernel
record (:class:`ConvShape`) that the benchmark cache keys on and the core builds cuDNN
descriptors from. A layer (:class:`ucudnn.plan.layers.LayerSpec`) gives its kernel with
:meth:`ConvShape.from_layer`.

Every spatial parameter is per axis (height, width): kernel R x S, pad, stride, dilation.
Tensor strides are in elements, in NCHW dimension order whatever the layout; ``None`` means a
packed tensor of the shape's ``layout``: NCHW (filters KCRS) or NHWC (filters KRSC, Note
[NHWC kernels]). Caffe's grouped
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
"""
from __future__ import annotations

from dataclasses import dataclass, asdict, replace
from typing import Optional, Tuple

from ..vocab import LAYOUTS, packed_strides

__all__ = ["out_size", "ConvShape"]

Strides = Optional[Tuple[int, int, int, int]]


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

    def __post_init__(self):
        for f in ("c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "dil_h", "dil_w", "groups"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"convolution field {f!r} must be a positive integer, got {v!r}")
        for f in ("pad_h", "pad_w"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"convolution field {f!r} must be >= 0, got {v!r}")
        if self.c % self.groups or self.k % self.groups:
            raise ValueError(f"convolution field 'groups': {self.groups} does not divide "
                             f"C={self.c} and K={self.k}")
        if self.out_h < 1 or self.out_w < 1:
            raise ValueError("convolution: the filter is larger than the padded input")
        if self.layout not in LAYOUTS:
            raise ValueError(f"convolution field 'layout': {self.layout!r} is not one of "
                             f"{', '.join(LAYOUTS)}")
        for f in ("x_strides", "y_strides"):
            v = getattr(self, f)
            if v is not None and (len(v) != 4 or any(int(x) < 1 for x in v)):
                raise ValueError(f"convolution field {f!r}: four positive strides expected, got {v!r}")

    @property
    def out_h(self) -> int:
        return out_size(self.h, self.r, self.pad_h, self.stride_h, self.dil_h)

    @property
    def out_w(self) -> int:
        return out_size(self.w, self.s, self.pad_w, self.stride_w, self.dil_w)

    def packed_x_strides(self) -> Tuple[int, int, int, int]:
        return self.x_strides or packed_strides(self.c, self.h, self.w, self.layout)

    def packed_y_strides(self) -> Tuple[int, int, int, int]:
        return self.y_strides or packed_strides(self.k, self.out_h, self.out_w, self.layout)

    def filter_strides(self) -> Tuple[int, int, int, int]:
        """Strides of the K x C/groups x R x S filter: KCRS for NCHW, KRSC for NHWC."""
        return packed_strides(self.c // self.groups, self.r, self.s, self.layout)

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
        (ph, pw), (sh, sw), (dh, dw) = layer.pad, layer.stride, layer.dilation
        shape = cls(layer.c // g, layer.h, layer.w, layer.k // g, layer.r, layer.s,
                    ph, pw, sh, sw, dh, dw, 1, layout=layer.layout)
        if g == 1:
            return shape
        h, w, oh, ow = layer.h, layer.w, shape.out_h, shape.out_w
        return replace(shape, x_strides=(layer.c * h * w, h * w, w, 1),
                       y_strides=(layer.k * oh * ow, oh * ow, ow, 1))

    def key(self) -> str:
        """A stable text form for cache keys (an NCHW shape's without its layout: Note [NHWC
        kernels])."""
        d = asdict(self)
        if self.layout == "NCHW":
            del d["layout"]
        d["x_strides"] = list(self.packed_x_strides())
        d["y_strides"] = list(self.packed_y_strides())
        return ",".join(f"{k}={v}" for k, v in d.items()).replace(" ", "")
