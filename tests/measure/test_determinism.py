"""Determinism from the core's records through the benchmark cache to a live kernel's plan (Note
[Deterministic plans] in ucudnn/plan/dp.py), on the fake core; a cache written before schema 8
(every choice of unknown determinism) is read, migrated, and measured again for a deterministic
plan only."""
import sqlite3

import pytest

from ucudnn.measure import bench, runtime
from ucudnn.measure.cache import SCHEMA_VERSION, BenchCache
from ucudnn.measure.planner_state import planner_state
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import AlgoPerf
from ucudnn.vocab import PlanError

SHAPE = ConvShape(16, 8, 8, 16, 3, 3, 1, 1)


def racing(kern, b):
    """Algorithm 1 fast and non-deterministic (atomics), algorithm 0 slower and
    deterministic, and an engine config whose engine carries the NONDETERMINISTIC note."""
    return [AlgoPerf(0, 1.0 * b, 0, deterministic=True),
            AlgoPerf(1, 0.25 * b, 1024 * b, deterministic=False),
            AlgoPerf(-1, 0.2 * b, 0, 0, "eng5", deterministic=False)]


def settings(**kw) -> PlanSettings:
    return PlanSettings(**{"engines": "both", "limit": 1 << 20, **kw})


def _kernel(core, op="bwd_filter", name="conv1"):
    return core.Kernel(SHAPE, op, 8, "float32", "default", name)


def test_determinism_goes_from_the_core_through_the_cache(fake_core, tmp_path):
    fake_core.model = racing
    cache = tmp_path / "c.sqlite"
    first = bench.measure(_kernel(fake_core), [2, 8], cache_path=cache, engines="both")
    want = {b: sorted(racing(None, b), key=lambda p: (p.time_ms, p.ws_bytes)) for b in (2, 8)}
    assert first == want
    again = bench.measure(_kernel(fake_core), [2, 8], cache_path=cache, engines="both")
    assert again == want and len(fake_core.calls) == 2      # one per family, then the cache
    with BenchCache(cache, readonly=True) as c:
        key = bench.cache_key(SHAPE, "bwd_filter", family="graph")
        assert [p.deterministic for p in c.get(key, 8)] == [False]


def test_a_record_without_the_field_is_of_unknown_determinism():
    """A core built before the field reports six fields; each of its choices is unknown."""
    old = [(1, 0, 0.5, 64, 0, ""), (0, 0, 0.75, 0, 0, "")]
    new = [(1, 0, 0.5, 64, 0, "", False), (0, 0, 0.75, 0, 0, "", True)]
    assert [p.deterministic for p in bench._perfs(old)] == [None, None]
    assert [p.deterministic for p in bench._perfs(new)] == [False, True]


@pytest.mark.parametrize("policy", ["powerOfTwo", "all"])
def test_a_deterministic_kernel_runs_only_deterministic_choices(fake_core, records_file, policy):
    """The DP's plan and its baseline (``search`` pruned for policy all)."""
    fake_core.model = racing
    k = _kernel(fake_core)
    runtime.prepare_kernel(k, settings(policy=policy, deterministic=True))
    assert {(c.algo, c.engine) for c in k.plan.chunks} == {(0, "")}
    assert all(p.deterministic for perfs in planner_state(k).bench.values() for p in perfs)
    free = _kernel(fake_core, name="conv1b")
    runtime.prepare_kernel(free, settings(policy=policy))
    assert {c.engine for c in free.plan.chunks} == {"eng5"}
    from ucudnn.caffe import records as rr
    assert [r["deterministic"] for r in rr.read_records(records_file) if r["kind"] == "bench"] \
        == [True, False]


def test_a_kernel_without_a_deterministic_choice_names_itself(fake_core):
    fake_core.model = lambda kern, b: [AlgoPerf(1, 0.25 * b, 0, deterministic=False),
                                       AlgoPerf(3, 0.5 * b, 0)]
    with pytest.raises(PlanError) as e:
        runtime.prepare_kernel(_kernel(fake_core), settings(deterministic=True,
                                                            engines="legacy"))
    assert str(e.value) == (
        "layer 'conv1' op bwd_filter (input 8x16x8x8, filter 16x16x3x3): no deterministic "
        "choice measured (deterministic planning): 4 of its 8 choices are non-deterministic, "
        "4 of unknown determinism (measured before ucudnn recorded it: measure the kernel "
        "again, or plan from a table with a 'deterministic' column)")


def _as_schema_7(path):
    """The cache at ``path`` as a ucudnn before schema 8 wrote it: no column
    ``deterministic``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("ALTER TABLE perfs DROP COLUMN deterministic")
    conn.execute("PRAGMA user_version = 7")
    conn.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    conn.close()


@pytest.mark.parametrize("policy", ["powerOfTwo", "all"])
def test_a_cache_of_schema_7_is_measured_again_for_a_deterministic_plan_only(
        fake_core, tmp_path, caplog, policy):
    fake_core.model = lambda kern, b: [AlgoPerf(p.algo, p.time_ms, p.ws_bytes, p.math,
                                                p.engine) for p in racing(kern, b)]
    cache = str(tmp_path / "v7.sqlite")
    s = settings(policy=policy, engines="legacy", cache_path=cache)
    runtime.prepare_kernel(_kernel(fake_core, name="old"), s)    # what an older core measured
    _as_schema_7(cache)
    with BenchCache(cache, readonly=True) as c:
        assert c.schema == 7
        key = bench.cache_key(SHAPE, "bwd_filter", workspace_cap=1 << 20)
        assert {p.deterministic for p in c.get(key, 8)} == {None}
    measured = len(fake_core.calls)
    fake_core.model = racing                                    # the core now says
    k = _kernel(fake_core)
    runtime.prepare_kernel(k, s)                                # from the old entries
    assert len(fake_core.calls) == measured and {c.algo for c in k.plan.chunks} == {1}
    assert f"migrated from schema 7 to {SCHEMA_VERSION}: " in caplog.text
    k = _kernel(fake_core, name="det")
    runtime.prepare_kernel(k, s.replace(deterministic=True))    # measured again
    assert len(fake_core.calls) > measured and {c.algo for c in k.plan.chunks} == {0}
    with BenchCache(cache, readonly=True) as c:
        assert c.schema == SCHEMA_VERSION
        assert {p.deterministic for p in c.get(key, 8)} == {True, False}
    now = len(fake_core.calls)
    runtime.prepare_kernel(_kernel(fake_core, name="det2"), s.replace(deterministic=True))
    assert len(fake_core.calls) == now                          # from the cache now


def test_import_keeps_determinism_and_an_old_cache_imports_as_unknown(tmp_path):
    from cache_workers import KEY
    perfs = [AlgoPerf(0, 0.5, 0, deterministic=True), AlgoPerf(1, 0.25, 64, deterministic=False)]
    new, old = tmp_path / "new.sqlite", tmp_path / "old.sqlite"
    for path in (new, old):
        with BenchCache(path) as c:
            c.put(KEY, 1, perfs)
    _as_schema_7(old)
    with BenchCache(tmp_path / "a.sqlite") as a, BenchCache(tmp_path / "b.sqlite") as b:
        assert a.import_cache(new).stored == 1 and b.import_cache(old).stored == 1
        assert a.get(KEY, 1) == sorted(perfs, key=lambda p: p.time_ms)
        assert [p.deterministic for p in b.get(KEY, 1)] == [None, None]


def test_a_bench_record_written_before_the_field_still_reads(fake_core, records_file):
    """Plan records keep version 2: the bench record's ``deterministic`` is one more field, and
    a record without it (an older ucudnn's) reads as before."""
    import json
    from ucudnn.caffe import records as rr
    fake_core.model = racing
    runtime.prepare_kernel(_kernel(fake_core), settings(deterministic=True))
    lines = records_file.read_text().splitlines()
    old = [json.loads(line) for line in lines]
    for rec in old:
        rec.pop("deterministic", None)
    records_file.write_text("".join(json.dumps(rec) + "\n" for rec in old))
    got = rr.read_records(records_file)
    assert [r["kind"] for r in got] == ["bench", "kernel"]
    assert "deterministic" not in got[0] and got[0]["version"] == 2
