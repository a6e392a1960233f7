"""The SQLite benchmark cache: keys, persistence, concurrency, refusing foreign files."""
import dataclasses
import multiprocessing
import sys
import random
import sqlite3
from pathlib import Path

import pytest

from ucudnn.measure.cache import (APPLICATION_ID, BenchCache, CacheError, CacheKey, default_cache_path,
                          shape_from_key)
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.network import read_layers
from ucudnn.plan.table import AlgoPerf, group_by_kernel, read_table

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "h200-cudnn9.14"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")

SHAPE = ConvShape(64, 56, 56, 64, 3, 3, 1, 1)
KEY = CacheKey("NVIDIA H200", 91400, "float32", "default", "fwd", SHAPE)
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
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dict(conn.execute("SELECT key, value FROM meta"))["schema_version"] == "1"
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
                dict(math="fast"), dict(op="bwd")):
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


def test_directory_is_refused(tmp_path):
    with pytest.raises(CacheError, match="directory"):
        BenchCache(tmp_path)


def test_closed_cache(tmp_path):
    c = BenchCache(tmp_path / "c.sqlite")
    c.close()
    with pytest.raises(CacheError, match="closed"):
        c.get(KEY, 1)


# -- several processes ------------------------------------------------------------------------

N_WORKERS, N_ENTRIES = 4, 40
SHARED_KEY = dataclasses.replace(KEY, op="bwd_data")


def _worker_key(w, i):
    return dataclasses.replace(KEY, shape=dataclasses.replace(SHAPE, k=1 + w * 1000 + i))


def _worker_perfs(w, i):
    return [AlgoPerf(a, 0.01 * (w + 1) * (i + 1) + a, 1024 * a, 0) for a in range(1 + (i % 4))]


def _shared_pattern(w):
    return [AlgoPerf(w, float(j + 1), w * 10 + j) for j in range(w + 2)]


def _writer(path, w, barrier, results):
    try:
        barrier.wait(timeout=60)           # open the fresh file at the same moment
        with BenchCache(path, timeout=60) as c:
            for i in range(N_ENTRIES):
                c.put(_worker_key(w, i), 1 + i % 3, _worker_perfs(w, i))
                c.put(SHARED_KEY, 1, _shared_pattern(w))
                got = c.get(SHARED_KEY, 1)
                # an entry is replaced as a whole: never a mix of two writers
                assert got in [_shared_pattern(x) for x in range(N_WORKERS)], got
                other = (w + 1) % N_WORKERS
                seen = c.get(_worker_key(other, i // 2), 1 + (i // 2) % 3)
                assert seen is None or seen == _worker_perfs(other, i // 2), seen
        results.put((w, "ok"))
    except BaseException as e:             # reported to the parent
        results.put((w, repr(e)))


def test_concurrent_writers(tmp_path, monkeypatch):
    path = str(tmp_path / "shared.sqlite")
    # spawned children import this module as tests.test_cache: give them the repository root
    # (appended, so that ucudnn itself still comes from the installed package)
    monkeypatch.setattr(sys, "path", sys.path + [str(Path(__file__).resolve().parents[1])])
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
