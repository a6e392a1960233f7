"""Slabs: a convolution split along its outermost spatial axis (depth, or height in 2-D), the
geometry of each piece.

Note [Slabs below one sample]
    Micro-batching stops at one sample. nnU-Net's 3x3x3 convolutions at 128^3 in NCDHW and
    bf16 (results/h100/torch/README.md) show where that is not enough: every fast engine
    config needs 256-386 MiB of workspace at batch 1 (it transposes the sample to NDHWC),
    so within 256 MiB only configs 20-60x slower remain. Their workspace grows with the
    rows they are given, so a slab of the sample -- a range of the outermost spatial axis --
    needs a fraction of it, as video VAEs slice frames by hand.

    A slab is described by the forward geometry of its piece (:class:`Slab`): the rows ``x``
    of the input-side tensor and ``y`` of the output-side tensor, and the zero padding
    ``pre`` before and ``post`` after the x rows, so that the piece's forward convolution,
    with the undivided kernel, stride and dilation, has exactly ``y``'s rows as its output,
    row for row as in the undivided convolution. An operation splits the tensor it writes:

    * ``fwd`` splits y: each slab reads x's rows under its outputs (the filter's halo), and
      pads only where those reach past x's edges. Every output row is computed once, from
      the same products as undivided.
    * ``bwd_data`` splits x (its result dx): each slab reads the dy rows whose filter
      windows touch its rows; ``pre`` and ``post`` then stand for the rows of dx outside
      the slab, whose contributions are dropped. Every dx row gets all its contributions
      once; a row no window touches (a stride that skips rows at the end) is zero, as
      undivided.
    * ``bwd_filter`` splits dy: the slabs' filter gradients are partial sums, accumulated
      (beta 1, as micro-batches are).

    Pads differ at the two ends of a slab (``pre`` != ``post``) wherever a slab meets one
    edge of the tensor only, and in ``bwd_data`` they can exceed the undivided padding (up
    to the dilated filter's reach). cuDNN's graph API takes pre- and post-padding apart
    (the legacy API cannot); which engines accept unequal ones is not yet measured. Where
    one takes equal pads only, fwd and bwd_data can pad both ends by the larger and widen
    the window into the neighbour's rows: the extra rows written land in the neighbour's
    range and are overwritten where the two boundary slabs run first (three slabs or
    more); bwd_filter, which accumulates, would need its dy rows copied with zero rows
    appended. Where the stride exceeds the dilated filter's extent (rows no window reads),
    ``bwd_data`` has no slabs.

    cuDNN's graph API takes pre- and post-padding apart, and on an H100 with cuDNN 9.19
    every engine built such pieces (results/h100/slabs/), though some computed them wrong
    (Note [Slab plans] in cython/ucudnn/_graph.pyx: the core checks every slab choice).
    The geometry has brute-force twins (a direct convolution in integers) in
    ``tests/plan/test_slabs.py``. To the planners a split is one more choice at its
    micro-batch size (Note [Choices] in ucudnn/vocab.py): its time the sum of its slabs',
    its workspace the largest slab's, so the DP, the ILP and the arena need no change.

Note [Slab choices tried]
    The benchmark tries slabs at the smallest micro-batch size it measures, for the first
    ``SLAB_CONFIGS`` engine configs in the heuristics' ranking that built but need more
    workspace than the cap (``ucudnn.vocab.slab_trials``, beside the graph search's other
    rule, ``configs_within``): a slab's workspace is about the whole
    config's times its share of the rows (nnU-Net's 32->32 3x3x3 at 128^3, bf16: 256.05 MiB
    whole, 129.05 in halves, 66.05 in quarters), so the fewest pieces (a power of two) at
    which the share fits the cap is tried, then twice as many where the constant part
    keeps it over. Micro-batching covers the larger sizes. Slabs are tried for 3-D kernels
    only (``Kernel.max_slabs``), whose samples are the ones too large for one call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

from ..vocab import OPS

__all__ = ["Slab", "split_rows", "slabs", "shape_slabs"]


@dataclass(frozen=True)
class Slab:
    """One piece's forward geometry along the split axis (Note [Slabs below one sample]):
    rows ``x`` = [start, stop) of the input-side tensor, ``y`` of the output-side tensor,
    zero padding ``pre`` before and ``post`` after the x rows."""
    x: Tuple[int, int]
    y: Tuple[int, int]
    pre: int
    post: int

    @property
    def x_rows(self) -> int:
        return self.x[1] - self.x[0]

    @property
    def y_rows(self) -> int:
        return self.y[1] - self.y[0]


def split_rows(rows: int, pieces: int) -> List[Tuple[int, int]]:
    """``rows`` split into ``pieces`` contiguous ranges, the first ``rows % pieces`` one row
    longer."""
    if not 1 <= pieces <= rows:
        raise ValueError(f"slabs: {pieces} pieces of {rows} rows")
    size, extra = divmod(rows, pieces)
    out, start = [], 0
    for i in range(pieces):
        stop = start + size + (i < extra)
        out.append((start, stop))
        start = stop
    return out


def slabs(op: str, extent: int, kernel: int, pad: int = 0, stride: int = 1,
          dilation: int = 1, pieces: int = 2) -> List[Slab]:
    """The slabs of ``op`` along one axis of ``extent`` input rows (Note [Slabs below one
    sample]): ``pieces`` of the rows ``op`` writes (y for fwd and bwd_filter, x for
    bwd_data). ValueError where the axis cannot be split so: more pieces than rows, a piece
    of output rows that read only padding, or in bwd_data a stride past the filter's extent
    or a piece no filter window touches."""
    if op not in OPS:
        raise ValueError(f"slabs: op {op!r} is not one of {', '.join(OPS)}")
    reach = dilation * (kernel - 1)          # the dilated filter's extent, less one
    out = (extent + 2 * pad - reach - 1) // stride + 1     # as conv.out_size
    if out < 1:
        raise ValueError("slabs: the filter is larger than the padded input")
    if op != "bwd_data":
        got = []
        for o0, o1 in split_rows(out, pieces):
            first, last = o0 * stride - pad, (o1 - 1) * stride - pad + reach   # x rows read
            if max(first, 0) >= min(last + 1, extent):
                raise ValueError(f"slabs: {op} output rows {o0}-{o1 - 1} of {out} read only "
                                 "padding; fewer pieces")
            got.append(Slab((max(first, 0), min(last + 1, extent)), (o0, o1),
                            max(0, -first), max(0, last + 1 - extent)))
        return got
    if stride > reach + 1:
        raise ValueError(f"slabs: bwd_data with stride {stride} past the filter's extent "
                         f"{reach + 1} (rows no window reads)")
    got = []
    for a, b in split_rows(extent, pieces):
        o0 = max(0, -(-(a + pad - reach) // stride))      # the first window touching row a
        o1 = min(out, (b - 1 + pad) // stride + 1)        # past the last touching row b - 1
        if o0 >= o1:
            raise ValueError(f"slabs: bwd_data rows {a}-{b - 1} of {extent}: no filter "
                             "window touches them; fewer pieces")
        pre = pad + a - o0 * stride
        post = max(0, (o1 - o0 - 1) * stride + reach + 1 - (b - a) - pre)
        got.append(Slab((a, b), (o0, o1), pre, post))
    return got


def shape_slabs(shape, op: str, pieces: int) -> List[Slab]:
    """:func:`slabs` of ``shape`` (a :class:`ucudnn.plan.conv.ConvShape`, whose ``slabs``
    method this is) along its outermost spatial axis (depth in 3-D, height in 2-D)."""
    return slabs(op, shape.spatial[0], shape.kernel[0], shape.pad[0], shape.stride[0],
                 shape.dilation[0], pieces)

