"""The shared-arena optimizer (Note [Shared arena] in ucudnn/plan/network.py) against brute
force, the ILP and unlimited workspace."""
import itertools
import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))     # --import-mode=importlib
from planner_brute import random_network as _random_network  # noqa: E402
from ucudnn.plan.dp import PlanError, desirable_set  # noqa: E402
from ucudnn.plan.network import PHASES, plan_network, read_layers  # noqa: E402
from ucudnn.plan.table import group_by_kernel, read_table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "ucudnn" / "data" / "h200"
MiB = 1 << 20


def _brute(layers, benches, budget):
    """(time, arena): every layer's phases chosen by trying every combination of plans."""
    total, arena = 0.0, 0
    for l in layers:
        for phase in PHASES:
            ops = [op for op in phase if op in l.ops]
            fronts = [desirable_set(benches[l.name, op], l.n, "powerOfTwo") for op in ops]
            best = min(((sum(l.groups * p.time_ms for p in combo),
                         sum(l.groups * p.ws_bytes for p in combo))
                        for combo in itertools.product(*fronts)
                        if sum(l.groups * p.ws_bytes for p in combo) <= budget),
                       default=None)
            assert best is not None, "budget below the smallest plan"
            total += l.count * best[0]
            arena = max(arena, best[1])
    return total, arena


@pytest.mark.parametrize("seed", range(10))
def test_shared_equals_brute_force_and_beats_the_ilp(seed):
    rng = random.Random(300 + seed)
    layers, benches = _random_network(rng, rng.randint(1, 4))
    for limit in (2, 8, 20, 60):
        ilp = plan_network(layers, benches, limit=limit, optimizer="ilp")
        shared = plan_network(layers, benches, limit=limit, optimizer="shared")
        assert shared.budget == ilp.budget == limit * ilp.n_calls      # equal memory
        t, arena = _brute(layers, benches, shared.budget)
        assert shared.time_ms == pytest.approx(t, abs=1e-9)
        assert shared.arena_bytes <= shared.budget
        assert shared.held_bytes == shared.arena_bytes
        # the arena is the largest phase: each phase's kernels fit it at once
        for l in layers:
            for phase in PHASES:
                used = sum(k.groups * k.plan.ws_bytes for k in shared.kernels
                           if k.layer == l.name and k.op in phase and k.instance == 0)
                assert used <= shared.arena_bytes
        # never slower than the ILP at the same memory (Note [Shared arena])
        assert shared.time_ms <= ilp.time_ms + 1e-9
        assert [(k.layer, k.op, k.instance) for k in shared.kernels] == \
            [(k.layer, k.op, k.instance) for k in ilp.kernels]
        unlimited = plan_network(layers, benches, limit=1 << 40)
        assert shared.time_ms >= unlimited.time_ms - 1e-9


def _least_workspace_per_phase(layers, benches):
    need = {}
    for l in layers:
        for phase in PHASES:
            ops = [op for op in phase if op in l.ops]
            need[l.name, phase] = sum(
                l.groups * desirable_set(benches[l.name, op], l.n, "powerOfTwo")[0].ws_bytes
                for op in ops)
    return need


def test_budget_below_a_phase_names_the_layer():
    for seed in range(100):         # a network whose least plans need some workspace
        layers, benches = _random_network(random.Random(seed), 2, zero_ws=0.0)
        need = _least_workspace_per_phase(layers, benches)
        if max(need.values()):
            break
    (name, phase), most = max(need.items(), key=lambda kv: kv[1])
    assert most > 0
    with pytest.raises(PlanError, match=f"layer '{name}'.*run at once"):
        plan_network(layers, benches, budget=most - 1, optimizer="shared")
    assert plan_network(layers, benches, budget=1 << 30,
                        optimizer="shared").arena_bytes <= 1 << 30


@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_shared_on_the_h200_tables(net):
    """Issue 11's premise on the shipped H200 data: at 8 MiB x calls, one shared arena plans
    far faster convolutions than the ILP at the same memory, close to unlimited workspace,
    while holding a small fraction of unlimited's memory."""
    layers = read_layers(SHIPPED / f"{net}_layers.csv")
    benches = group_by_kernel(read_table(SHIPPED / f"{net}_bench.csv"))
    ilp = plan_network(layers, benches, limit=8 * MiB, optimizer="ilp")
    shared = plan_network(layers, benches, limit=8 * MiB, optimizer="shared")
    unlimited = plan_network(layers, benches, limit=1 << 40)
    assert shared.held_bytes <= 8 * MiB * ilp.n_calls
    assert shared.time_ms < ilp.time_ms
    assert shared.time_ms <= 1.25 * unlimited.time_ms
    assert shared.held_bytes < unlimited.ws_bytes / 5


def test_cli_plans_a_shared_arena(capsys):
    from ucudnn.cli import main
    assert main(["plan", "--net", "alexnet", "--optimizer", "shared", "--limit", "8MiB",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["optimizer"] == "shared" and doc["budget_bytes"] == 8 * MiB * 23   # group calls
    assert doc["ilp"]["arena_bytes"] == doc["totals"]["held_bytes"] <= doc["budget_bytes"]
    assert doc["totals"]["held_bytes"] < doc["totals"]["ws_bytes"]
    assert main(["plan", "--net", "alexnet", "--optimizer", "shared", "--budget", "64MiB"]) == 0
    out = capsys.readouterr().out
    assert "shared arena:" in out and "budget:          64.0MiB" in out
    # every layer has zero-workspace algorithms: even 1 KiB plans (slowly)
    assert main(["plan", "--net", "alexnet", "--optimizer", "shared", "--budget", "1KiB",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["held_bytes"] <= 1024
    assert main(["plan", "--net", "alexnet", "--optimizer", "dp", "--budget", "1GiB"]) == 2
    assert "ilp and shared" in capsys.readouterr().err


def test_prototxt_writes_shared_net_wide_and_refuses_it_per_layer(tmp_path, capsys):
    from ucudnn.caffe import proto as cp
    from ucudnn.caffe.prototxt import load_prototxt
    from ucudnn.cli import main
    src = REPO / "ucudnn" / "data" / "nets" / "alexnet.prototxt"
    out = tmp_path / "shared.prototxt"
    assert main(["prototxt", str(src), "-o", str(out), "--optimizer", "shared",
                 "--budget", "184MiB"]) == 0
    text = out.read_text()
    assert "optimizer: SHARED" in text and "total_workspace: 192937984" in text
    net = load_prototxt(out)
    assert net.net_ucudnn.optimizer == "shared"
    assert {s.optimizer for s in net.ucudnn.values()} == {"shared"}
    # the plan CLI takes it from the prototxt
    assert main(["plan", "--prototxt", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["optimizer"] == "shared" and doc["budget_bytes"] == 192937984
    # on one layer only: refused, naming the layer and the field (Caffe stops on it too)
    assert main(["prototxt", str(src), "-o", str(tmp_path / "x.prototxt"), "--optimizer",
                 "shared", "--layers", "conv2"]) == 2
    assert "net-wide" in capsys.readouterr().err
    pb2 = cp.load_caffe_pb2()
    bad = cp.read_net(pb2, str(src))
    cp.set_ucudnn_param(bad, policy="all")
    bad.layer[1].ucudnn_param.optimizer = bad.ucudnn_param.Optimizer.Value("SHARED")
    with pytest.raises(cp.PrototxtError, match=r"layer 'conv1'.*ucudnn_param.optimizer.*net-wide"):
        cp.write_net(bad, str(tmp_path / "bad.prototxt"))


def test_records_count_the_shared_arena_once():
    """A net's workspace from plan records: DP/ILP kernels each hold their own; SHARED kernels
    hold the arena, the largest pass of one layer (slots rounded up to 256 B)."""
    from ucudnn.caffe.records import KernelPlan, PlanSummary
    def k(layer, op, ws, inst=1, opt="shared"):
        return KernelPlan(layer=layer, op=op, instances=inst, batch=8, plan="8x1:algo0",
                          chunks=[], predicted_ms=1.0, ws_bytes=ws, stage="ilp", optimizer=opt)
    s = PlanSummary(kernels={
        "a/fwd": k("a", "fwd", 1000), "a/bwd_filter": k("a", "bwd_filter", 700),
        "a/bwd_data": k("a", "bwd_data", 300),
        "b/fwd": k("b", "fwd", 512, inst=2), "b/bwd_filter": k("b", "bwd_filter", 100, inst=2)})
    # a: fwd 1024, bwd 768 + 512 = 1280; b: fwd 1024, bwd 512 -> the arena is 1280
    assert s.workspace_bytes() == 1280
    s.kernels["c/fwd"] = k("c", "fwd", 4000, opt="dp")
    assert s.workspace_bytes() == 1280 + 4000
    # a net whose plans need no workspace holds 0 B (the stock-memory budget subtracts it);
    # no kernels at all (stock Caffe): unknown
    assert PlanSummary(kernels={"d/fwd": k("d", "fwd", 0, opt="dp")}).workspace_bytes() == 0
    assert PlanSummary().workspace_bytes() is None
