"""Plan records ($UCUDNN_RECORDS): written by the runtime, appended safely by several threads
and processes, read back and validated (Note [Plan records])."""
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ucudnn

sys.path.insert(0, str(Path(__file__).resolve().parent))     # --import-mode=importlib
from fake_kernel import fake_kernel  # noqa: E402
from ucudnn.caffe import records as rr  # noqa: E402
from ucudnn.measure import records as rw  # noqa: E402
from ucudnn.measure import runtime  # noqa: E402
from ucudnn.plan.table import AlgoPerf  # noqa: E402

ROOT = str(Path(ucudnn.__file__).resolve().parents[1])


def test_round_trip_with_envelope(tmp_path):
    path = tmp_path / "r.jsonl"
    assert not rw.append_record({"kind": "ilp"}, path=None)        # no $UCUDNN_RECORDS: none
    rw.append_record({"kind": "ilp", "budget_bytes": 10, "solve_s": 0.5, "members": []},
                     path=str(path))
    (rec,) = rr.read_records(path)
    assert rec["schema"] == "ucudnn.plan-record" and rec["version"] == 1
    assert rec["kind"] == "ilp" and rec["pid"] > 0 and rec["time"] > 0 and "thread" in rec
    assert rr.read_records(tmp_path / "missing.jsonl") == []


@pytest.mark.parametrize("line,msg", [
    ('{"schema": "other", "version": 1, "kind": "ilp"}', "not a ucudnn plan record"),
    ('{"schema": "ucudnn.plan-record", "version": 2, "kind": "ilp"}', "version 2"),
    ('{"schema": "ucudnn.plan-record", "version": 1, "kind": "weird"}', "unknown record kind"),
    ('{"schema": "ucudnn.plan-record", "version": 1, "kind": "ilp", "pid": 1}',
     "without field"),
    ('{"schema": "ucudnn.plan-re', "not a JSON object"),
    ('[1, 2]', "not a ucudnn plan record"),
])
def test_reader_refuses_what_it_does_not_know(tmp_path, line, msg):
    path = tmp_path / "r.jsonl"
    path.write_text("\n" + line + "\n")
    with pytest.raises(rr.RecordError, match=msg) as e:
        rr.read_records(path)
    assert f"{path}:2" in str(e.value)


def _payload(i, who):
    # far larger than PIPE_BUF (4 KiB): atomicity must not rest on it
    return {"kind": "ilp", "budget_bytes": i, "solve_s": 0.0, "who": who,
            "members": [{"layer": f"conv{j}", "op": "fwd", "pad": "x" * 50} for j in range(200)]}


def test_threads_and_processes_append_whole_lines(tmp_path):
    path = str(tmp_path / "r.jsonl")
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from ucudnn.measure import records\n"
            "for i in range(100):\n"
            "    records.append_record({'kind': 'ilp', 'budget_bytes': i, 'solve_s': 0.0,"
            " 'who': sys.argv[1], 'members': [{'pad': 'y' * 60} for _ in range(300)]},"
            " path=%r)\n") % (ROOT, path)
    procs = [subprocess.Popen([sys.executable, "-c", code, f"p{i}"]) for i in range(3)]
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


# ------------------------------------------------------------------ the runtime writes them

def _fake_measure(kern, sizes, *, repeats=3, cache_path=None, workspace_cap=None,
                  progress=None, cache=None):
    out = {}
    for b in sizes:
        # algo 1: fast but needs 1 KiB per sample; algo 0: slow, no workspace
        out[b] = [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.25 * b + 0.1, 1024 * b)]
        if progress is not None and b % 2 == 0:       # odd sizes "from the cache"
            progress(b)
    return out


@pytest.fixture
def records_file(tmp_path, monkeypatch):
    from ucudnn.measure import bench
    monkeypatch.setattr(bench, "measure", _fake_measure)
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv(rw.ENV, str(path))
    return path


def test_runtime_records_dp_plan_bench_and_replan(records_file, caplog):
    k = fake_kernel("conv1", "bwd_filter", n=8, instances=2)
    with caplog.at_level(logging.INFO, logger="ucudnn"):
        runtime.prepare_kernel(k, policy="powerOfTwo", optimizer=0, limit=4096)
        runtime.replan_kernel(k, 0)
    bench, dp, replan = rr.read_records(records_file)
    assert bench["kind"] == "bench" and bench["layer"] == "conv1" and bench["instances"] == 2
    assert (bench["sizes"], bench["sizes_benchmarked"], bench["sizes_cached"]) == (4, 3, 1)
    assert bench["shape"]["c"] == 16 and bench["policy"] == "powerOfTwo"
    assert dp["kind"] == "kernel" and dp["stage"] == "dp" and dp["limit_bytes"] == 4096
    assert dp["kernel_id"] == bench["kernel_id"] == replan["kernel_id"]
    assert sum(r["batch"] * r["count"] for r in dp["plan"]) == 8
    assert all(r["ws_bytes"] <= 4096 for r in dp["plan"]) and dp["ws_bytes"] <= 4096
    assert {r["algo_name"] for r in dp["plan"]} <= {"ALGO_0", "ALGO_1"}
    assert dp["predicted_ms"] < dp["undivided"]["predicted_ms"]    # micro-batching pays
    assert dp["bench_s"] >= 0 and dp["plan_s"] >= 0
    assert replan["stage"] == "replan" and replan["ws_bytes"] == 0
    assert replan["plan"] == [{"batch": 8, "count": 1, "algo": 0, "algo_name": "ALGO_0",
                               "math": 0, "time_ms": 8.0, "ws_bytes": 0}]
    s = rr.summarize(rr.read_records(records_file))
    k1 = s.kernels["conv1/bwd_filter"]
    assert s.replans == 1 and k1.replans == 1 and k1.sizes_benchmarked == 3
    assert s.predicted_conv_ms() == pytest.approx(2 * 8.0)
    # people read cuDNN's names; the C API's describe() keeps algoN
    assert any("ALGO_1" in m for m in caplog.messages)
    assert k.plan.describe() == "8x1:algo0"


def test_runtime_records_the_ilp(records_file):
    pytest.importorskip("pulp")
    ks = [fake_kernel("conv1", "fwd"), fake_kernel("conv2", "fwd", instances=2)]
    for k in ks:
        runtime.prepare_kernel(k, policy="powerOfTwo", optimizer=1, limit=0)
    runtime.plan_network_kernels(ks, 3 * 4096, counts=[1, 2])
    recs = rr.read_records(records_file)
    assert [r["kind"] for r in recs] == ["bench", "kernel"] * 2 + ["ilp", "kernel", "kernel"]
    assert [r["stage"] for r in recs if r["kind"] == "kernel"] == [
        "ilp_initial", "ilp_initial", "ilp", "ilp"]
    ilp = recs[4]
    assert ilp["budget_bytes"] == 3 * 4096 and ilp["instances"] == 3 and ilp["solve_s"] >= 0
    assert [(m["layer"], m["instances"]) for m in ilp["members"]] == [("conv1", 1),
                                                                        ("conv2", 2)]
    assert ilp["ws_bytes"] <= 3 * 4096
    s = rr.summarize(recs)
    assert s.kernels["conv2/fwd"].stage == "ilp" and s.kernels["conv2/fwd"].instances == 2
    assert s.kernels["conv2/fwd"].bench_s is not None        # from the benchmark before
    assert s.ilp_budget_bytes == 3 * 4096 and s.ilp_solve_s == ilp["solve_s"]


def test_no_records_without_the_variable(tmp_path, monkeypatch):
    from ucudnn.measure import bench
    monkeypatch.setattr(bench, "measure", _fake_measure)
    monkeypatch.delenv(rw.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    runtime.prepare_kernel(fake_kernel("c"), policy="undivided", optimizer=0, limit=1 << 20)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_records_file_warns_and_planning_goes_on(tmp_path, monkeypatch, caplog):
    from ucudnn.measure import bench
    monkeypatch.setattr(bench, "measure", _fake_measure)
    monkeypatch.setenv(rw.ENV, str(tmp_path / "no" / "such" / "dir.jsonl"))
    k = fake_kernel("c")
    with caplog.at_level(logging.WARNING, logger="ucudnn"):
        runtime.prepare_kernel(k, policy="undivided", optimizer=0, limit=1 << 20)
    assert k.plan is not None
    assert any("cannot write a plan record" in m for m in caplog.messages)


def test_records_are_json_without_nan(tmp_path):
    path = tmp_path / "r.jsonl"
    rw.append_record({"kind": "ilp", "budget_bytes": 1, "solve_s": 0.0, "members": [],
                      "undivided_ms": rw._num(float("nan"))}, path=str(path))
    assert json.loads(path.read_text())["undivided_ms"] is None


# ------------------------------------------------------------------ the pruned search at run time

def test_pruned_search_at_run_time(tmp_path, monkeypatch):
    """Note [Pruned search at run time]: a kernel of policy ``all`` replayed from the H200 table
    of ResNet-18's l1_3x3 forward (every size 1..256 recorded): with ``UCUDNN_SEARCH=pruned``
    the plan is the exhaustive one's (within 1 %) from a fraction of the sizes, re-plans use
    the sizes measured, the records say which search ran; the ILP still measures every size."""
    import lzma
    from ucudnn.measure import bench
    from ucudnn.plan.dp import plan_kernel
    from ucudnn.plan.table import group_by_kernel, parse_table
    from ucudnn.plan.dp import PlanError
    from ucudnn.vocab import InputError
    data = Path(__file__).resolve().parent / "data" / "h200_all_sizes" / "resnet18_bench.csv.xz"
    with lzma.open(data, "rt") as f:
        table = group_by_kernel(parse_table(f.read(), source=data.name))[("l1_3x3", "fwd")]
    asked = []

    def replay(kern, sizes, *, repeats=3, cache_path=None, workspace_cap=None, progress=None,
               cache=None):
        asked.extend(sizes)
        for b in sizes:
            progress(b)
        return {b: table[b] for b in sizes}

    monkeypatch.setattr(bench, "measure", replay)
    # the runtime looks the kernel up in the cache (nothing there: the replay stores nothing)
    monkeypatch.setattr(bench, "device_info",
                        lambda: {"gpu": "replayed H200", "cudnn_version": 91400})
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv(rw.ENV, str(path))
    limit = 8 << 20
    full = plan_kernel(table, 256, "all", limit)

    monkeypatch.delenv(runtime.SEARCH_ENV, raising=False)     # pruned is the default
    assert runtime.search_mode() == "pruned"
    k = fake_kernel("l1_3x3", "fwd", n=256)
    runtime.prepare_kernel(k, policy="all", optimizer=0, limit=limit)
    assert full.time_ms <= k.plan.time_ms <= 1.01 * full.time_ms
    assert len(asked) == len(set(asked)) <= 80                  # of 256
    assert k.held == [True, False]        # the benchmark's buffers set up once for the search
    rec = rr.read_records(path)[0]
    assert rec["kind"] == "bench" and rec["search"] == "pruned"
    assert rec["sizes"] == rec["sizes_benchmarked"] == len(asked) and rec["search_rounds"] >= 1
    runtime.replan_kernel(k, 1 << 20)
    assert {c.batch for c in k.plan.chunks} <= set(asked) and k.workspace_size <= 1 << 20

    asked.clear()
    monkeypatch.setenv(runtime.SEARCH_ENV, "exhaustive")
    k = fake_kernel("l1_3x3", "fwd", n=256)
    runtime.prepare_kernel(k, policy="all", optimizer=0, limit=limit)
    assert sorted(asked) == list(range(1, 257)) and k.plan.time_ms == full.time_ms
    assert k.held == []                   # one benchmark call: nothing to keep

    asked.clear()                      # the ILP needs every limit's optimum: all sizes
    monkeypatch.setenv(runtime.SEARCH_ENV, "pruned")
    runtime.prepare_kernel(fake_kernel("l1_3x3", "fwd", n=256), policy="all", optimizer=1,
                           limit=limit)
    assert len(asked) == 256

    # a failed benchmark frees the kept buffers all the same
    monkeypatch.setattr(bench, "measure", lambda kern, sizes, **kw: {})
    k = fake_kernel("l1_3x3", "fwd", n=256)
    with pytest.raises(PlanError, match="returned nothing for micro-batch size"):
        runtime.prepare_kernel(k, policy="all", optimizer=0, limit=limit)
    assert k.held == [True, False]

    monkeypatch.setenv(runtime.SEARCH_ENV, "fastest")
    with pytest.raises(InputError, match="UCUDNN_SEARCH: unknown search 'fastest'"):
        runtime.prepare_kernel(fake_kernel("c"), policy="all", optimizer=0, limit=limit)
