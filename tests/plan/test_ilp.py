"""Network-wide workspace division (ILP) against brute force and the per-layer DP."""
import itertools
import os
import random
import re
import sys
import tempfile
import time

import pytest

import densenet_sized
from planner_brute import random_network as _random_network
from repo_paths import SHARED, SHIPPED, needs_shared
from ucudnn.plan.dp import Chunk, Plan, desirable_set
from ucudnn.plan.ilp import IlpError, equal_share, solve_workspace_division
from ucudnn.plan.layers import read_layers
from ucudnn.plan.network import plan_network
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import group_by_kernel, read_table

MiB = 1 << 20


def _plan(t, ws, n=4):
    return Plan(n, (Chunk(n, 0, 0, float(t), int(ws)),))


def _random_fronts(rng, kernels):
    fronts = {}
    for k in range(kernels):
        pts = {(rng.randint(1, 50), rng.randint(0, 40)) for _ in range(rng.randint(1, 5))}
        fronts[f"k{k}"] = [_plan(t, w) for t, w in sorted(pts, key=lambda p: p[1])]
    return fronts


def _brute(fronts, budget):
    best = None
    for combo in itertools.product(*fronts.values()):
        if sum(p.ws_bytes for p in combo) <= budget:
            t = sum(p.time_ms for p in combo)
            best = t if best is None else min(best, t)
    return best


METHODS = pytest.mark.parametrize("method", ["cbc", "enumerate"])


@METHODS
@pytest.mark.parametrize("seed", range(12))
def test_ilp_equals_brute_force(seed, method):
    rng = random.Random(seed)
    fronts = _random_fronts(rng, rng.randint(1, 5))
    lo = sum(min(p.ws_bytes for p in f) for f in fronts.values())
    hi = sum(max(p.ws_bytes for p in f) for f in fronts.values())
    for budget in sorted({lo, (lo + hi) // 2, lo + rng.randint(0, max(0, hi - lo)), hi}):
        res = solve_workspace_division(fronts, budget, method=method)
        assert set(res.choices) == set(fronts)
        for k, p in res.choices.items():
            assert p in fronts[k]
        assert res.total_ws_bytes <= budget
        assert res.total_time_ms == pytest.approx(_brute(fronts, budget), abs=1e-9)
        assert res.status == "Optimal"


@METHODS
@pytest.mark.parametrize("seed", range(8))
def test_weighted_ilp_equals_brute_force(seed, method):
    """A kernel that runs in w instances (Caffe's groups) pays w times its time and workspace."""
    rng = random.Random(100 + seed)
    fronts = _random_fronts(rng, rng.randint(1, 4))
    weights = {k: rng.randint(1, 3) for k in fronts}
    keys = list(fronts)
    lo = sum(weights[k] * min(p.ws_bytes for p in fronts[k]) for k in keys)
    hi = sum(weights[k] * max(p.ws_bytes for p in fronts[k]) for k in keys)
    for budget in sorted({lo, (lo + hi) // 2, hi}):
        best = min(sum(weights[k] * p.time_ms for k, p in zip(keys, combo))
                   for combo in itertools.product(*fronts.values())
                   if sum(weights[k] * p.ws_bytes for k, p in zip(keys, combo)) <= budget)
        res = solve_workspace_division(fronts, budget, weights=weights, method=method)
        assert res.total_ws_bytes <= budget
        assert res.total_time_ms == pytest.approx(best, abs=1e-9)
    if lo:
        with pytest.raises(IlpError, match="below the smallest"):
            solve_workspace_division(fronts, lo - 1, weights=weights)
    with pytest.raises(IlpError, match="weight must be a positive integer"):
        solve_workspace_division(fronts, hi, weights={keys[0]: 0})


def test_auto_enumerates_small_problems_and_calls_cbc_for_large_ones(monkeypatch):
    from ucudnn.plan import ilp
    fronts = {"a": [_plan(5, 10), _plan(3, 20)], "b": [_plan(4, 7), _plan(1, 30)]}
    res = solve_workspace_division(fronts, 40)
    assert res.n_variables == 0 and res.total_time_ms == 6.0            # enumerated: 5 + 1
    monkeypatch.setattr(ilp, "ENUMERATE_MAX", 3)
    res = solve_workspace_division(fronts, 40)
    assert res.n_variables == 4 and res.total_time_ms == 6.0            # CBC's variables
    with pytest.raises(IlpError, match="method"):
        solve_workspace_division(fronts, 40, method="greedy")


def test_budget_below_the_smallest_plan():
    fronts = {"a": [_plan(5, 10), _plan(3, 20)], "b": [_plan(4, 7)]}
    with pytest.raises(IlpError, match=r"below the smallest total workspace.*\(17 B\)"):
        solve_workspace_division(fronts, 16)
    with pytest.raises(IlpError, match="must not be negative"):
        solve_workspace_division(fronts, -1)
    with pytest.raises(IlpError, match="empty desirable set"):
        solve_workspace_division({"a": []}, 100)
    res = solve_workspace_division(fronts, 17)
    assert res.total_time_ms == 9.0 and res.total_ws_bytes == 17


@pytest.mark.parametrize("seed", range(4))
def test_ilp_not_slower_than_dp_at_the_same_total_memory(seed):
    rng = random.Random(100 + seed)
    layers, benches = _random_network(rng, 3)
    for limit in (0, 8, 20, 60):
        dp = plan_network(layers, benches, PlanSettings(policy="powerOfTwo", limit=limit))
        ilp = plan_network(layers, benches, PlanSettings(policy="powerOfTwo", limit=limit,
                                                         optimizer="ilp"))
        assert ilp.budget == limit * dp.n_calls
        assert ilp.ws_bytes <= ilp.budget
        assert ilp.time_ms <= dp.time_ms + 1e-9
        assert len(ilp.kernels) == len(dp.kernels)


@needs_shared
@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_ilp_not_slower_than_dp_on_the_h200_tables(net):
    layers = read_layers(SHIPPED / f"{net}_layers.csv")
    benches = group_by_kernel(read_table(SHARED / f"{net}_default.csv"))
    for limit in (8 * MiB, 64 * MiB):
        dp = plan_network(layers, benches, PlanSettings(limit=limit))
        ilp = plan_network(layers, benches, PlanSettings(limit=limit, optimizer="ilp"))
        assert ilp.ws_bytes <= ilp.budget == limit * dp.n_calls
        assert ilp.time_ms <= dp.time_ms * (1 + 1e-9)
        assert ilp.baseline_time_ms == pytest.approx(dp.baseline_time_ms)
    # one kernel's front really trades time for memory
    front = desirable_set(benches["conv2" if net == "alexnet" else "l1_3x3", "fwd"], 256)
    assert len(front) > 2


# ---------------------------------------------------------------------------------------------
# the time limit and the solver's files (Note [ILP time limit])
# ---------------------------------------------------------------------------------------------

def _densenet_fronts():
    """(fronts, weights) of the DenseNet-121-sized problem CBC cannot prove quickly."""
    net = densenet_sized.layers()
    benches = densenet_sized.benches(net)
    fronts = {(l.name, op): desirable_set(benches[l.name, op], l.n, "undivided")
              for l in net for op in l.ops}
    return fronts, {k: 1 for k in fronts}


def _check_plan(res, fronts, budget):
    assert set(res.choices) == set(fronts)
    assert all(p in fronts[k] for k, p in res.choices.items())
    assert res.total_ws_bytes <= budget


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    """An empty temp folder for the solve ($TMPDIR, and Python's cached one reset)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.delenv("TMP", raising=False)       # PuLP prefers it over TMPDIR
    monkeypatch.setattr(tempfile, "tempdir", None)
    return folder


def test_time_limit_gives_cbcs_best_plan_with_progress(tmpdir_env, monkeypatch):
    from ucudnn.plan import ilp
    monkeypatch.setattr(ilp, "PROGRESS_EVERY", 0.5)
    fronts, weights = _densenet_fronts()
    assert len(fronts) == 359 and min(len(f) for f in fronts.values()) >= 10
    lines = []
    t0 = time.perf_counter()
    res = solve_workspace_division(fronts, densenet_sized.BUDGET, weights=weights,
                                   time_limit=2, progress=lines.append)
    wall = time.perf_counter() - t0
    assert wall < 2 + 30
    _check_plan(res, fronts, densenet_sized.BUDGET)
    assert res.status == "TimeLimit" and not res.proven
    assert re.fullmatch(r"ILP: time limit of 2 s reached: CBC's best plan so far, not proven "
                        r"optimal \(gap (\d+(\.\d+)?% to CBC's bound|unknown)\)",
                        res.note), res.note
    assert res.solve_seconds >= 2
    # never slower than the plan without the solver
    fallback = equal_share(fronts, weights, densenet_sized.BUDGET)
    assert res.total_time_ms <= sum(p.time_ms for p in fallback.values()) + 1e-9
    assert lines[0] == ("ILP: CBC chooses among %d plans of 359 kernels, time limit 2 s"
                        % sum(len(f) for f in fronts.values()))
    assert len(lines) >= 2, lines
    assert all(re.fullmatch(r"ILP: \d+ s of 2 s, (no plan found yet|best plan [0-9.]+ ms"
                            r"(, CBC's bound [0-9.]+ ms( \(gap [0-9.]+%\))?)?)", l)
               for l in lines[1:]), lines
    assert list(tmpdir_env.iterdir()) == []


def test_proven_plan_leaves_no_files_and_no_note(tmpdir_env):
    fronts = {"a": [_plan(5, 10), _plan(3, 20)], "b": [_plan(4, 7), _plan(1, 30)]}
    lines = []
    res = solve_workspace_division(fronts, 40, method="cbc", progress=lines.append)
    assert res.status == "Optimal" and res.proven and res.note is None and res.gap is None
    assert res.total_time_ms == 6.0
    assert lines == ["ILP: CBC chooses among 4 plans of 2 kernels, time limit 60 s"]
    assert list(tmpdir_env.iterdir()) == []


def _fake_cbc(folder, action):
    """A CBC binary that records its arguments and then ``action``: ``fail`` (exit 3),
    ``interrupt`` (SIGINT to the process that runs it, as Ctrl-C in a terminal does) or
    ``no_solution`` (CBC's solution file when the time passed before any integer plan)."""
    script = folder / f"cbc_{action}"
    script.write_text(f"""#!{sys.executable}
import os, signal, sys, time
args = sys.argv[1:]
with open({str(folder / "args.txt")!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
if {action!r} == "fail":
    sys.exit(3)
if {action!r} == "interrupt":
    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(1)
    sys.exit(1)
with open(args[args.index("-solution") + 1], "w") as f:
    f.write("Stopped on time (no integer solution - continuous used) - objective value 0\\n")
""")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("action", ["fail", "interrupt"])
def test_failed_or_interrupted_solve_leaves_no_files(tmp_path, tmpdir_env, monkeypatch, action):
    from ucudnn.plan import ilp
    monkeypatch.setattr(ilp, "cbc_path", lambda: str(_fake_cbc(tmp_path, action)))
    fronts = {"a": [_plan(5, 10), _plan(3, 20)], "b": [_plan(4, 7), _plan(1, 30)]}
    if action == "fail":
        with pytest.raises(IlpError, match=r"^ILP solver \(CBC\) failed: "):
            solve_workspace_division(fronts, 40, method="cbc")
    else:
        with pytest.raises(KeyboardInterrupt):
            solve_workspace_division(fronts, 40, method="cbc")
    # CBC was handed its files in a folder of the solve's own, inside $TMPDIR
    args = (tmp_path / "args.txt").read_text().split()
    mps = next(a for a in args if a.endswith(".mps"))
    assert os.path.dirname(os.path.dirname(mps)) == str(tmpdir_env)
    assert os.path.basename(os.path.dirname(mps)).startswith("ucudnn-ilp-")
    assert list(tmpdir_env.iterdir()) == []


def test_no_plan_in_time_gives_the_equal_share_plan(tmp_path, tmpdir_env, monkeypatch):
    from ucudnn.plan import ilp
    monkeypatch.setattr(ilp, "cbc_path", lambda: str(_fake_cbc(tmp_path, "no_solution")))
    fronts = {"a": [_plan(9, 0), _plan(5, 10), _plan(3, 20)],
              "b": [_plan(8, 4), _plan(4, 7), _plan(1, 30)]}
    res = solve_workspace_division(fronts, 40, weights={"a": 2, "b": 1}, method="cbc",
                                   time_limit=5)
    assert res.status == "TimeLimitNoSolution" and not res.proven
    assert "-sec 5 " in (tmp_path / "args.txt").read_text()
    # smallest plans: 2 x 0 + 4 = 4 B; 36 B left, 12 B per call: a within 12 B, b within 16 B
    assert res.choices == {"a": fronts["a"][1], "b": fronts["b"][1]}
    assert res.total_ws_bytes == 27 <= 40
    assert res.note == ("ILP: time limit of 5 s reached before CBC found a plan: the "
                        "equal-share plan (each kernel's fastest plan within an equal share of "
                        "the budget per call), not proven optimal")
    assert list(tmpdir_env.iterdir()) == []


@pytest.mark.parametrize("seed", range(20))
def test_equal_share_is_the_dp_rule_within_the_budget(seed):
    """Each kernel's fastest plan within its smallest plan plus an equal share per call of
    the rest; within the budget for every budget the smallest plans fit."""
    rng = random.Random(300 + seed)
    fronts = _random_fronts(rng, rng.randint(1, 6))
    weights = {k: rng.randint(1, 3) for k in fronts}
    need = sum(weights[k] * min(p.ws_bytes for p in f) for k, f in fronts.items())
    calls = sum(weights.values())
    for budget in (need, need + rng.randint(0, 60), need + 1000):
        chosen = equal_share(fronts, weights, budget)
        assert sum(weights[k] * p.ws_bytes for k, p in chosen.items()) <= budget
        share = (budget - need) // calls
        for k, f in fronts.items():
            fit = [p for p in f if p.ws_bytes <= min(q.ws_bytes for q in f) + share]
            assert chosen[k].time_ms == min(p.time_ms for p in fit)
    # with a zero-workspace plan everywhere it is the DP's limit: budget / calls per call
    zero = {k: [_plan(60, 0)] + f for k, f in fronts.items()}
    chosen = equal_share(zero, weights, 10 * calls)
    for k, f in zero.items():
        assert chosen[k].time_ms == min(p.time_ms for p in f if p.ws_bytes <= 10)


def test_time_limit_must_be_positive():
    fronts = {"a": [_plan(5, 10)]}
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(IlpError, match="time_limit: must be a positive number"):
            solve_workspace_division(fronts, 40, time_limit=bad)
    assert solve_workspace_division(fronts, 40, time_limit=None, method="cbc").proven
