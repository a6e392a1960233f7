"""Slabs along the outermost spatial axis (Note [Slabs below one sample] in
ucudnn/plan/slabs.py) against their brute-force twin: a direct convolution along one axis in
integers, undivided and slab by slab, for every small geometry."""
import itertools
import random

import pytest

from ucudnn.plan.conv import ConvShape, out_size
from ucudnn.plan.slabs import Slab, slabs, split_rows
from ucudnn.vocab import slab_trials

C, K = 2, 3


def _rows(x, i):
    return x[i] if 0 <= i < len(x) else [0] * len(x[0])


def _out_rows(x_rows, pre, post, kernel, stride, dilation):
    return (x_rows + pre + post - dilation * (kernel - 1) - 1) // stride + 1


def fwd(x, w, pre, post, stride, dilation):
    kernel = len(w[0][0])
    n = _out_rows(len(x), pre, post, kernel, stride, dilation)
    return [[sum(w[k][c][t] * _rows(x, o * stride - pre + dilation * t)[c]
                 for c in range(C) for t in range(kernel)) for k in range(K)] for o in range(n)]


def bwd_data(dy, w, x_rows, pre, post, stride, dilation):
    kernel = len(w[0][0])
    assert len(dy) == _out_rows(x_rows, pre, post, kernel, stride, dilation)
    dx = [[0] * C for _ in range(x_rows)]
    for o, k, c, t in itertools.product(range(len(dy)), range(K), range(C), range(kernel)):
        i = o * stride - pre + dilation * t
        if 0 <= i < x_rows:
            dx[i][c] += w[k][c][t] * dy[o][k]
    return dx


def bwd_filter(x, dy, kernel, pre, post, stride, dilation):
    assert len(dy) == _out_rows(len(x), pre, post, kernel, stride, dilation)
    return [[[sum(dy[o][k] * _rows(x, o * stride - pre + dilation * t)[c]
                  for o in range(len(dy))) for t in range(kernel)] for c in range(C)]
            for k in range(K)]


def _tensor(rng, rows, cols):
    return [[rng.randint(-9, 9) for _ in range(cols)] for _ in range(rows)]


GEOMETRIES = [g for g in itertools.product(range(1, 10), range(1, 5), range(4), range(1, 4),
                                           range(1, 3))
              if out_size(g[0], g[1], g[2], g[3], g[4]) >= 1]


def _justified(op, extent, kernel, pad, stride, dilation, pieces):
    """Whether refusing to split ``op`` so is right: more pieces than the rows it splits; a
    piece of output rows whose filter windows all lie in the padding (fwd, bwd_filter); in
    bwd_data a stride past the filter's extent, or a piece of x rows that no window spans."""
    out = out_size(extent, kernel, pad, stride, dilation)
    reach = dilation * (kernel - 1)
    spans = [(o * stride - pad, o * stride - pad + reach) for o in range(out)]
    if op != "bwd_data":
        return pieces > out or any(all(b < 0 or a >= extent for a, b in spans[o0:o1])
                                   for o0, o1 in split_rows(out, pieces))
    return pieces > extent or stride > reach + 1 or any(
        not any(a <= r1 - 1 and b >= r0 for a, b in spans) for r0, r1 in split_rows(extent, pieces))


def _cut(op, geo):
    try:
        return slabs(op, *geo)
    except ValueError:
        assert _justified(op, *geo), (op, geo)
        return None


@pytest.mark.parametrize("pieces", [1, 2, 3, 4])
def test_slabs_give_the_undivided_results_for_every_small_geometry(pieces):
    rng = random.Random(pieces)
    checked = refused = 0
    for extent, kernel, pad, stride, dilation in GEOMETRIES:
        out = out_size(extent, kernel, pad, stride, dilation)
        w = [[[rng.randint(-9, 9) for _ in range(kernel)] for _ in range(C)] for _ in range(K)]
        x, dy = _tensor(rng, extent, C), _tensor(rng, out, K)
        geo = (extent, kernel, pad, stride, dilation, pieces)
        for op in ("fwd", "bwd_filter", "bwd_data"):
            cut = _cut(op, geo)
            if cut is None:
                refused += 1
                continue
            checked += 1
            split = (out, extent)[op == "bwd_data"]
            assert [(s.x, s.y)[op != "bwd_data"] for s in cut] == split_rows(split, pieces)
            for s in cut:
                assert 0 <= s.x[0] < s.x[1] <= extent and 0 <= s.y[0] < s.y[1] <= out, (op, geo)
                top = pad if op != "bwd_data" else dilation * (kernel - 1)
                assert 0 <= s.pre <= top and 0 <= s.post <= top, (op, geo, s)
                assert _out_rows(s.x_rows, s.pre, s.post, kernel, stride, dilation) == s.y_rows
            if op == "fwd":
                got = [r for s in cut for r in fwd(x[s.x[0]:s.x[1]], w, s.pre, s.post, stride,
                                                   dilation)]
                assert got == fwd(x, w, pad, pad, stride, dilation), geo
            elif op == "bwd_data":
                got = [r for s in cut for r in bwd_data(dy[s.y[0]:s.y[1]], w, s.x_rows, s.pre,
                                                        s.post, stride, dilation)]
                assert got == bwd_data(dy, w, extent, pad, pad, stride, dilation), geo
            else:
                got = [[[0] * kernel for _ in range(C)] for _ in range(K)]
                for s in cut:
                    d = bwd_filter(x[s.x[0]:s.x[1]], dy[s.y[0]:s.y[1]], kernel, s.pre, s.post,
                                   stride, dilation)
                    for k, c, t in itertools.product(range(K), range(C), range(kernel)):
                        got[k][c][t] += d[k][c][t]
                assert got == bwd_filter(x, dy, kernel, pad, pad, stride, dilation), geo
    assert checked > 800 and refused < 2 * checked    # every refusal was justified above


def test_nnunet_level_one_in_four_slabs():
    """nnU-Net's 3x3x3 at 128^3 (Note [Slabs below one sample]): four slabs of 32 output rows
    read 33 or 34 input rows, padded only at the tensor's two ends."""
    shape = ConvShape.nd(32, 32, (128, 128, 128), (3, 3, 3), 1, 1, 1, layout="NCDHW")
    assert shape.slabs("fwd", 4) == [
        Slab((0, 33), (0, 32), 1, 0), Slab((31, 65), (32, 64), 0, 0),
        Slab((63, 97), (64, 96), 0, 0), Slab((95, 128), (96, 128), 0, 1)]
    assert shape.slabs("bwd_data", 4) == [
        Slab((0, 32), (0, 33), 1, 2), Slab((32, 64), (31, 65), 2, 2),
        Slab((64, 96), (63, 97), 2, 2), Slab((96, 128), (95, 128), 2, 1)]
    assert shape.slabs("bwd_filter", 4) == shape.slabs("fwd", 4)


def test_a_2d_shape_splits_its_height_and_bad_splits_are_refused():
    shape = ConvShape(c=4, h=10, w=6, k=8, r=3, s=1, pad_h=1, stride_h=2)
    assert [s.y for s in shape.slabs("fwd", 2)] == [(0, 3), (3, 5)]
    with pytest.raises(ValueError, match="6 pieces of 5 rows"):
        shape.slabs("fwd", 6)
    with pytest.raises(ValueError, match="stride 2 past the filter's extent 1"):
        slabs("bwd_data", 8, 1, 0, 2, 1, 2)
    with pytest.raises(ValueError, match="op 'bwd' is not one of"):
        slabs("bwd", 8, 3)


def test_slab_trials_take_the_first_configs_over_the_cap():
    """Note [Slab choices tried]: the first two configs that built and need more than the
    cap, each with the fewest power-of-two pieces whose share fits and twice that; within
    ``max_pieces``."""
    M = 1 << 20
    ranked = [("a", 100 * M), ("b", None), ("c", 300 * M), ("d", 600 * M), ("e", 1000 * M)]
    assert slab_trials(ranked, 256 * M, 16) == [("c", [2, 4]), ("d", [4, 8])]
    assert slab_trials(ranked, 256 * M, 16, configs=1) == [("c", [2, 4])]
    assert slab_trials(ranked, 256 * M, 4) == [("c", [2, 4]), ("d", [4])]
    assert slab_trials([("e", 5000 * M)], 256 * M, 16) == []        # 32 pieces: too many
    assert slab_trials(ranked, 1 << 40, 16) == []                   # everything fits
    assert slab_trials(ranked, 256 * M, 1) == []
    # the nnU-Net figures of the Note: 256.05 MiB whole, 129.05 in halves
    assert slab_trials([("eng22", int(256.05 * M))], 256 * M, 16) == [("eng22", [2, 4])]
