"""Brute-force references for the planner tests: random benchmark tables and every plan."""
import random
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ucudnn.plan.table import AlgoPerf


def random_bench(rng: random.Random, n: int, n_algos: int = 3, *, int_times: bool = False,
                 zero_ws: float = 0.5, sizes: Sequence[int] = None,
                 deterministic: Optional[float] = None) -> Dict[int, List[AlgoPerf]]:
    """A table for sizes 1..n (or ``sizes``): random times, workspaces that grow with b.
    ``deterministic``: each choice is deterministic with that probability, else
    non-deterministic or of unknown determinism alike (None: every choice unknown)."""
    bench = {}
    for b in (sizes or range(1, n + 1)):
        perfs = []
        for a in range(rng.randint(1, n_algos)):
            if a == 0 and rng.random() < zero_ws:
                ws = 0
            else:
                ws = rng.choice([0, 1, 2, 3, 5, 8]) * b + rng.randint(0, 4)
            t = rng.randint(1, 20) * b if int_times else rng.uniform(0.1, 2.0) * b ** rng.uniform(0.5, 1.2)
            det = None
            if deterministic is not None:
                det = True if rng.random() < deterministic else rng.choice([False, None])
            perfs.append(AlgoPerf(a, float(t), ws, rng.randint(0, 1), deterministic=det))
        bench[b] = perfs
    return bench


def all_plans(bench, n: int, sizes: Sequence[int], limit: float = float("inf"),
              deterministic: bool = False) -> Iterator[List[Tuple[int, AlgoPerf]]]:
    """Every multiset of (micro-batch size, algorithm) chunks summing to ``n`` whose chunks
    each fit ``limit``: one representative per plan (the order of chunks does not matter).
    ``deterministic``: only of choices marked deterministic (True, not None)."""
    items = [(b, p) for b in sorted(set(sizes)) if b in bench for p in bench[b]
             if p.ws_bytes <= limit and (not deterministic or p.deterministic is True)]

    def rec(start: int, left: int, acc: list):
        if left == 0:
            yield list(acc)
            return
        for i in range(start, len(items)):
            b, p = items[i]
            if b <= left:
                acc.append(items[i])
                yield from rec(i, left - b, acc)
                acc.pop()
    yield from rec(0, n, [])


def plan_cost(chunks) -> Tuple[float, int]:
    return sum(p.time_ms for _, p in chunks), max((p.ws_bytes for _, p in chunks), default=0)


def brute_best(bench, n, sizes, limit, deterministic: bool = False) -> float:
    """Least total time of any plan within ``limit`` (inf if none)."""
    return min((plan_cost(c)[0] for c in all_plans(bench, n, sizes, limit, deterministic)),
               default=float("inf"))


def brute_front(bench, n, sizes, deterministic: bool = False) -> List[Tuple[float, int]]:
    """The Pareto front of (time, workspace) over every plan, sorted by workspace."""
    points = {plan_cost(c) for c in all_plans(bench, n, sizes, deterministic=deterministic)}
    front = [(t, w) for t, w in points
             if not any(t2 <= t and w2 <= w and (t2, w2) != (t, w) for t2, w2 in points)]
    return sorted(front, key=lambda p: (p[1], p[0]))


def caffe_passes(groups: int):
    """The calls Caffe's cuDNN layer runs at the same time, written out for the twins: a
    one-group layer runs its forward, backward-filter and backward-data one after another; a
    grouped one runs its forward's group calls at once, then its backward-filter's and
    backward-data's group calls all at once."""
    if groups == 1:
        return (("fwd",), ("bwd_filter",), ("bwd_data",))
    return (("fwd",), ("bwd_filter", "bwd_data"))


def random_network(rng: random.Random, n_layers: int, n: int = 8, zero_ws: float = 1.0,
                   deterministic: Optional[float] = None):
    """(layers, benches): ``n_layers`` small convolution layers (1 or 2 groups, 1 or 2
    identical copies, no backward-data for the first) with :func:`random_bench` tables
    (``deterministic``: as there)."""
    from ucudnn.plan.layers import LayerSpec
    layers, benches = [], {}
    for i in range(n_layers):
        g = rng.randint(1, 2)
        l = LayerSpec(f"L{i}", n, 3 * g, 8, 8, 4 * g, 3, 3, pad=1, groups=g,
                      count=rng.randint(1, 2), bwd_data=i > 0)
        layers.append(l)
        for op in l.ops:
            benches[l.name, op] = random_bench(rng, n, zero_ws=zero_ws,
                                               sizes=[1, 2, 4, 8] if rng.random() < 0.5 else None,
                                               deterministic=deterministic)
    return layers, benches
