"""The geometry of one convolution kernel, independent of the (micro-)batch size.

This is what the benchmark cache keys on and what the core builds cuDNN descriptors from.
Strides are in elements, NCHW order; ``None`` means a packed tensor. Caffe's grouped layers run
each group as a strided view into the whole blob (for group g of G: channel stride H*W, sample
stride C_total*H*W), so strides are part of a kernel's identity.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict
from typing import Optional, Tuple

__all__ = ["ConvShape"]

Strides = Optional[Tuple[int, int, int, int]]


@dataclass(frozen=True)
class ConvShape:
    c: int              # input channels of this kernel (per group when groups are separate calls)
    h: int
    w: int
    k: int              # output channels
    r: int              # filter height
    s: int              # filter width
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    dil_h: int = 1
    dil_w: int = 1
    groups: int = 1     # cuDNN group count (filter is K x C/groups x R x S)
    x_strides: Strides = None
    y_strides: Strides = None

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
        for f in ("x_strides", "y_strides"):
            v = getattr(self, f)
            if v is not None and (len(v) != 4 or any(int(x) < 1 for x in v)):
                raise ValueError(f"convolution field {f!r}: four positive strides expected, got {v!r}")

    @property
    def out_h(self) -> int:
        return (self.h + 2 * self.pad_h - self.dil_h * (self.r - 1) - 1) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        return (self.w + 2 * self.pad_w - self.dil_w * (self.s - 1) - 1) // self.stride_w + 1

    def packed_x_strides(self) -> Tuple[int, int, int, int]:
        return self.x_strides or (self.c * self.h * self.w, self.h * self.w, self.w, 1)

    def packed_y_strides(self) -> Tuple[int, int, int, int]:
        oh, ow = self.out_h, self.out_w
        return self.y_strides or (self.k * oh * ow, oh * ow, ow, 1)

    @classmethod
    def from_layer(cls, layer) -> "ConvShape":
        """From a :class:`ucudnn.plan.network.LayerSpec` (square pad/stride/dilation)."""
        return cls(layer.c, layer.h, layer.w, layer.k, layer.r, layer.s,
                   layer.pad, layer.pad, layer.stride, layer.stride,
                   layer.dilation, layer.dilation, layer.groups)

    def key(self) -> str:
        """A stable text form for cache keys."""
        d = asdict(self)
        d["x_strides"] = list(self.packed_x_strides())
        d["y_strides"] = list(self.packed_y_strides())
        return ",".join(f"{k}={v}" for k, v in d.items()).replace(" ", "")
