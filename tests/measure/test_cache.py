"""The SQLite benchmark cache: keys, persistence, concurrency, refusing foreign files."""
import dataclasses
import multiprocessing
import sys
import random
import sqlite3
from pathlib import Path

import pytest

from ucudnn.measure.cache import (APPLICATION_ID, DEFAULT_WORKSPACE_CAP, UNKNOWN_CAP, BenchCache,
                                 CacheError, CacheKey, default_cache_path, shape_from_key,
                                 timing_name)
from ucudnn.measure.cache import schema
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.layers import read_layers
from ucudnn.plan.table import AlgoPerf, group_by_kernel, read_table

from cache_workers import (KEY, N_ENTRIES, N_WORKERS, SHAPE, SHARED_KEY, _reader,
                           _shared_pattern, _worker_key, _worker_perfs, _writer)
from repo_paths import SHARED, needs_shared
PERFS = [AlgoPerf(1, 0.25, 4096, 0), AlgoPerf(0, 0.5, 0, 0), AlgoPerf(6, 0.125, 1 << 20, 1)]


def _sorted(perfs):
    return sorted(perfs, key=lambda p: (p.time_ms, p.ws_bytes, p.algo))


def test_round_trip_and_absent(tmp_path):
    with BenchCache(tmp_path / "c.sqlite") as c:
        assert c.get(KEY, 4) is None
        c.put(KEY, 4, PERFS, repeats=3)
        assert c.get(KEY, 4) == _sorted(PERFS)
        assert c.get(KEY, 8) is None
        c.put(KEY, 8, [])                       # measured, nothing succeeded
        assert c.get(KEY, 8) == []
        assert c.get_many(KEY, [1, 4, 8, 16]) == {4: _sorted(PERFS), 8: []}
        assert c.batches(KEY) == [4, 8]
        assert c.keys() == [KEY]
        assert len(c) == 2


def test_persistence_across_instances(tmp_path):
    path = tmp_path / "sub" / "dir" / "c.sqlite"      # parent folders are created
    with BenchCache(path) as c:
        c.put_many(KEY, {1: PERFS[:1], 2: PERFS[:2]}, repeats=2)
    with BenchCache(path) as c:
        assert c.get_many(KEY, [1, 2]) == {1: PERFS[:1], 2: _sorted(PERFS[:2])}
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert dict(conn.execute("SELECT key, value FROM meta"))["schema_version"] == str(
        schema.SCHEMA_VERSION)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    conn.close()


def test_overwrite_replaces_the_entry(tmp_path):
    with BenchCache(tmp_path / "c.sqlite") as c:
        c.put(KEY, 4, PERFS)
        c.put(KEY, 4, [AlgoPerf(2, 9.0, 7)])
        assert c.get(KEY, 4) == [AlgoPerf(2, 9.0, 7)]
        c.put_many(KEY, {4: PERFS[:1], 8: PERFS[1:2]})
        assert c.get_many(KEY, [4, 8]) == {4: PERFS[:1], 8: PERFS[1:2]}
        assert len(c) == 2


def _variants():
    """Keys that differ from KEY in exactly one field (shape fields and strides included)."""
    yield dataclasses.replace(KEY, gpu="NVIDIA H100 80GB HBM3")
    yield dataclasses.replace(KEY, cudnn_version=91300)
    yield dataclasses.replace(KEY, dtype="float16")
    yield dataclasses.replace(KEY, math="fma")
    yield dataclasses.replace(KEY, op="bwd_filter")
    yield dataclasses.replace(KEY, timing="find")
    yield dataclasses.replace(KEY, timing="events10")
    for field, value in (("c", 32), ("h", 28), ("w", 28), ("k", 128), ("r", 5), ("s", 5),
                         ("pad_h", 0), ("pad_w", 0), ("stride_h", 2), ("stride_w", 2),
                         ("dil_h", 2), ("dil_w", 2), ("groups", 2)):
        yield dataclasses.replace(KEY, shape=dataclasses.replace(SHAPE, **{field: value}))
    # a grouped view: same sizes, strided into a blob of 2x the channels
    hw = SHAPE.h * SHAPE.w
    yield dataclasses.replace(KEY, shape=dataclasses.replace(
        SHAPE, x_strides=(2 * SHAPE.c * hw, hw, SHAPE.w, 1)))
    yield dataclasses.replace(KEY, shape=dataclasses.replace(
        SHAPE, y_strides=(2 * SHAPE.k * hw, hw, SHAPE.w, 1)))


def test_keys_differ_by_every_field(tmp_path):
    variants = list(_variants())
    texts = {k.text() for k in variants} | {KEY.text()}
    assert len(texts) == len(variants) + 1
    with BenchCache(tmp_path / "c.sqlite") as c:
        c.put(KEY, 4, PERFS)
        for i, k in enumerate(variants):
            assert c.get(k, 4) is None, k
            c.put(k, 4, [AlgoPerf(i, float(i + 1), i)])
        assert c.get(KEY, 4) == _sorted(PERFS)
        for i, k in enumerate(variants):
            assert c.get(k, 4) == [AlgoPerf(i, float(i + 1), i)]
        assert sorted(c.keys(), key=CacheKey.text) == sorted(variants + [KEY], key=CacheKey.text)


def test_packed_strides_are_the_same_key():
    explicit = dataclasses.replace(SHAPE, x_strides=SHAPE.packed_x_strides())
    assert explicit.key() == SHAPE.key()
    assert shape_from_key(SHAPE.key()) == SHAPE
    strided = dataclasses.replace(SHAPE, x_strides=(2 * 64 * 56 * 56, 56 * 56, 56, 1))
    assert shape_from_key(strided.key()) == strided


def test_key_validation():
    for bad in (dict(gpu=""), dict(cudnn_version=-1), dict(dtype="float8"),
                dict(math="fast"), dict(op="bwd"), dict(workspace_cap=-2),
                dict(workspace_cap=1.5), dict(timing="events0"), dict(timing="cudnn")):
        with pytest.raises(ValueError, match=list(bad)[0]):
            dataclasses.replace(KEY, **bad)


def test_default_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("UCUDNN_CACHE", str(tmp_path / "env.sqlite"))
    assert default_cache_path() == tmp_path / "env.sqlite"
    with BenchCache() as c:
        c.put(KEY, 1, PERFS)
    assert (tmp_path / "env.sqlite").stat().st_size > 0
    monkeypatch.delenv("UCUDNN_CACHE")
    assert default_cache_path() == Path.home() / ".cache" / "ucudnn" / "bench.sqlite"


def test_empty_file_is_initialised(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    with BenchCache(path) as c:
        c.put(KEY, 2, PERFS)
    with BenchCache(path) as c:
        assert c.get(KEY, 2) == _sorted(PERFS)


# -- files that are not ours ------------------------------------------------------------------

def _real_db(path):
    with BenchCache(path) as c:
        for b in range(1, 200):
            c.put(KEY, b, PERFS * 5)
    conn = sqlite3.connect(path)                      # fold the WAL into the file
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path.read_bytes()


def _foreign_db(path, app_id=0, tables=("CREATE TABLE notes (id INTEGER, text TEXT)",),
                user_version=0):
    conn = sqlite3.connect(path)
    for t in tables:
        conn.execute(t)
    if app_id:
        conn.execute(f"PRAGMA application_id = {app_id}")
    conn.execute(f"PRAGMA user_version = {user_version}")
    conn.commit()
    conn.close()


def _corrupt_files(tmp_path):
    rng = random.Random(7)
    yield "random bytes", b"".join(bytes([rng.randrange(256)]) for _ in range(5000))
    yield "text", b"layer,op,batch\nconv1,fwd,1\n"
    real = _real_db(tmp_path / "real.sqlite")
    yield "truncated header", real[:60]
    yield "truncated to one page", real[:4096]
    yield "truncated in the middle", real[:len(real) // 2 + 123]
    yield "damaged pages", real[:8192] + bytes(4096) + real[12288:]
    _foreign_db(tmp_path / "foreign.sqlite")
    yield "foreign sqlite", (tmp_path / "foreign.sqlite").read_bytes()
    _foreign_db(tmp_path / "other_app.sqlite", app_id=0x12345678,
                tables=("CREATE TABLE meta (key TEXT, value TEXT)",))
    yield "other application id", (tmp_path / "other_app.sqlite").read_bytes()
    _foreign_db(tmp_path / "same_tables.sqlite", app_id=0x0BADCAFE,
                tables=[f"CREATE TABLE {t} (x)" for t in ("meta", "entries", "perfs")],
                user_version=1)
    yield "other application with our table names", (tmp_path / "same_tables.sqlite").read_bytes()
    _foreign_db(tmp_path / "ours_broken.sqlite", app_id=APPLICATION_ID)
    yield "our id without our tables", (tmp_path / "ours_broken.sqlite").read_bytes()


def test_foreign_or_corrupted_files_are_refused_and_untouched(tmp_path):
    for what, data in _corrupt_files(tmp_path):
        path = tmp_path / f"bad-{what.replace(' ', '_')}.sqlite"
        path.write_bytes(data)
        with pytest.raises(CacheError) as e:
            BenchCache(path)
        assert str(path) in str(e.value), what
        assert path.read_bytes() == data, f"{what}: the file was modified"
        assert not Path(str(path) + "-wal").exists(), what


def test_foreign_file_with_an_interrupted_write_is_left_untouched(tmp_path):
    import subprocess
    path = tmp_path / "foreign.sqlite"
    _foreign_db(path, tables=("CREATE TABLE notes (k TEXT, v TEXT)",))
    crash = ("import os, sqlite3, sys\n"
             "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
             "c.execute('PRAGMA cache_size = 1')\n"
             "c.execute('BEGIN IMMEDIATE')\n"
             "for i in range(2000):\n"
             "    c.execute('INSERT INTO notes VALUES (?, ?)', (f'k{i}', 'x' * 200))\n"
             "os.kill(os.getpid(), 9)\n")
    assert subprocess.run([sys.executable, "-c", crash, str(path)]).returncode == -9
    journal = Path(f"{path}-journal")
    before = path.read_bytes(), journal.read_bytes()
    with pytest.raises(CacheError, match="another application was interrupted"):
        BenchCache(path)
    assert (path.read_bytes(), journal.read_bytes()) == before


def test_directory_is_refused(tmp_path):
    with pytest.raises(CacheError, match="directory"):
        BenchCache(tmp_path)


def test_closed_cache(tmp_path):
    c = BenchCache(tmp_path / "c.sqlite")
    c.close()
    with pytest.raises(CacheError, match="closed"):
        c.get(KEY, 1)


# -- several processes ------------------------------------------------------------------------











def test_concurrent_writers(tmp_path, monkeypatch):
    path = str(tmp_path / "shared.sqlite")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(N_WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, w, barrier, results))
             for w in range(N_WORKERS)]
    for p in procs:
        p.start()
    outcome = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert outcome == {w: "ok" for w in range(N_WORKERS)}
    assert all(p.exitcode == 0 for p in procs)
    with BenchCache(path) as c:
        for w in range(N_WORKERS):
            for i in range(N_ENTRIES):
                assert c.get(_worker_key(w, i), 1 + i % 3) == _worker_perfs(w, i)
        assert c.get(SHARED_KEY, 1) in [_shared_pattern(w) for w in range(N_WORKERS)]
        assert len(c) == N_WORKERS * N_ENTRIES + 1


def test_one_cache_shared_by_threads(tmp_path):
    import threading
    errors = []
    with BenchCache(tmp_path / "t.sqlite") as c:
        def work(w):
            try:
                for i in range(30):
                    c.put(_worker_key(w, i), 1, _worker_perfs(w, i))
                    assert c.get(_worker_key(w, i), 1) == _worker_perfs(w, i)
            except BaseException as e:      # reported below
                errors.append(e)
        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and len(c) == 4 * 30


# -- tables -----------------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_import_export_round_trip(tmp_path, net):
    layers = {l.name: l for l in read_layers(SHARED / f"layers_{net}.csv")}
    rows = read_table(SHARED / f"{net}_default.csv")
    dev = dict(gpu="NVIDIA H200", cudnn_version=91400, dtype="float32", math="default")
    with BenchCache(tmp_path / "c.sqlite") as c:
        n = c.import_table(rows, layers, **dev)
        assert n == len({(r.layer, r.op, r.batch) for r in rows})
        out = c.export_rows(layers, **dev)
        assert group_by_kernel(out) == group_by_kernel(rows)
        assert c.export_rows(layers, **{**dev, "math": "fma"}) == []
        assert c.export_rows(layers, **{**dev, "cudnn_version": 90100}) == []
        conv1 = ConvShape.from_layer(layers["conv1"])
        got = c.get(CacheKey(dev["gpu"], 91400, "float32", "default", "fwd", conv1), 256)
        assert got == group_by_kernel(rows)["conv1", "fwd"][256]


def test_import_rejects_unknown_layer(tmp_path):
    from ucudnn.plan.network import LayerSpec
    from ucudnn.plan.table import BenchRow
    layers = [LayerSpec("a", 8, 3, 8, 8, 4, 3, 3)]
    rows = [BenchRow("b", "fwd", 1, 0, 0.1, 0)]
    with BenchCache(tmp_path / "c.sqlite") as c:
        with pytest.raises(ValueError, match="'b'"):
            c.import_table(rows, layers, gpu="g", cudnn_version=1, dtype="float32",
                           math="default")
        assert len(c) == 0


def test_fill_measures_only_what_is_missing(tmp_path):
    calls = []

    def measure(sizes):
        calls.append(list(sizes))
        return {b: [AlgoPerf(0, float(b), 0, 0)] for b in sizes}

    with BenchCache(tmp_path / "c.sqlite") as c:
        c.put(KEY, 4, PERFS)
        got = c.fill(KEY, [1, 4, 2, 2], measure, repeats=3)
        assert calls == [[1, 2]]
        assert sorted(got) == [1, 2, 4] and _sorted(got[4]) == _sorted(PERFS)
        assert c.fill(KEY, [1, 2, 4], measure) == got and calls == [[1, 2]]
        c.fill(KEY, [4], measure, force=True)
        assert calls[-1] == [4] and c.get(KEY, 4) == [AlgoPerf(0, 4.0, 0, 0)]


# -- workspace cap and timing (Note [Workspace cap and timing in the key]) ----------------------

GiB = 1 << 30


def test_key_defaults_are_the_cores_and_text_names_them():
    assert KEY.workspace_cap == DEFAULT_WORKSPACE_CAP == 8 * GiB and KEY.timing == "events5"
    assert KEY.text().endswith(f"|cap={8 * GiB}|events5")
    assert dataclasses.replace(KEY, workspace_cap=UNKNOWN_CAP).text().endswith("|cap=unknown|events5")
    assert timing_name(0) == "find" and timing_name(5) == "events5"
    with pytest.raises(ValueError):
        timing_name(-1)


def test_a_larger_cap_answers_a_smaller_ask_never_the_converse(tmp_path):
    small = dataclasses.replace(KEY, workspace_cap=1 * GiB)
    big = dataclasses.replace(KEY, workspace_cap=4 * GiB)
    with BenchCache(tmp_path / "c.sqlite") as c:
        c.put(small, 1, PERFS[:1])
        # measured under memory pressure: not reused for the default (8 GiB) ask
        assert c.get(KEY, 1) is None and c.get(big, 1) is None
        assert c.get(small, 1) == PERFS[:1]
        assert c.get(dataclasses.replace(KEY, workspace_cap=0), 1) == PERFS[:1]
        c.put(big, 1, PERFS[1:2])
        # both usable for a 1 GiB ask: the larger cap is returned
        assert c.get(small, 1) == PERFS[1:2] and c.get(small, 1, exact=True) == PERFS[:1]
        assert c.get(big, 1) == PERFS[1:2] and c.get(KEY, 1) is None
        c.put(KEY, 1, PERFS[2:])
        assert c.get(small, 1) == PERFS[2:] and c.get(KEY, 1) == PERFS[2:]
        # never another timing
        assert c.get(dataclasses.replace(small, timing="find"), 1) is None
        assert c.batches(small) == [1] and c.batches(dataclasses.replace(KEY, timing="find")) == []
        assert [k.workspace_cap for k in c.keys()] == [1 * GiB, 4 * GiB, 8 * GiB]
        assert c.entries() == [(small, [1]), (big, [1]), (KEY, [1])]
        assert len(c) == 3


def test_usable_for_mirrors_the_cache():
    small = dataclasses.replace(KEY, workspace_cap=GiB)
    legacy = dataclasses.replace(KEY, workspace_cap=UNKNOWN_CAP)
    assert KEY.usable_for(small) and not small.usable_for(KEY)
    assert not KEY.usable_for(dataclasses.replace(small, timing="find"))
    assert not KEY.usable_for(dataclasses.replace(small, op="bwd_data"))
    assert not legacy.usable_for(dataclasses.replace(KEY, workspace_cap=0))
    assert legacy.usable_for(legacy) and not KEY.usable_for(legacy)


def test_fill_stores_what_was_really_offered(tmp_path):
    class Measured(dict):          # as ucudnn.measure.bench.measure_kernel returns
        def __init__(self, d, cap, timing="events5"):
            super().__init__(d)
            self.workspace_cap, self.timing = cap, timing

    calls = []

    def pressured(sizes):
        calls.append(list(sizes))
        return Measured({b: [AlgoPerf(0, float(b), 0)] for b in sizes}, 3 * GiB)

    with BenchCache(tmp_path / "c.sqlite") as c:
        got = c.fill(KEY, [1, 2], pressured)
        assert got == {1: [AlgoPerf(0, 1.0, 0)], 2: [AlgoPerf(0, 2.0, 0)]}
        assert c.keys() == [dataclasses.replace(KEY, workspace_cap=3 * GiB)]
        c.fill(KEY, [1, 2], pressured)                 # not complete for 8 GiB: again
        assert calls == [[1, 2], [1, 2]]
        c.fill(dataclasses.replace(KEY, workspace_cap=GiB), [1, 2], pressured)
        assert calls == [[1, 2], [1, 2]]               # complete for a 1 GiB ask
        with pytest.raises(ValueError, match="timed 'find'"):
            c.fill(KEY, [4], lambda s: Measured({4: []}, 8 * GiB, "find"))
        assert c.get(dataclasses.replace(KEY, timing="find"), 4) is None


def test_legacy_key_cannot_be_stored(tmp_path):
    with BenchCache(tmp_path / "c.sqlite") as c:
        with pytest.raises(ValueError, match="unknown cap"):
            c.put(dataclasses.replace(KEY, workspace_cap=UNKNOWN_CAP), 1, PERFS)


# -- readers beside writers (Note [Cache file safety]) ----------------------------------------



def test_readers_beside_concurrent_writers(tmp_path, monkeypatch):
    """Read-only readers listing in a loop never disturb several writers, and leave no file."""
    path = str(tmp_path / "shared.sqlite")
    ctx = multiprocessing.get_context("spawn")
    n_readers = 2
    barrier, results, stop = ctx.Barrier(N_WORKERS + n_readers), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, w, barrier, results))
             for w in range(N_WORKERS)]
    procs += [ctx.Process(target=_reader, args=(path, barrier, stop, results))
              for _ in range(n_readers)]
    for p in procs:
        p.start()
    outcome = [results.get(timeout=120) for _ in range(N_WORKERS)]
    stop.set()
    outcome += [results.get(timeout=120) for _ in range(n_readers)]
    for p in procs:
        p.join(timeout=60)
    assert sorted(o for o in outcome if o[1] == "ok") == [(w, "ok") for w in range(N_WORKERS)]
    reads = [o[1] for o in outcome if o[0] == "reader"]
    assert len(reads) == n_readers and all(isinstance(r, int) and r > 0 for r in reads), reads
    with BenchCache(path) as c:
        assert len(c) == N_WORKERS * N_ENTRIES + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.sqlite"]


# -- ucudnn.measure.bench records the cap and the timing really used ---------------------------

class _FakeKernel:
    """A core Kernel stand-in: records the arguments of benchmark()."""
    shape, op, math, dtype, n = SHAPE, "fwd", "default", "float32", 8

    def __init__(self):
        self.calls = []
        self.free = 100 * GiB
        self.last_benchmark_workspace = None
        self.last_unchecked_sizes = []          # the core's check: nothing measured again

    def benchmark(self, sizes, repeats, cap, progress, time_iters, families=("legacy",)):
        self.calls.append((list(sizes), repeats, cap, time_iters))
        # as the core does: the cap, within free memory less 512 MiB
        self.last_benchmark_workspace = max(0, min(cap, self.free - (512 << 20)))
        return {b: [(0, 0, 1.0 * b, 0, 0, ""), (1, 3, 0.1, 0, 0, "")] for b in sizes}


@pytest.fixture
def fake_core(monkeypatch):
    from ucudnn.measure import bench
    monkeypatch.setattr(bench, "device_info",
                        lambda: {"gpu": "NVIDIA H200", "cudnn_version": 91400})


def test_measure_records_the_cap_and_timing(tmp_path, fake_core):
    from ucudnn.measure import bench
    kern = _FakeKernel()
    path = tmp_path / "c.sqlite"
    got = bench.measure(kern, [1, 2], cache_path=path)
    assert got == {1: [AlgoPerf(0, 1.0, 0)], 2: [AlgoPerf(0, 2.0, 0)]}
    assert kern.calls == [([1, 2], bench.FIND_REPEATS, 8 * GiB, 5)]
    with BenchCache(path) as c:
        assert c.keys() == [KEY]
    bench.measure(kern, [1, 2], cache_path=path)
    assert len(kern.calls) == 1                                  # cached
    bench.measure(kern, [1], cache_path=path, time_iters=0)      # another timing: measured
    assert kern.calls[-1] == ([1], bench.FIND_REPEATS, 8 * GiB, 0)
    bench.measure(kern, [1], cache_path=path, workspace_cap=GiB)  # a smaller ask: cached
    assert len(kern.calls) == 2
    # memory pressure: 5 GiB free leaves less than 8 GiB; what was offered is recorded, and
    # the entry does not answer an 8 GiB ask
    kern.free = 5 * GiB
    m = bench.measure_kernel(kern, [8])
    assert m.workspace_cap == 5 * GiB - (512 << 20) and m.timing == "events5"
    bench.measure(kern, [4], cache_path=path)
    with BenchCache(path) as c:
        (pressured,) = [k for k in c.keys() if k.workspace_cap != 8 * GiB]
        assert pressured.timing == "events5"
        assert pressured.workspace_cap == 5 * GiB - (512 << 20)
        assert c.get(KEY, 4) is None
