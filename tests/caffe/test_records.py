"""Reading plan records (ucudnn.caffe.records, Note [Plan records]): version 2 only, every
kind's fields checked, errors naming file and line; the summary of one net."""
import json

import pytest

from ucudnn.caffe import records as rr
from ucudnn.measure import records as rw

HEAD = '"schema": "ucudnn.plan-record", "version": 2'


@pytest.mark.parametrize("line,msg", [
    ('{"schema": "other", "version": 2, "kind": "net"}', "not a ucudnn plan record"),
    ('{"schema": "ucudnn.plan-record", "version": 1, "kind": "kernel"}',
     "plan record version 1; this ucudnn reads version 2"),
    ('{' + HEAD + ', "kind": "ilp"}', r"unknown record kind 'ilp' \(expected one of bench, "
                                      r"kernel, net\)"),
    ('{' + HEAD + ', "kind": "net", "pid": 1}',
     "net record without field.s. workspace_bytes, arena_bytes, budget_bytes, solve_s, members"),
    ('{' + HEAD + ', "kind": "kernel", "pid": 1, "kernel_id": 1, "layer": "c", "op": "fwd", '
     '"instances": 1, "batch": 8}', "kernel record without field.s. stage, plan, plan_text"),
    ('{' + HEAD + ', "kind": "bench", "pid": 1}', "bench record without field.s. kernel_id"),
    ('{"schema": "ucudnn.plan-re', "not a JSON object"),
    ('[1, 2]', "not a ucudnn plan record"),
])
def test_reader_refuses_what_it_does_not_know(tmp_path, line, msg):
    path = tmp_path / "r.jsonl"
    path.write_text("\n" + line + "\n")
    with pytest.raises(rr.RecordError, match=msg) as e:
        rr.read_records(path)
    assert f"{path}:2" in str(e.value)


def _kernel(layer, op, ws, inst=1, optimizer="shared", stage=None, predicted=1.0, **extra):
    rec = {"schema": rw.SCHEMA, "version": rw.VERSION, "kind": "kernel", "pid": 1,
           "kernel_id": hash((layer, op)), "layer": layer, "op": op, "instances": inst,
           "batch": 8, "stage": stage or optimizer, "plan": [], "plan_text": "8x1:algo0",
           "predicted_ms": predicted, "ws_bytes": ws, "optimizer": optimizer}
    rec.update(extra)
    return rec


def _net(workspace, arena, budget=None, solve=None):
    return {"schema": rw.SCHEMA, "version": rw.VERSION, "kind": "net", "pid": 1,
            "workspace_bytes": workspace, "arena_bytes": arena, "budget_bytes": budget,
            "solve_s": solve, "members": []}


def test_records_count_the_shared_arena_once():
    """A net's workspace from its plan records: the net record says what it holds (its own
    workspace and the shared arena, which every shared kernel reuses); kernels planned alone
    (no net record) hold their own, every instance."""
    recs = [_kernel("a", "fwd", 1000), _kernel("a", "bwd_filter", 700),
            _kernel("a", "bwd_data", 300), _kernel("b", "fwd", 512, inst=2),
            _kernel("c", "fwd", 4000, optimizer="dp"), _net(4096, 1280, budget=1 << 20)]
    s = rr.summarize(rr.parse_records("\n".join(json.dumps(r) for r in recs)))
    assert s.workspace_bytes() == s.held_bytes == 4096 + 1280
    assert s.ilp_budget_bytes == 1 << 20 and s.ilp_solve_s is None
    alone = rr.summarize([_kernel("c", "fwd", 4000, optimizer="dp"),
                          _kernel("d", "fwd", 100, inst=2, optimizer="dp")])
    assert alone.held_bytes is None and alone.workspace_bytes() == 4000 + 2 * 100
    # a net whose plans need no workspace holds 0 B; no kernels at all (stock Caffe): unknown
    assert rr.summarize([_kernel("d", "fwd", 0, optimizer="dp"),
                         _net(0, None)]).workspace_bytes() == 0
    assert rr.PlanSummary().workspace_bytes() is None


def test_summary_of_a_net():
    recs = [{"kind": "bench", "layer": "conv1", "op": "fwd"},
            _kernel("conv1", "fwd", 64, optimizer="ilp", predicted=2.0, bench_s=0.5,
                    sizes=9, sizes_benchmarked=9, sizes_cached=0, plan_s=0.25, device=1),
            _kernel("conv2", "fwd", 0, inst=2, optimizer="ilp", predicted=3.0, bench_s=0.25),
            _net(64, None, budget=1000, solve=0.125),
            _kernel("conv1", "fwd", 0, optimizer="dp", stage="replan", predicted=4.0),
            _net(0, None, budget=2000, solve=0.5)]
    s = rr.summarize(recs)
    k = s.kernels["conv1/fwd"]
    assert (k.stage, k.optimizer, k.predicted_ms, k.replans) == ("replan", "dp", 4.0, 1)
    # a replan keeps the benchmark it was planned from
    assert (k.bench_s, k.sizes, k.sizes_benchmarked, k.sizes_cached) == (0.5, 9, 9, 0)
    assert s.kernels["conv2/fwd"].instances == 2 and s.replans == 1
    assert s.predicted_conv_ms() == pytest.approx(4.0 + 2 * 3.0)
    assert s.bench_s == pytest.approx(0.5 + 0.25)
    # the last net's totals, the solves summed
    assert (s.ilp_budget_bytes, s.ilp_solve_s, s.held_bytes) == (2000, 0.625, 0)
    plans = rr.kernel_plans(recs)
    assert [(p.layer, p.stage) for p in plans] == [("conv1", "ilp"), ("conv2", "ilp"),
                                                   ("conv1", "replan")]
    assert plans[0].device == 1 and plans[0].plan_s == 0.25
