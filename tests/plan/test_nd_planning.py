"""3-D convolutions planned by each optimizer through the fake core, as ``ucudnn plan
--layers`` runs them, against the brute-force twins (Note [N-D geometry] in
ucudnn/plan/conv.py): the planners see 3-D kernels exactly as 2-D ones, the core gets each
layer's 3-D kernel, the cache keys it, and every plan is the best there is."""
import itertools
import json
import random
import sqlite3
import zlib

import pytest

from planner_brute import brute_best, caffe_passes, random_bench
from ucudnn.cli import main
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import DIVIDE_MARGIN, desirable_set
from ucudnn.plan.layers import LayerSpec, write_layers
from ucudnn.plan.network import ALIGN
from ucudnn.plan.settings import candidate_sizes
from ucudnn.plan.table import AlgoPerf

N = 8


def _table(kern):
    """The model 'GPU''s table of one kernel: random, seeded by its cache-key text and op, so
    that kernels of other 3-D geometry get other tables."""
    rng = random.Random(zlib.crc32(f"{kern.shape.key()}|{kern.op}".encode()))
    return random_bench(rng, kern.n, zero_ws=0.7)


def _model(kern, b):
    return [AlgoPerf(p.algo, p.time_ms, p.ws_bytes, p.math) for p in _table(kern)[b]]


def _layers(seed, groups):
    """Three 3-D layers of random geometry (per-axis kernel, pad, stride, dilation), grouped
    where ``groups`` (NCDHW: a layer list has no layout)."""
    rng = random.Random(seed)
    out = []
    for i in range(3):
        g = rng.choice([1, 2]) if groups else 1
        kernel = tuple(rng.choice([1, 3]) for _ in range(3))
        dil = tuple(rng.choice([1, 2]) for _ in range(3))
        pad = tuple(d * (k // 2) for d, k in zip(dil, kernel))
        out.append(LayerSpec(f"c{i}", N, 2 * g, rng.randint(4, 12), rng.randint(4, 12), 4 * g,
                             kernel[1], kernel[2], pad=pad,
                             stride=tuple(rng.choice([1, 2]) for _ in range(3)), dilation=dil,
                             groups=g, bwd_data=i > 0, d=rng.randint(3, 6), t=kernel[0]))
    return out


def _plan(fake_core, capsys, tmp_path, layers, optimizer, limit):
    fake_core.model = _model
    write_layers(tmp_path / "l.csv", layers)
    cache = tmp_path / "c.sqlite"
    capsys.readouterr()
    assert main(["plan", "--layers", str(tmp_path / "l.csv"), "--optimizer", optimizer,
                 "--limit", str(limit), "--cache", str(cache), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    conn = sqlite3.connect(cache)
    keys = {r[0] for r in conn.execute("SELECT shape FROM entries")}
    conn.close()
    shapes = {(ConvShape.from_layer(l), op) for l in layers for op in l.ops}
    # the core got each layer's 3-D kernel, and the cache keys it
    assert {(c.shape, c.op) for c in fake_core.calls} == shapes
    assert keys == {s.key() for s, _ in shapes} and all(",d=" in k for k in keys)
    assert all(s.ndim == 3 for s, _ in shapes)
    return doc, {(l.name, op): _table(fake_core.Kernel(ConvShape.from_layer(l), op, N))
                 for l in layers for op in l.ops}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("limit", [0, 12, 40])
def test_dp_plans_3d_kernels_as_brute_force(fake_core, capsys, tmp_path, seed, limit):
    layers = _layers(seed, groups=True)
    doc, tables = _plan(fake_core, capsys, tmp_path, layers, "dp", limit)
    sizes = candidate_sizes(doc["policy"], N)
    for k in doc["kernels"]:
        bench = tables[k["layer"], k["op"]]
        best = brute_best(bench, N, sizes, limit)
        whole = brute_best(bench, N, [N], limit) if N in sizes else float("inf")
        # Note [Dividing must beat the noise]: the undivided plan unless beaten by the margin
        want = whole if best * DIVIDE_MARGIN > whole else best
        assert k["time_ms"] == pytest.approx(want, rel=1e-12), k["kernel"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("optimizer", ["ilp", "shared"])
def test_network_optimizers_plan_3d_kernels_as_brute_force(fake_core, capsys, tmp_path, seed,
                                                           optimizer):
    layers = _layers(100 + seed, groups=False)
    doc, tables = _plan(fake_core, capsys, tmp_path, layers, optimizer, 12)
    budget = doc["budget_bytes"]
    fronts = {k: desirable_set(t, N, doc["policy"]) for k, t in tables.items()}
    if optimizer == "ilp":
        best = min(sum(p.time_ms for p in combo) for combo in itertools.product(
            *fronts.values()) if sum(p.ws_bytes for p in combo) <= budget)
    else:       # each pass within the budget less the arena's alignment per call
        best = 0.0
        for l in layers:
            for pass_ in caffe_passes(l.groups):
                ops = [op for op in pass_ if op in l.ops]
                within = max(0, budget - ALIGN * len(ops))
                best += min(sum(p.time_ms for p in combo) for combo in itertools.product(
                    *(fronts[l.name, op] for op in ops))
                    if sum(p.ws_bytes for p in combo) <= within)
    assert doc["totals"]["time_ms"] == pytest.approx(best, rel=1e-12)
