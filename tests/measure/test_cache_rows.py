"""What a cache file holds is checked, and what reads it leaves it as it was: older schemas
read as they are by the reading commands (Note [Schema migration]), bad rows skipped by
readers and refused by imports (Note [Checked rows]), a full disk or a read-only cache one
line and nothing left behind (Note [Cache file safety])."""
import dataclasses
import json
import math
import sqlite3

import pytest

from cli_run import run
from repo_paths import SHIPPED
from ucudnn.measure.cache import APPLICATION_ID, UNKNOWN_CAP, BenchCache, CacheError
from ucudnn.measure.cache import file as cache_file
from ucudnn.measure.cache.schema import SCHEMA_VERSION

GPU, CUDNN = "NVIDIA H200", "91400"


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


def _state(path):
    """The file's bytes and modification time, and its folder's listing."""
    return path.read_bytes(), path.stat().st_mtime_ns, _listing(path.parent)


def _alexnet_cache(tmp_path, name="c.sqlite"):
    cache = tmp_path / name
    run(tmp_path, "cache", "import", SHIPPED / "alexnet_bench.csv", "--net", "alexnet",
        "--cache", cache, "--gpu", GPU, "--cudnn-version", CUDNN)
    return cache


def _sql(path, *statements):
    conn = sqlite3.connect(path, isolation_level=None)
    for s in statements:
        conn.execute(s)
    conn.close()


def _count(path, where="1"):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM entries WHERE {where}").fetchone()[0]
    finally:
        conn.close()


def _stamp(path, version):
    """Mark the cache at ``path`` as of schema ``version`` (before 8: without the column
    ``deterministic``)."""
    conn = sqlite3.connect(path)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(perfs)")}
    conn.close()
    drop = ["ALTER TABLE perfs DROP COLUMN deterministic"] if (
        version < 8 and "deterministic" in columns) else []
    _sql(path, *drop, f"PRAGMA user_version = {version}",
         f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")


# -- older schemas: read as they are, migrated only by a write -----------------------------------

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entries (id INTEGER PRIMARY KEY, gpu TEXT NOT NULL, cudnn_version INTEGER NOT NULL,
    dtype TEXT NOT NULL, math TEXT NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL,
    batch INTEGER NOT NULL, repeats INTEGER NOT NULL, created REAL NOT NULL,
    UNIQUE (gpu, cudnn_version, dtype, math, op, shape, batch));
CREATE TABLE perfs (entry INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE,
    algo INTEGER NOT NULL, time_ms REAL NOT NULL, ws_bytes INTEGER NOT NULL,
    algo_math INTEGER NOT NULL);
CREATE INDEX perfs_entry ON perfs(entry);
"""


def _schema_1_copy(src, dest):
    """``src``'s entries in a schema-1 file (ucudnn 0.2.0's: WAL, no cap, timing or family)."""
    conn = sqlite3.connect(dest, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(_V1)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO meta VALUES ('application', 'ucudnn-bench-cache'), "
                 "('schema_version', '1')")
    conn.execute(f"ATTACH '{src}' AS s")
    conn.execute("INSERT INTO entries SELECT id, gpu, cudnn_version, dtype, math, op, shape, "
                 "batch, repeats, created FROM s.entries")
    conn.execute("INSERT INTO perfs SELECT entry, algo, time_ms, ws_bytes, algo_math "
                 "FROM s.perfs")
    conn.execute("DETACH s")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_schema_1_read_only_is_read_as_it_is(tmp_path, caplog):
    cache = _alexnet_cache(tmp_path, "new.sqlite")
    with BenchCache(cache) as c:
        keys = [dataclasses.replace(k, workspace_cap=UNKNOWN_CAP) for k in c.keys()
                if k.op != "bwd_filter"]
        batches = [c.batches(k) for k in c.keys() if k.op != "bwd_filter"]
    old = tmp_path / "old.sqlite"
    _schema_1_copy(cache, old)
    before = _state(old)
    with BenchCache(old, readonly=True) as c:
        assert c.schema == 1 and c.keys() == keys and c.keys(include_legacy=False) == []
        assert [c.batches(k) for k in keys] == batches
        assert c.get_many(dataclasses.replace(keys[0], workspace_cap=0), batches[0]) == {}
        assert len(c.get_many(keys[0], batches[0])) == len(batches[0])
    assert "schema 1, read-only: read as it is" in caplog.text
    assert _state(old) == before


@pytest.mark.parametrize("schema", [1, 5])
def test_reading_commands_leave_an_older_schema_as_it_is(tmp_path, schema):
    cache = _alexnet_cache(tmp_path, "new.sqlite")
    if schema == 1:
        old = tmp_path / "old.sqlite"
        _schema_1_copy(cache, old)
        cache.unlink()
        cache = old
    else:
        _stamp(cache, 5)
    n, bwd_filter = _count(cache), _count(cache, "op = 'bwd_filter'")
    before = _state(cache)
    listing = run(tmp_path, "cache", "list", "--cache", cache)
    assert listing.stdout.splitlines()[0].endswith(" entries")
    assert _state(cache) == before
    # every entry that a migration would keep is listed, none merged away
    kept = sum(len(k["batches"]) for k in json.loads(
        run(tmp_path, "cache", "list", "--cache", cache, "--json").stdout))
    assert kept == n - bwd_filter > 0
    run(tmp_path, "cache", "export", tmp_path / "copy.sqlite", "--cache", cache)
    if schema == 5:
        run(tmp_path, "cache", "export", "--net", "alexnet", "--cache", cache, "--gpu", GPU)
        run(tmp_path, "plan", "--net", "alexnet", "--cache", cache, "--gpu", GPU)
    assert _state(cache)[:2] == before[:2]
    assert not [p for p in _listing(tmp_path) if p.startswith(cache.name + "-")]
    # a write migrates it, and says what it kept and what it dropped
    p = run(tmp_path, "cache", "import", tmp_path / "copy.sqlite", "--cache", cache)
    assert (f"migrated from schema {schema} to {SCHEMA_VERSION}: {n - bwd_filter} of {n} "
            "entries kept; "
            f"dropped {bwd_filter} legacy backward-filter entries timed with beta 0") in p.stderr


# -- bad rows: skipped by readers, refused by imports --------------------------------------------

BAD_ROWS = [
    ("entries", "family", "'fast'", "cache key field 'family'"),
    ("entries", "shape", "'c=3,h=oops'", "cache key field 'shape'"),
    ("entries", "op", "'sideways'", "cache key field 'op'"),
    ("entries", "dtype", "'float99'", "cache key field 'dtype'"),
    ("entries", "math", "'magic'", "cache key field 'math'"),
    ("entries", "workspace_cap", "'lots'", "field 'workspace_cap'"),
    ("entries", "batch", "0", "field 'batch'"),
    ("perfs", "time_ms", "'fast'", "field 'time_ms'"),
    ("perfs", "time_ms", "-10000", "field 'time_ms'"),
    ("perfs", "time_ms", "9e999", "field 'time_ms'"),
    ("perfs", "ws_bytes", "-1", "field 'ws_bytes'"),
    ("perfs", "ws_bytes", "1.5", "field 'ws_bytes'"),
    # text that is not UTF-8 (a flipped bit): read as bytes, refused as a blob is
    ("entries", "shape", "CAST(X'633d33ff2c' AS TEXT)", "cache key field 'shape': must be text"),
    ("entries", "gpu", "CAST(X'4e56ff' AS TEXT)", "cache key field 'gpu'"),
]


def _spoil(cache, table, column, value):
    """Set ``column`` of one row (of the first forward entry at batch 1) to ``value``."""
    conn = sqlite3.connect(cache)
    entry = conn.execute("SELECT MIN(id) FROM entries WHERE op = 'fwd' AND batch = 1").fetchone()[0]
    conn.close()
    where = f"id = {entry}" if table == "entries" else (
        f"rowid = (SELECT MIN(rowid) FROM perfs WHERE entry = {entry})")
    _sql(cache, f"UPDATE {table} SET {column} = {value} WHERE {where}")
    return entry


@pytest.mark.parametrize("table, column, value, field", BAD_ROWS)
def test_readers_skip_a_bad_entry_with_one_warning(tmp_path, table, column, value, field):
    cache = _alexnet_cache(tmp_path)
    entry = _spoil(cache, table, column, value)
    before = _state(cache)
    warning = f"benchmark cache {cache}: entry {entry} ("
    # which command reads the spoiled value: a listing reads keys and sizes; an export
    # looks up the layers' own keys, a plan with --gpu lists the keys first
    reads = {"list": table == "entries",
             "export": table == "perfs" or column in ("workspace_cap", "batch"),
             "plan": table == "perfs" or column != "batch"}
    for name, args in (("list", ["cache", "list", "--cache", cache]),
                       ("export", ["cache", "export", "--net", "alexnet", "--cache", cache,
                                   "--gpu", GPU, "--cudnn-version", CUDNN]),
                       ("plan", ["plan", "--net", "alexnet", "--cache", cache, "--gpu", GPU])):
        p = run(tmp_path, *args)            # exit status 0, no traceback
        lines = [l for l in p.stderr.splitlines() if warning in l]
        assert len(lines) == reads[name], (name, p.stderr)
        assert all(field in l and "skipped" in l for l in lines), lines
        assert "planned total: -" not in p.stdout
    assert _state(cache) == before


@pytest.mark.parametrize("table, column, value, field", BAD_ROWS)
def test_an_import_refuses_a_source_with_a_bad_entry(tmp_path, table, column, value, field):
    src = _alexnet_cache(tmp_path, "src.sqlite")
    entry = _spoil(src, table, column, value)
    dest = _alexnet_cache(tmp_path, "dest.sqlite")
    _sql(dest, "DELETE FROM entries WHERE op = 'bwd_data'")
    before = _state(dest)
    p = run(tmp_path, "cache", "import", src, "--cache", dest, ok=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"benchmark cache {src}: entry {entry}: " in p.stderr and field in p.stderr, p.stderr
    assert "nothing was imported" in p.stderr and "--cache" not in p.stderr
    assert _state(dest) == before
    # into a new cache: the file the failed import created is removed
    p = run(tmp_path, "cache", "import", src, "--cache", tmp_path / "new.sqlite", ok=False)
    assert p.returncode == 2 and not (tmp_path / "new.sqlite").exists()


@pytest.mark.parametrize("value", [-1.0, math.inf, -math.inf])
def test_an_import_refuses_negative_or_infinite_times(tmp_path, value):
    src = _alexnet_cache(tmp_path, "src.sqlite")
    conn = sqlite3.connect(src)
    conn.execute("UPDATE perfs SET time_ms = ? WHERE rowid = 7", (value,))
    conn.commit()
    conn.close()
    with BenchCache(tmp_path / "dest.sqlite") as dest:
        with pytest.raises(CacheError, match=r"src.sqlite: entry \d+: field 'time_ms': must "
                                             r"be a finite time >= 0.*nothing was imported"):
            dest.import_cache(src)
        assert len(dest) == 0


def test_an_import_refuses_a_bad_engine_refusal(tmp_path):
    src = _alexnet_cache(tmp_path, "src.sqlite")
    conn = sqlite3.connect(src)
    conn.execute("INSERT INTO refused VALUES ('G', 91400, 'float32', 'default', 'fwd', "
                 "'c=3', 'x', 'off', 0)")
    conn.commit()
    conn.close()
    with BenchCache(tmp_path / "dest.sqlite") as dest:
        with pytest.raises(CacheError, match=r"src.sqlite: refusal 1: cache key field "
                                             r"'shape'.*nothing was imported"):
            dest.import_cache(src)
        assert len(dest) == 0


# -- a full disk, a read-only cache ---------------------------------------------------------------

@pytest.fixture
def fill_disk(monkeypatch):
    """``fill_disk()``: every cache opened read-write from then on may not grow: SQLite
    answers a write that needs another page with SQLITE_FULL, as on a full disk."""
    real = cache_file.CacheFile._set_journal_mode

    def full(self):
        real(self)
        conn = self._connection()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {max(pages, 1)}")
    return lambda: monkeypatch.setattr(cache_file.CacheFile, "_set_journal_mode", full)


def test_an_import_onto_a_full_disk_leaves_the_cache_as_it_was(tmp_path, fill_disk):
    src = _alexnet_cache(tmp_path, "src.sqlite")
    dest = tmp_path / "dest.sqlite"
    with BenchCache(dest) as c:
        pass
    before = _state(dest)
    fill_disk()
    with BenchCache(dest) as c:
        with pytest.raises(CacheError, match=f"benchmark cache {dest}: cannot write: database "
                                             "or disk is full; nothing was stored"):
            c.import_cache(src)
    assert _state(dest) == before                  # no journal, no temporary file


def test_a_new_cache_on_a_full_disk_leaves_no_file(tmp_path, fill_disk):
    src = _alexnet_cache(tmp_path, "src.sqlite")
    dest = tmp_path / "new.sqlite"
    fill_disk()
    with pytest.raises(CacheError, match=f"benchmark cache {dest}: database or disk is full"):
        with BenchCache(dest) as c:
            c.import_cache(src)
    assert _listing(tmp_path) == ["src.sqlite"]


def test_an_import_into_a_read_only_cache_names_the_cache(tmp_path, monkeypatch):
    src = _alexnet_cache(tmp_path, "src.sqlite")
    dest = _alexnet_cache(tmp_path, "dest.sqlite")
    monkeypatch.setattr(cache_file, "write_refusal", lambda path: f"file {path} not writable")
    before = _state(dest)
    with BenchCache(dest, warn=False) as c:
        assert c.readonly
        with pytest.raises(CacheError) as e:
            c.import_cache(src)
    assert str(e.value).startswith(f"benchmark cache {dest}: opened read-only (file ")
    assert f"nothing was imported from {src}" in str(e.value)
    assert _state(dest) == before


def test_a_skipped_entrys_text_reaches_the_terminal_escaped(tmp_path):
    cache = _alexnet_cache(tmp_path)
    entry = _spoil(cache, "entries", "shape", "char(27) || '[31m' || char(10) || 'X'")
    p = run(tmp_path, "cache", "list", "--cache", cache)
    (line,) = [l for l in p.stderr.splitlines() if f"entry {entry} (" in l]
    assert "|\\x1b[31m\\nX|" in line and "skipped" in line
    assert "\x1b" not in p.stderr + p.stdout
