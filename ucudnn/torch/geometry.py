"""The one bridge from a PyTorch convolution call to the core's geometry.

Every other module of :mod:`ucudnn.torch` describes a convolution in PyTorch's terms (sizes,
``stride``, ``padding``, ``dilation``, ``groups``) and asks this module for the core's record
(:func:`conv_shape`), the planner's layer of a module's call (:func:`layer_spec`), the output
size (:func:`conv_out_size`, :func:`transposed_out_size`), the padding of ``padding='same'``
(:func:`same_padding`), the layout a tensor runs in (:func:`layout_of`) and what the core can
run at all (:func:`unsupported`).

Note [PyTorch convolutions in the core]
    A ``Conv2d`` call with input N x C x H x W, weight K x C/G x R x S and G groups is one
    core kernel of :class:`~ucudnn.plan.conv.ConvShape` with cuDNN's own group count G and
    packed tensors (one cuDNN call per micro-batch, not Caffe's G calls on strided views: Note
    [Grouped layers] in ucudnn/plan/conv.py). The input's memory format picks the layout:
    channels_last input runs NHWC (filters KRSC, the channels_last weight), anything else NCHW;
    a grouped convolution runs NCHW. ``Conv3d`` is the same with a depth axis in front (input
    N x C x D x H x W, weight K x C/G x T x R x S): the core's 3-D record
    (:meth:`~ucudnn.plan.conv.ConvShape.nd`, Note [N-D geometry] in ucudnn/plan/conv.py), with
    channels_last_3d input running NDHWC (filters KTRSC), which the core's ``layout`` names NHWC
    as it names the channel position.

    A transposed convolution is backward-data used as its forward: ``ConvTranspose2d`` with
    input N x C_in x H x W and weight C_in x C_out/G x R x S is the backward-data of the
    convolution from its output (N x C_out x H' x W') to its input, whose weight (K = C_in
    output channels, C_out/G input channels per group) is exactly the transposed module's. Its
    input gradient is that convolution's forward, its weight gradient its backward-filter
    (Note [Transposed convolutions] in ucudnn/plan/conv.py); ``ConvTranspose3d`` likewise.

    The core takes 2 and 3 spatial axes (:data:`SPATIAL_DIMS`); a 1-D call is refused here
    with the reason.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from ..plan.conv import ConvShape, out_size
from ..plan.layers import LayerSpec

__all__ = ["DTYPE_NAMES", "SPATIAL_DIMS", "conv_shape", "layer_spec", "conv_out_size",
           "transposed_out_size", "same_padding", "layout_of", "memory_format", "unsupported"]

#: PyTorch dtype -> the core's dtype name
DTYPE_NAMES: Dict[torch.dtype, str] = {torch.float32: "float32", torch.float64: "float64",
                                       torch.float16: "float16", torch.bfloat16: "bfloat16"}

#: the numbers of spatial axes the core's kernels take
SPATIAL_DIMS: Tuple[int, ...] = (2, 3)


def unsupported(spatial: int) -> Optional[str]:
    """Why a convolution over ``spatial`` axes cannot run through the core (None: it can)."""
    if spatial in SPATIAL_DIMS:
        return None
    return f"{spatial}-D convolution: the core's kernels are 2-D and 3-D"


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
    def ints(v):
        return tuple(int(i) for i in v)
    return ConvShape.nd(int(x_size[1]), int(w_size[0]), ints(x_size[2:]), ints(w_size[2:]),
                        ints(padding), ints(stride), ints(dilation), int(groups), layout)


def same_padding(module) -> tuple:
    """The symmetric padding of ``padding='same'`` (``'valid'``: zeros); ValueError where
    PyTorch pads one side more (an even dilated kernel extent)."""
    if module.padding == "valid":
        return (0,) * len(module.kernel_size)
    pads = []
    for k, d in zip(module.kernel_size, module.dilation):
        total = d * (k - 1)
        if total % 2:
            raise ValueError(f"padding='same' with kernel {tuple(module.kernel_size)} and "
                             f"dilation {tuple(module.dilation)} pads one side more than the "
                             "other; the core pads both sides alike")
        pads.append(total // 2)
    return tuple(pads)


_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def layout_of(t: torch.Tensor, groups: int) -> str:
    """NHWC for a channels_last 4-D or channels_last_3d 5-D tensor of a convolution without
    groups, else NCHW (Note [PyTorch convolutions in the core])."""
    fmt = _CHANNELS_LAST.get(t.dim())
    if (fmt is not None and groups == 1 and not t.is_contiguous()
            and t.is_contiguous(memory_format=fmt)):
        return "NHWC"
    return "NCHW"


def memory_format(layout: str, dims: int) -> torch.memory_format:
    """PyTorch's memory format of ``dims``-dimensional tensors laid out as ``layout``."""
    if layout == "NHWC":
        return _CHANNELS_LAST[dims]
    return torch.contiguous_format


def layer_spec(name: str, module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> LayerSpec:
    """The planner's layer of one call of a 2-D or 3-D convolution module, input ``x`` and
    output ``y``; a transposed module's layer is the convolution from ``y`` to ``x``, whose
    backward-data is its forward."""
    pad = same_padding(module) if isinstance(module.padding, str) else tuple(module.padding)
    transposed = bool(module.transposed)
    src, dst = (y, x) if transposed else (x, y)     # the convolution from src to dst
    spatial = tuple(int(v) for v in src.shape[2:])
    kernel = tuple(int(v) for v in module.kernel_size)
    depth = dict(d=spatial[0], t=kernel[0]) if len(spatial) == 3 else {}
    return LayerSpec(name, int(x.shape[0]), int(src.shape[1]), *spatial[-2:],
                     int(dst.shape[1]), *kernel[-2:], pad=tuple(map(int, pad)),
                     stride=tuple(module.stride), dilation=tuple(module.dilation),
                     groups=module.groups, bwd_data=transposed or x.requires_grad,
                     layout=layout_of(src, module.groups), **depth)
