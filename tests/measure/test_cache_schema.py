"""The SQLite benchmark cache's older schemas (Note [Schema migration]): each one read as it is by
a reader, migrated by a writer with what it keeps and drops."""
import dataclasses
import multiprocessing
import sqlite3

import pytest

from ucudnn.measure.cache import schema
from ucudnn.measure.cache import APPLICATION_ID, UNKNOWN_CAP, BenchCache, CacheError
from ucudnn.measure.cache.schema import SCHEMA_VERSION
from ucudnn.measure.cache.key import shape_from_key
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.table import AlgoPerf

from cache_workers import KEY, _migrator

PERFS = [AlgoPerf(1, 0.25, 4096, 0), AlgoPerf(0, 0.5, 0, 0), AlgoPerf(6, 0.125, 1 << 20, 1)]


def _sorted(perfs):
    return sorted(perfs, key=lambda p: (p.time_ms, p.ws_bytes, p.algo))



# -- schema 1 (Note [Schema migration]) -------------------------------------------------------

_V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entries (
    id INTEGER PRIMARY KEY,
    gpu TEXT NOT NULL, cudnn_version INTEGER NOT NULL, dtype TEXT NOT NULL,
    math TEXT NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL, batch INTEGER NOT NULL,
    repeats INTEGER NOT NULL, created REAL NOT NULL,
    UNIQUE (gpu, cudnn_version, dtype, math, op, shape, batch)
);
CREATE TABLE perfs (
    entry INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE,
    algo INTEGER NOT NULL, time_ms REAL NOT NULL, ws_bytes INTEGER NOT NULL,
    algo_math INTEGER NOT NULL
);
CREATE INDEX perfs_entry ON perfs(entry);
"""


def _old_file(path, schema: int, batches=(1, 2)):
    """A cache as an earlier ucudnn wrote it: schema 1 (ucudnn 0.2.0, WAL; its key without the
    timing and the workspace cap) or schema 2 (before the graph family, journal mode delete)."""
    conn = sqlite3.connect(path, isolation_level=None)
    if schema == 1:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript({1: _V1_SCHEMA, 2: _V2_SCHEMA}[schema])
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {schema}")
    conn.executemany("INSERT INTO meta VALUES (?, ?)",
                     [("application", "ucudnn-bench-cache"), ("schema_version", str(schema))])
    key = {1: {}, 2: {"timing": KEY.timing, "workspace_cap": KEY.workspace_cap}}[schema]
    columns = ("gpu", "cudnn_version", "dtype", "math", "op", "shape", *key, "batch")
    for b in batches:
        cur = conn.execute(f"INSERT INTO entries ({', '.join(columns)}, repeats, created) "
                           f"VALUES ({', '.join('?' * len(columns))}, 3, 0)",
                           KEY.kernel_columns()[:6] + tuple(key.values()) + (b,))
        conn.executemany("INSERT INTO perfs VALUES (?, ?, ?, ?, ?)",
                         [(cur.lastrowid, p.algo, p.time_ms, p.ws_bytes, p.math) for p in PERFS])
    if schema == 1:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_schema_1_is_migrated_and_never_used_for_planning(tmp_path, caplog):
    path = tmp_path / "v1.sqlite"
    _old_file(path, 1)
    legacy = dataclasses.replace(KEY, workspace_cap=UNKNOWN_CAP)
    with caplog.at_level("WARNING", logger="ucudnn"):
        c = BenchCache(path)
    assert "migrated from schema 1: 2 entries" in caplog.text
    with c:
        assert c.keys() == [legacy] and len(c) == 2 and c.legacy_count() == 2
        assert c.keys(include_legacy=False) == []
        for ask in (KEY, dataclasses.replace(KEY, workspace_cap=0)):
            assert c.get_many(ask, [1, 2]) == {} and c.batches(ask) == []
        # listed and exported as they are
        assert c.get_many(legacy, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
        assert c.entries() == [(legacy, [1, 2])]
        # re-measured when needed, next to them
        calls = []
        got = c.fill(KEY, [1], lambda s: calls.append(s) or {1: PERFS[:1]})
        assert calls == [[1]] and got == {1: PERFS[:1]} and len(c) == 3
        assert c.drop_legacy() == 2 and c.keys() == [KEY] and len(c) == 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(SCHEMA_VERSION) and meta["migrated_from_schema"] == "1"
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    # the foreign key follows the renamed table: deleting an entry deletes its perfs
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("DELETE FROM entries")
    assert conn.execute("SELECT COUNT(*) FROM perfs").fetchone()[0] == 0
    conn.commit()
    conn.close()
    with BenchCache(path) as c:               # opened again: nothing more to migrate
        assert len(c) == 0




def test_schema_1_migrated_once_by_concurrent_openers(tmp_path, monkeypatch):
    path = str(tmp_path / "v1.sqlite")
    _old_file(path, 1)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_migrator, args=(path, barrier, results)) for _ in range(3)]
    for p in procs:
        p.start()
    outcome = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcome == [True] * 3
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    assert meta["migrated_entries"] == "2" and conn.execute(
        "SELECT COUNT(*) FROM perfs").fetchone()[0] == 2 * len(PERFS)
    conn.close()


def test_newer_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "newer.sqlite"
    _old_file(path, 1)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(CacheError, match=f"schema version {SCHEMA_VERSION + 1}, this ucudnn "
                                         f"reads version {SCHEMA_VERSION}"):
        BenchCache(path)
    assert path.read_bytes() == before


# -- schema 2 and the family of choices (Note [Schema migration], Note [Choices]) --------------

_V2_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entries (
    id INTEGER PRIMARY KEY,
    gpu TEXT NOT NULL, cudnn_version INTEGER NOT NULL, dtype TEXT NOT NULL,
    math TEXT NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL,
    timing TEXT NOT NULL, workspace_cap INTEGER NOT NULL, batch INTEGER NOT NULL,
    repeats INTEGER NOT NULL, created REAL NOT NULL,
    UNIQUE (gpu, cudnn_version, dtype, math, op, shape, timing, workspace_cap, batch)
);
CREATE TABLE perfs (
    entry INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE,
    algo INTEGER NOT NULL, time_ms REAL NOT NULL, ws_bytes INTEGER NOT NULL,
    algo_math INTEGER NOT NULL
);
CREATE INDEX perfs_entry ON perfs(entry);
"""


GRAPH_KEY = dataclasses.replace(KEY, family="graph")
GRAPH_PERFS = [AlgoPerf(-1, 0.5, 1024, 0, "eng12[k3=1,k7=0]"), AlgoPerf(-1, 0.7, 0, 0, "eng0")]


def test_schema_2_read_only_is_read_as_legacy_measurements(tmp_path):
    path = tmp_path / "v2.sqlite"
    _old_file(path, 2)
    before = path.read_bytes()
    with BenchCache(path, readonly=True) as c:
        assert c.schema == 2
        assert c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
        assert c.get_many(GRAPH_KEY, [1, 2]) == {}
        assert c.keys() == [KEY]
    assert path.read_bytes() == before


def test_schema_2_is_migrated_with_nothing_lost(tmp_path):
    path = tmp_path / "v2.sqlite"
    _old_file(path, 2)
    with BenchCache(path) as c:
        assert c.schema == SCHEMA_VERSION
        assert c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
        assert len(c) == 2
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    assert meta["migrated_from_schema"] == "2" and meta["migrated_entries"] == "2"
    assert conn.execute("SELECT DISTINCT family FROM entries").fetchall() == [("legacy",)]
    assert conn.execute("SELECT DISTINCT engine FROM perfs").fetchall() == [("",)]
    conn.close()


def test_families_are_separate_entries_and_engines_round_trip(tmp_path):
    path = tmp_path / "c.sqlite"
    with BenchCache(path) as c:
        c.put(KEY, 4, PERFS)
        c.put(GRAPH_KEY, 4, GRAPH_PERFS)
        assert c.get(KEY, 4) == _sorted(PERFS)
        assert c.get(GRAPH_KEY, 4) == sorted(GRAPH_PERFS, key=lambda p: p.time_ms)
        assert set(c.keys()) == {KEY, GRAPH_KEY}
        with pytest.raises(ValueError, match="a legacy entry holds algorithms only"):
            c.put(KEY, 8, GRAPH_PERFS)
        with pytest.raises(ValueError, match="a graph entry holds engine configs only"):
            c.put(GRAPH_KEY, 8, PERFS)
    copy = tmp_path / "copy.sqlite"
    with BenchCache(path) as c:
        c.export_cache(copy)
    with BenchCache(tmp_path / "merged.sqlite") as m:
        assert m.import_cache(copy).stored == 2
        assert m.get(GRAPH_KEY, 4) == sorted(GRAPH_PERFS, key=lambda p: p.time_ms)


def _stamp_schema(conn, version):
    """Mark an open cache file as written by schema ``version`` (both places that say it),
    without the column ``deterministic`` that schema 8 added."""
    if version < 8 and "deterministic" in {r[1] for r in conn.execute("PRAGMA table_info(perfs)")}:
        conn.execute("ALTER TABLE perfs DROP COLUMN deterministic")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))


# -- schema 3: graph entries measured before their results were checked -------------------------

def _v3_file(path):
    """A cache as ucudnn wrote it before the check of graph results (schema 3): the legacy and
    the graph family of one kernel at batches 1 and 2."""
    _old_file(path, 2)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(schema._MIGRATE_2_3)
    _stamp_schema(conn, 3)
    for b in (1, 2):
        cur = conn.execute("INSERT INTO entries (gpu, cudnn_version, dtype, math, op, shape, "
                           "family, timing, workspace_cap, batch, repeats, created) "
                           "VALUES (?, ?, ?, ?, ?, ?, 'graph', ?, ?, ?, 1, 0)",
                           KEY.kernel_columns()[:6] + (KEY.timing, KEY.workspace_cap, b))
        conn.executemany("INSERT INTO perfs VALUES (?, ?, ?, ?, ?, ?)",
                         [(cur.lastrowid, p.algo, p.time_ms, p.ws_bytes, p.math, p.engine)
                          for p in GRAPH_PERFS])
    conn.close()


def test_schema_3_graph_entries_are_dropped_by_the_migration(tmp_path):
    path = tmp_path / "v3.sqlite"
    _v3_file(path)
    with BenchCache(path) as c:
        assert c.schema == SCHEMA_VERSION
        assert c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
        assert c.get_many(GRAPH_KEY, [1, 2]) == {} and c.keys() == [KEY] and len(c) == 2
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    assert meta["migrated_from_schema"] == "3" and meta["migrated_entries"] == "4"
    assert conn.execute("SELECT COUNT(*) FROM perfs").fetchone()[0] == 2 * len(PERFS)
    conn.close()


def test_schema_3_read_only_hides_its_graph_entries(tmp_path, caplog):
    path = tmp_path / "v3.sqlite"
    _v3_file(path)
    before = path.read_bytes()
    with BenchCache(path, readonly=True) as c:
        assert c.schema == 3
        assert c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
        assert c.get_many(GRAPH_KEY, [1, 2]) == {} and c.batches(GRAPH_KEY) == []
        assert c.keys() == [KEY] and len(c) == 2
    assert "graph-family entries predate the check" in caplog.text
    with BenchCache(tmp_path / "merged.sqlite") as m:
        assert m.import_cache(path).stored == 2 and m.keys() == [KEY]
    assert path.read_bytes() == before


def test_cache_key_names_an_unknown_family():
    with pytest.raises(ValueError, match="cache key field 'family': 'fast' is not one of "
                                         "legacy, graph"):
        dataclasses.replace(KEY, family="fast")


# -- schema 4: before the table of refused engines ---------------------------------------------

def _v4_file(path):
    """A cache as ucudnn wrote it before Note [Refused engines] (schema 4)."""
    with BenchCache(path) as c:
        c.put(KEY, 1, PERFS)
        c.put(GRAPH_KEY, 1, GRAPH_PERFS)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TABLE refused")
    _stamp_schema(conn, 4)
    conn.close()


def test_schema_4_is_migrated_and_read_only_read_as_it_is_but_its_graph_entries(tmp_path):
    """Its legacy entry stays; its graph entry predates schema 9's search (read-only: not
    read; migrated: deleted); a refusal works on the migrated file."""
    path = tmp_path / "v4.sqlite"
    _v4_file(path)
    before = path.read_bytes()
    with BenchCache(path, readonly=True) as c:
        assert c.schema == 4 and c.refusals(GRAPH_KEY) == {} and len(c) == 1
        assert c.get(GRAPH_KEY, 1) is None and c.get(KEY, 1) == _sorted(PERFS)
    assert path.read_bytes() == before
    with BenchCache(path) as c:
        assert c.schema == SCHEMA_VERSION and len(c) == 1 and c.get(GRAPH_KEY, 1) is None
        c.put(GRAPH_KEY, 1, GRAPH_PERFS)            # measured again
        assert c.get(GRAPH_KEY, 1) == sorted(GRAPH_PERFS, key=lambda p: p.time_ms)
        c.refuse(GRAPH_KEY, {12: "off"})
        assert c.get(GRAPH_KEY, 1) is None and c.get(KEY, 1) == _sorted(PERFS)
    meta = dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))
    assert meta["migrated_from_schema"] == "4" and meta["migrated_entries"] == "2"


# -- schema 5: legacy backward-filter entries timed with beta 0 --------------------------------

BWD_FILTER_KEY = dataclasses.replace(KEY, op="bwd_filter")
GRAPH_BWD_FILTER_KEY = dataclasses.replace(BWD_FILTER_KEY, family="graph")
FIND_BWD_FILTER_KEY = dataclasses.replace(BWD_FILTER_KEY, timing="find")


def _v5_file(path):
    """A cache as ucudnn wrote it before backward-filter was timed with beta 1 (schema 5):
    forward and backward-filter of both families, and a backward-filter entry of cudnnFind's
    own times."""
    with BenchCache(path) as c:
        for key, perfs in ((KEY, PERFS), (BWD_FILTER_KEY, PERFS), (FIND_BWD_FILTER_KEY, PERFS),
                           (GRAPH_KEY, GRAPH_PERFS), (GRAPH_BWD_FILTER_KEY, GRAPH_PERFS)):
            c.put(key, 1, perfs)
            c.put(key, 2, perfs)
    conn = sqlite3.connect(path, isolation_level=None)
    _stamp_schema(conn, 5)
    conn.close()


def test_schema_5_legacy_backward_filter_entries_are_dropped_by_the_migration(tmp_path):
    path = tmp_path / "v5.sqlite"
    _v5_file(path)
    with BenchCache(path) as c:                     # graph entries: gone at 8 -> 9
        assert c.schema == SCHEMA_VERSION and len(c) == 4
        assert c.get_many(BWD_FILTER_KEY, [1, 2]) == {}
        assert c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
        assert c.get_many(FIND_BWD_FILTER_KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
        assert c.get(GRAPH_BWD_FILTER_KEY, 2) is None
        assert BWD_FILTER_KEY not in c.keys()
        c.put(BWD_FILTER_KEY, 2, PERFS)             # measured again, kept
        assert c.get(BWD_FILTER_KEY, 2) == _sorted(PERFS)
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    assert meta["migrated_from_schema"] == "5" and meta["migrated_entries"] == "10"
    # legacy forward and find at two sizes, the new entry
    assert conn.execute("SELECT COUNT(*) FROM perfs").fetchone()[0] == (2 * 2 + 1) * len(PERFS)
    conn.close()


def test_schema_5_read_only_hides_its_legacy_backward_filter_entries(tmp_path, caplog):
    path = tmp_path / "v5.sqlite"
    _v5_file(path)
    before = path.read_bytes()
    with BenchCache(path, readonly=True) as c:
        assert c.schema == 5 and len(c) == 4
        assert c.get_many(BWD_FILTER_KEY, [1, 2]) == {} and c.batches(BWD_FILTER_KEY) == []
        assert c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
        assert c.get(FIND_BWD_FILTER_KEY, 1) == _sorted(PERFS)
        assert c.get(GRAPH_BWD_FILTER_KEY, 1) is None   # before schema 9: not read
        # a refusal read from schema 5 still applies, beside the hidden entries
        assert c.refusals(GRAPH_KEY) == {}
    assert "legacy backward-filter entries were timed with beta 0" in caplog.text
    with BenchCache(tmp_path / "merged.sqlite") as m:
        assert m.import_cache(path).stored == 4
        assert m.get_many(BWD_FILTER_KEY, [1, 2]) == {}
    assert path.read_bytes() == before


def test_schema_2_read_only_hides_backward_filter_entries_too(tmp_path):
    path = tmp_path / "v2.sqlite"
    _old_file(path, 2)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE entries SET op = 'bwd_filter' WHERE batch = 2")
    conn.close()
    with BenchCache(path, readonly=True) as c:
        assert c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS)}
        assert c.get_many(BWD_FILTER_KEY, [1, 2]) == {} and len(c) == 1


# -- schema 6: 2-D shapes only (Note [N-D geometry] in ucudnn/plan/conv.py) --------------------

SHAPE_3D = ConvShape.nd(8, 16, (4, 10, 12), (3, 3, 3), pad=(1, 1, 1), stride=(1, 2, 2),
                        layout="NDHWC")
KEY_3D = dataclasses.replace(KEY, shape=SHAPE_3D)


def test_schema_6_is_read_as_it_is_and_migrated_with_every_row_unchanged(tmp_path, caplog):
    path = tmp_path / "v6.sqlite"
    with BenchCache(path) as c:
        c.put_many(KEY, {1: PERFS, 2: PERFS})
    conn = sqlite3.connect(path, isolation_level=None)
    _stamp_schema(conn, 6)
    rows = conn.execute("SELECT * FROM entries ORDER BY id").fetchall()
    perfs = conn.execute("SELECT * FROM perfs ORDER BY rowid").fetchall()
    conn.close()
    before = path.read_bytes()
    with BenchCache(path, readonly=True) as c:
        assert c.schema == 6 and c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
    assert path.read_bytes() == before
    with caplog.at_level("WARNING", logger="ucudnn"):
        c = BenchCache(path)
    assert f"migrated from schema 6 to {SCHEMA_VERSION}: 2 of 2 entries kept, none dropped" \
        in caplog.text
    with c:
        assert c.schema == SCHEMA_VERSION and c.get_many(KEY, [1, 2]) == {
            1: _sorted(PERFS), 2: _sorted(PERFS)}
        c.put_many(KEY_3D, {1: PERFS})          # a 3-D kernel beside them
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT * FROM entries WHERE id <= 2 ORDER BY id").fetchall() == rows
    # each choice as it was, its determinism not known (schema 8)
    assert conn.execute("SELECT * FROM perfs WHERE entry <= 2 ORDER BY rowid").fetchall() == [
        p + (None,) for p in perfs]
    shapes = {r[0] for r in conn.execute("SELECT shape FROM entries")}
    conn.close()
    assert shapes == {KEY.shape.key(), SHAPE_3D.key()}
    with BenchCache(path, readonly=True) as c:
        assert c.get(KEY_3D, 1) == _sorted(PERFS) and set(c.keys()) == {KEY, KEY_3D}


def test_a_3d_key_text_reads_back_as_its_shape():
    assert "d=4,t=3,pad_d=1,stride_d=1,dil_d=1" in SHAPE_3D.key()
    assert shape_from_key(SHAPE_3D.key()) == SHAPE_3D
    grouped = dataclasses.replace(SHAPE_3D, layout="NCHW", x_strides=(8 * 480 * 2, 480, 120,
                                                                        12, 1))
    assert shape_from_key(grouped.key()) == grouped


# -- schema 8: graph entries of the search that kept the first eight configs --------------------

def test_schema_8_graph_entries_are_dropped_and_not_read(tmp_path, caplog):
    """Note [Schema migration], 8 -> 9: the graph entries go, the legacy ones and the
    refused engines stay; read-only, the file is read without them and left as it was."""
    path = tmp_path / "v8.sqlite"
    with BenchCache(path) as c:
        for key, perfs in ((KEY, PERFS), (GRAPH_KEY, GRAPH_PERFS)):
            c.put(key, 1, perfs)
            c.put(key, 2, perfs)
        c.refuse(GRAPH_KEY, {7: "off"})
    conn = sqlite3.connect(path, isolation_level=None)
    _stamp_schema(conn, 8)
    conn.close()
    before = path.read_bytes()
    with BenchCache(path, readonly=True) as c:
        assert c.schema == 8 and len(c) == 2 and c.get(GRAPH_KEY, 1) is None
        assert c.get_many(KEY, [1, 2]) == {1: _sorted(PERFS), 2: _sorted(PERFS)}
    assert "predate the search within the workspace cap" in caplog.text
    assert path.read_bytes() == before
    with BenchCache(path) as c:
        assert c.schema == SCHEMA_VERSION and len(c) == 2 and c.get(GRAPH_KEY, 2) is None
        assert c.refusals(GRAPH_KEY) == {7: "off"}
    assert "2 graph-family entries measured before the search covered" in caplog.text
    meta = dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))
    assert meta["migrated_from_schema"] == "8" and meta["migrated_entries"] == "4"


# -- schema 9: 3-D graph entries measured without slab choices ---------------------------------

def test_schema_9_3d_graph_entries_are_dropped_and_not_read(tmp_path, caplog):
    """Note [Schema migration], 9 -> 10: the graph entries of 3-D kernels go; the 2-D graph
    entries and every legacy one stay; read-only, the file is read without them and left as
    it was."""
    path = tmp_path / "v9.sqlite"
    graph_3d = dataclasses.replace(GRAPH_KEY, shape=SHAPE_3D)
    with BenchCache(path) as c:
        for key, perfs in ((KEY_3D, PERFS), (GRAPH_KEY, GRAPH_PERFS), (graph_3d, GRAPH_PERFS)):
            c.put(key, 1, perfs)
    conn = sqlite3.connect(path, isolation_level=None)
    _stamp_schema(conn, 9)
    conn.close()
    before = path.read_bytes()
    with BenchCache(path, readonly=True) as c:
        assert c.schema == 9 and len(c) == 2 and c.get(graph_3d, 1) is None
        assert c.get(GRAPH_KEY, 1) == _sorted(GRAPH_PERFS)
        assert c.get(KEY_3D, 1) == _sorted(PERFS)
    assert "3-D graph-family entries were measured without slab choices" in caplog.text
    assert path.read_bytes() == before
    with BenchCache(path) as c:
        assert c.schema == SCHEMA_VERSION and len(c) == 2 and c.get(graph_3d, 1) is None
        assert c.get(GRAPH_KEY, 1) == _sorted(GRAPH_PERFS)
    assert "1 3-D graph-family entries measured without slab choices" in caplog.text
