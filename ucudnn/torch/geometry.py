"""The one bridge from a PyTorch convolution call to the core's geometry.

Every other module of :mod:`ucudnn.torch` describes a convolution in PyTorch's terms (sizes,
``stride``, ``padding``, ``dilation``, ``groups``) and asks this module for the core's record
(:func:`conv_shape`), for the output size (:func:`conv_out_size`,
:func:`transposed_out_size`) and for what the core can run at all (:func:`unsupported`).

Note [PyTorch convolutions in the core]
    A ``Conv2d`` call with input N x C x H x W, weight K x C/G x R x S and G groups is one
    core kernel of :class:`~ucudnn.plan.conv.ConvShape` with cuDNN's own group count G and
    packed tensors (one cuDNN call per micro-batch, not Caffe's G calls on strided views: Note
    [Grouped layers] in ucudnn/plan/conv.py). The input's memory format picks the layout:
    channels_last input runs NHWC (filters KRSC, the channels_last weight), anything else NCHW;
    a grouped convolution runs NCHW.

    A transposed convolution is backward-data used as its forward: ``ConvTranspose2d`` with
    input N x C_in x H x W and weight C_in x C_out/G x R x S is the backward-data of the
    convolution from its output (N x C_out x H' x W') to its input, whose weight (K = C_in
    output channels, C_out/G input channels per group) is exactly the transposed module's. Its
    input gradient is that convolution's forward, its weight gradient its backward-filter.

    The core is 2-D (:data:`SPATIAL_DIMS`); a 3-D call is refused here with the reason, so that
    N-D support is a change of this module alone.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from ..plan.conv import ConvShape, out_size

__all__ = ["SPATIAL_DIMS", "conv_shape", "conv_out_size", "transposed_out_size", "unsupported"]

#: the numbers of spatial axes the core's kernels take
SPATIAL_DIMS: Tuple[int, ...] = (2,)


def unsupported(spatial: int) -> Optional[str]:
    """Why a convolution over ``spatial`` axes cannot run through the core (None: it can)."""
    if spatial in SPATIAL_DIMS:
        return None
    if spatial == 3:
        return "3-D convolution: waits for the N-D core (the core's kernels are 2-D)"
    return f"{spatial}-D convolution: the core's kernels are 2-D"


def conv_out_size(x_size: Sequence[int], w_size: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int]) -> Tuple[int, ...]:
    """The output size N x K x spatial... of the convolution of ``x_size`` by ``w_size``."""
    spatial = tuple(out_size(x, k, p, s, d) for x, k, p, s, d in
                    zip(x_size[2:], w_size[2:], padding, stride, dilation))
    return (x_size[0], w_size[0]) + spatial


def transposed_out_size(x_size: Sequence[int], w_size: Sequence[int], stride: Sequence[int],
                        padding: Sequence[int], output_padding: Sequence[int],
                        dilation: Sequence[int], groups: int) -> Tuple[int, ...]:
    """The output size of a transposed convolution of ``x_size`` by ``w_size`` (C_in x
    C_out/G x kernel...): PyTorch's rule, the input of the convolution it is the backward-data
    of (Note [PyTorch convolutions in the core])."""
    spatial = tuple((x - 1) * s - 2 * p + d * (k - 1) + op + 1 for x, k, p, s, d, op in
                    zip(x_size[2:], w_size[2:], padding, stride, dilation, output_padding))
    return (x_size[0], w_size[1] * groups) + spatial


def conv_shape(x_size: Sequence[int], w_size: Sequence[int], stride: Sequence[int],
               padding: Sequence[int], dilation: Sequence[int], groups: int,
               layout: str = "NCHW") -> ConvShape:
    """The core's kernel record for the convolution of an input of ``x_size`` (N x C x
    spatial...) by a weight of ``w_size`` (K x C/G x kernel...), in PyTorch's terms (Note
    [PyTorch convolutions in the core]); ValueError naming the field where the core cannot
    take it."""
    spatial = len(x_size) - 2
    why = unsupported(spatial)
    if why is not None:
        raise ValueError(why)
    if len(w_size) != len(x_size) or not (len(stride) == len(padding) == len(dilation) == spatial):
        raise ValueError(f"convolution: input {tuple(x_size)} and weight {tuple(w_size)} "
                         "do not have the same number of spatial axes as stride, padding "
                         "and dilation")
    if w_size[1] * groups != x_size[1]:
        raise ValueError(f"convolution field 'groups': weight {tuple(w_size)} with {groups} "
                         f"group(s) takes {w_size[1] * groups} input channels, the input has "
                         f"{x_size[1]}")
    (h, w), (r, s) = x_size[2:], w_size[2:]
    return ConvShape(int(x_size[1]), int(h), int(w), int(w_size[0]), int(r), int(s),
                     int(padding[0]), int(padding[1]), int(stride[0]), int(stride[1]),
                     int(dilation[0]), int(dilation[1]), int(groups), layout=layout)
