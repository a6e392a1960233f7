"""Plan records ($UCUDNN_RECORDS), the writer (ucudnn.measure.records): the envelope of
version 2, appends of whole lines by several threads and processes (Note [Appending records]),
the fields of kernel and net records; the runtime writing them on the fake core."""
import json
import logging
import os
import subprocess
import sys
import threading

from ucudnn.caffe import records as rr
from ucudnn.measure import records as rw
from ucudnn.measure import runtime
from ucudnn.measure.planner_state import planner_state
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import Chunk, Plan
from ucudnn.plan.settings import PlanSettings

SHAPE = ConvShape(16, 8, 8, 16, 3, 3, 1, 1)


def _net_record(**over):
    rec = {"kind": "net", "net": "n", "kernels": 0, "calls": 0, "predicted_ms": 0.0,
           "undivided_ms": None, "workspace_bytes": 0, "arena_bytes": None,
           "budget_bytes": None, "solve_s": None, "plan_s": 0.0, "cap_bytes": None,
           "members": []}
    rec.update(over)
    return rec


def test_round_trip_with_envelope(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    monkeypatch.delenv(rw.ENV, raising=False)
    assert not rw.append_record(_net_record(), path=None)      # no $UCUDNN_RECORDS: none
    assert rw.append_record(_net_record(budget_bytes=10, solve_s=0.5), path=str(path))
    (rec,) = rr.read_records(path)
    assert rec["schema"] == "ucudnn.plan-record" and rec["version"] == 2 == rw.VERSION
    assert rec["kind"] == "net" and rec["pid"] == os.getpid() and rec["time"] > 0
    assert "thread" in rec and rec["budget_bytes"] == 10
    assert rr.read_records(tmp_path / "missing.jsonl") == []
    assert rw.KINDS == ("bench", "kernel", "net") and rw.STAGES == ("dp", "ilp", "shared",
                                                                  "replan")


def _payload(i, who):
    # far larger than PIPE_BUF (4 KiB): atomicity must not rest on it
    return _net_record(budget_bytes=i, who=who,
                       members=[{"layer": f"conv{j}", "op": "fwd", "pad": "x" * 50}
                                for j in range(200)])


def test_threads_and_processes_append_whole_lines(tmp_path):
    path = str(tmp_path / "r.jsonl")
    code = ("import sys\n"
            "from ucudnn.measure import records\n"
            "for i in range(100):\n"
            "    records.append_record({'kind': 'net', 'budget_bytes': i, 'solve_s': None,"
            " 'workspace_bytes': 0, 'arena_bytes': None, 'who': sys.argv[1],"
            " 'members': [{'pad': 'y' * 60} for _ in range(300)]}, path=%r)\n") % path
    import ucudnn
    from pathlib import Path
    env = dict(os.environ, PYTHONPATH=str(Path(ucudnn.__file__).resolve().parents[1]))
    procs = [subprocess.Popen([sys.executable, "-c", code, f"p{i}"], env=env) for i in range(3)]
    threads = [threading.Thread(target=lambda t=t: [rw.append_record(_payload(i, f"t{t}"),
                                                                     path=path)
                                                    for i in range(100)])
               for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p.wait(timeout=120) == 0 for p in procs)
    recs = rr.read_records(path)             # every line parses: none cut or interleaved
    assert len(recs) == 700
    for who in [f"t{t}" for t in range(4)] + [f"p{i}" for i in range(3)]:
        assert sorted(r["budget_bytes"] for r in recs if r["who"] == who) == list(range(100))


def test_records_are_json_without_nan(tmp_path):
    path = tmp_path / "r.jsonl"
    rw.append_record(_net_record(undivided_ms=rw._num(float("nan")),
                                 predicted_ms=rw._num(float("inf"))), path=str(path))
    rec = json.loads(path.read_text())
    assert rec["undivided_ms"] is None and rec["predicted_ms"] is None


def test_kernel_record_fields(fake_core):
    k = fake_core.Kernel(SHAPE, "bwd_filter", 8, "float32", "fma", "conv1", 2)
    plan = Plan(8, (Chunk(4, 1, 3, 0.5, 100), Chunk(4, 1, 3, 0.5, 100)))
    k.set_plan(plan)
    base = Plan(8, (Chunk(8, 0, 3, 4.0, 0),))
    rec = rw.plan_record(k, "dp", plan, 4096, base, plan_s=0.1)
    assert {f: rec[f] for f in ("kind", "stage", "layer", "op", "instances", "batch", "dtype",
                                "math", "plan_limit_bytes", "plan_text", "ws_bytes",
                                "predicted_ms", "plan_s")} == {
        "kind": "kernel", "stage": "dp", "layer": "conv1", "op": "bwd_filter", "instances": 2,
        "batch": 8, "dtype": "float32", "math": "fma", "plan_limit_bytes": 4096,
        "plan_text": "4x2:algo1/m3", "ws_bytes": 4 << 20, "predicted_ms": 1.0, "plan_s": 0.1}
    # ws_bytes is what cuDNN resolved (the model: 1 MiB per sample), the plan's own figures
    # are the benchmark's
    assert rec["plan"] == [{"batch": 4, "count": 2, "algo": 1, "algo_name": "ALGO_1",
                            "math": 3, "time_ms": 0.5, "ws_bytes": 100}]
    assert rec["undivided"] == {"predicted_ms": 4.0, "ws_bytes": 0,
                                "plan": [{"batch": 8, "count": 1, "algo": 0,
                                          "algo_name": "ALGO_0", "math": 3, "time_ms": 4.0,
                                          "ws_bytes": 0}]}
    assert rec["shape"]["c"] == 16 and rec["device"] == 0 and rec["kernel_id"] == id(k)
    # settings: none before a benchmark, the PlanSettings after
    assert rec["policy"] is None and rec["limit_bytes"] is None
    planner_state(k).settings = PlanSettings(policy="all", optimizer="ilp", limit=7, sizes=(2, 8))
    assert rw.settings_fields(k) == {"policy": "all", "optimizer": "ilp", "limit_bytes": 7,
                                     "micro_batch_sizes": [2, 8], "engines": "both"}
    # legacy is what a record without the field means: not written
    planner_state(k).settings = PlanSettings(engines="legacy")
    assert "engines" not in rw.settings_fields(k)


# ------------------------------------------------------------------ the runtime writes them

def test_no_records_without_the_variable(fake_core, tmp_path, monkeypatch):
    monkeypatch.delenv(rw.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    runtime.prepare_kernel(fake_core.Kernel(SHAPE, "fwd", 8, name="c"),
                           PlanSettings(policy="undivided", limit=1 << 20))
    assert [p.name for p in tmp_path.iterdir()] == ["default.sqlite"]     # the cache only


def test_unwritable_records_file_warns_and_planning_goes_on(fake_core, tmp_path, monkeypatch,
                                                             caplog):
    monkeypatch.setenv(rw.ENV, str(tmp_path / "no" / "such" / "dir.jsonl"))
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="c")
    with caplog.at_level(logging.WARNING, logger="ucudnn"):
        runtime.prepare_kernel(k, PlanSettings(policy="undivided", limit=1 << 20))
    assert k.plan is not None
    assert any("cannot write a plan record" in m for m in caplog.messages)
