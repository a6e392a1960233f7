"""The cache file's format: its tables, the marks that make a file ours (application id,
schema version), telling ours from a foreign file, and creating or migrating the tables.

Note [Schema migration]
    Schema 2 holds ``workspace_cap`` and ``timing`` in each entry; schema 1 lacks them. A
    schema-1 file is migrated in place on the first read-write open, in one ``BEGIN
    IMMEDIATE`` transaction (another process that migrates it first is noticed inside the
    lock). Schema-1 entries were all timed the same way -- back-to-back re-timing with 5
    CUDA-event runs, the only ``time_iters`` any caller passed -- so they get ``timing =
    "events5"``. Their cap is unknowable: 8 GiB by default but capped by the free memory of the
    moment, and ``ucudnn bench --workspace-cap`` could lower it. They get ``workspace_cap =
    UNKNOWN_CAP`` (-1), which no lookup for planning matches (only a lookup with that very
    sentinel, for listing and export): they are measured again when needed and can be dropped
    with ``BenchCache.drop_legacy``. A schema-1 file opened read-only is read as it is, through
    a temporary view that gives its entries those two columns (``SCHEMA_1_AS_2``, in the
    connection's memory; the file is not written). A file of a newer schema is refused.

    Schema 3 adds the family of choices an entry measured (``family``: ``legacy`` or
    ``graph``, part of the key) and each choice's engine config (``engine``: "" for an
    algorithm; Note [Choices] in ucudnn/vocab.py). Every schema-2 entry measured the legacy
    algorithms, so the migration gives it ``family = 'legacy'`` and its perfs ``engine = ''``:
    nothing is lost or measured again. A schema-2 file opened read-only (a cache on shared
    storage) is read as it is, through the same columns as literals (:func:`columns`).

    Schema 4 has schema 3's tables; its graph-family entries were measured with the check of
    Note [Graph results checked] (cython/ucudnn/_check.pyx), which refuses engine configs whose
    results are off. A schema-3 file's graph entries predate it (one config of AlexNet's conv2
    backward-filter, 1e-3 to 1.6e-2 off, is the fastest there), so the migration deletes them,
    and they are measured again when a plan needs them; the legacy entries stay. A schema-3
    file opened read-only is read without its graph entries (``visible`` of
    :func:`columns`).

    Schema 5 adds the table ``refused``: the engines whose results Note [Refused engines]
    refused, per kernel. Nothing else changes, so the migration creates it and loses nothing.
    A schema-4 file opened read-only has no refusals to read.

    Schema 6 has schema 5's tables; its legacy backward-filter entries re-timed with CUDA
    events were timed with beta = 1 (Note [Backward-filter timed with beta 1] in
    cython/ucudnn/_timing.pyx), those of older files with beta = 0, which is up to 2x faster
    for a short kernel (a 0.06 ms one on the H200) and so planned micro-batches that run
    slower than predicted. The migration deletes them, as 3 -> 4 deleted the unchecked graph
    entries, and they are measured again when a plan needs them. The graph family timed
    backward-filter with beta = 1 already, and ``find`` entries hold cudnnFind's own times,
    which take no beta: both stay. An older file opened read-only is read without those
    entries (``visible`` of :func:`columns`).

    Schema 7 has schema 6's tables and entries; its ``shape`` texts may describe 3-D
    convolutions (Note [N-D geometry] in ucudnn/plan/conv.py: the depth fields after the 2-D
    ones, five strides), which a ucudnn of schema 6 cannot read. The text of a 2-D shape is
    what it was, so the migration changes no row: it raises the version, so that an older
    ucudnn refuses the file as a newer schema (in one line, untouched) instead of skipping
    its 3-D entries as unreadable, and says that it kept every entry. A schema-6 file
    opened read-only is read as it is: it holds 2-D shapes only.

    Schema 8 adds to each choice (``perfs``) whether cuDNN called it deterministic
    (``deterministic``: 1, 0, or NULL where not known; Note [Deterministic plans] in
    ucudnn/plan/dp.py). An older entry never recorded it, so the migration adds the column
    with NULL for every row and loses nothing: its times stay good for every plan, a
    deterministic plan never takes such a choice, and a benchmark for one measures the size
    again (``ucudnn.measure.bench.measure``), which replaces the entry. An older file opened
    read-only reads NULL for every choice (:func:`columns`).

    Schema 9 has schema 8's tables; its graph-family entries were measured by the pruned
    search that walks on to the configs within its cap and within the tiers below it (Note
    [Graph choices within the cap] in cython/ucudnn/_graph.pyx). An older graph entry may
    hold only configs over a small cap (all eight of nnU-Net's 128^3 levels at 256 MiB, so
    their plans had no graph config), and one measured under a larger cap answers a smaller
    one without the configs that fit it. The migration deletes the graph entries, as 3 -> 4
    did, and they are measured again when a plan needs them; the legacy entries and the
    refused engines stay. An older file opened read-only is read without its graph entries.

    Schema 10 has schema 9's tables; its graph entries of 3-D kernels were measured with
    slab choices (Note [Slab choices tried] in ucudnn/plan/slabs.py), engine texts
    ``<config>/P`` that an older ucudnn cannot read. An older 3-D graph entry lacks them, and
    under a cap below one sample's need (nnU-Net at 256 MiB) it answers every lookup without
    the choices that fit, so the migration deletes the 3-D graph entries (their shape text
    has the depth fields), and they are measured again when a plan needs them. An older file
    opened read-only is read without them.

    Only a command that may store opens a cache read-write, and so migrates it (``ucudnn
    bench``, ``cache import``, ``plan`` with a GPU to measure on, the C API); the reading
    commands (``cache list``, ``cache export``, ``plan`` without one) open it read-only and
    read it as it is, leaving the file byte for byte as it was. A migration says on stderr
    how many entries it kept and what it dropped, and why. No migration merges entries: each
    step adds columns with one value for every old entry, so old keys stay distinct; the
    entries dropped are only those the two steps above name (3 -> 4, 5 -> 6), which no plan
    may use.

Note [Refused engines]
    The check of Note [Graph results checked] (cython/ucudnn/_check.pyx) can refuse an engine
    at one micro-batch size after it was accepted at others: such an error grows with the
    reduction, so a small micro-batch passes where a larger one does not. The engine is then
    refused for the whole kernel -- at every size, in every later process -- and the table
    ``refused`` keeps it (gpu, cuDNN version, dtype, math, op, shape, engine index, why).
    An entry of that kernel holding a config of a refused engine is treated as absent by
    every lookup (``usable`` of :func:`columns`): dropping the config alone would not do,
    since the configs it beat on time and workspace were never checked there. Such a size is
    measured again when a plan needs it, by a kernel that starts from the stored refusals
    (``Kernel.refuse_engines``), so its check reaches the configs beyond the refused one.
    ``ucudnn.measure.bench.measure`` seeds the kernel, stores what it refused and measures
    again, at once, the sizes it had read or measured before the refusal.
"""
from __future__ import annotations

import logging
import sqlite3
import time
from typing import NamedTuple

from ...vocab import InputError
from .key import UNKNOWN_CAP

__all__ = ["CacheError", "APPLICATION_ID", "SCHEMA_VERSION", "BWD_FILTER_BETA_1_SCHEMA",
           "GRAPH_WITHIN_CAP_SCHEMA", "SLAB_SCHEMA", "GRAPH_3D_WHERE",
           "SCHEMA_1_AS_2",
           "APP_NAME", "SQLITE_MAGIC", "beta_0_where",
           "KERNEL_WHERE", "REFUSED_WHERE", "Columns", "columns", "check_ours", "initialise"]

log = logging.getLogger("ucudnn")

#: ``PRAGMA application_id`` of ucudnn caches ("ucNN").
APPLICATION_ID = 0x75634E4E
SCHEMA_VERSION = 10
#: The first schema whose legacy backward-filter entries were timed with beta = 1.
BWD_FILTER_BETA_1_SCHEMA = 6
#: The first schema whose graph entries come from the search within the cap and its tiers.
GRAPH_WITHIN_CAP_SCHEMA = 9
#: The first schema whose 3-D graph entries were measured with slab choices.
SLAB_SCHEMA = 10
#: Graph entries of 3-D kernels (a 3-D shape's key has the depth fields).
GRAPH_3D_WHERE = "family = 'graph' AND shape LIKE '%,d=%'"
APP_NAME = "ucudnn-bench-cache"
SQLITE_MAGIC = b"SQLite format 3\x00"
_OUR_TABLES = {"meta", "entries", "perfs"}

_TABLES = """
CREATE TABLE {entries} (
    id INTEGER PRIMARY KEY,
    gpu TEXT NOT NULL, cudnn_version INTEGER NOT NULL, dtype TEXT NOT NULL,
    math TEXT NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL, family TEXT NOT NULL,
    timing TEXT NOT NULL, workspace_cap INTEGER NOT NULL, batch INTEGER NOT NULL,
    repeats INTEGER NOT NULL, created REAL NOT NULL,
    UNIQUE (gpu, cudnn_version, dtype, math, op, shape, family, timing, workspace_cap, batch)
);
CREATE TABLE {perfs} (
    entry INTEGER NOT NULL REFERENCES {entries}(id) ON DELETE CASCADE,
    algo INTEGER NOT NULL, time_ms REAL NOT NULL, ws_bytes INTEGER NOT NULL,
    algo_math INTEGER NOT NULL, engine TEXT NOT NULL
);
"""
# Schema 2, the source of the 2 -> 3 migration (and the target of 1 -> 2).
_TABLES_2 = (_TABLES.replace(" family TEXT NOT NULL,", "").replace(" family,", "")
             .replace(", engine TEXT NOT NULL", ""))
# Note [Refused engines]: one row per engine refused for a kernel (graph family).
_REFUSED = """
CREATE TABLE refused (
    gpu TEXT NOT NULL, cudnn_version INTEGER NOT NULL, dtype TEXT NOT NULL,
    math TEXT NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL, engine INTEGER NOT NULL,
    reason TEXT NOT NULL, created REAL NOT NULL,
    UNIQUE (gpu, cudnn_version, dtype, math, op, shape, engine)
)
"""
# Schema 7 -> 8: whether each choice is deterministic, NULL (not known) for the old ones.
_MIGRATE_7_8 = "ALTER TABLE perfs ADD COLUMN deterministic INTEGER"
_SCHEMA = ("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
           + _TABLES.format(entries="entries", perfs="perfs")
           + "CREATE INDEX perfs_entry ON perfs(entry);" + _REFUSED + ";" + _MIGRATE_7_8)

# Schema 1 -> 2 (Note [Schema migration]): new tables, rows copied with their ids, old tables
# dropped (perfs first: no cascade), new ones renamed (SQLite rewrites the foreign key).
_MIGRATE_1_2 = _TABLES_2.format(entries="entries_v2", perfs="perfs_v2") + f"""
INSERT INTO entries_v2 (id, gpu, cudnn_version, dtype, math, op, shape, timing, workspace_cap,
                        batch, repeats, created)
    SELECT id, gpu, cudnn_version, dtype, math, op, shape, 'events5', {UNKNOWN_CAP}, batch,
           repeats, created FROM entries;
INSERT INTO perfs_v2 (entry, algo, time_ms, ws_bytes, algo_math)
    SELECT entry, algo, time_ms, ws_bytes, algo_math FROM perfs;
DROP INDEX IF EXISTS perfs_entry;
DROP TABLE perfs;
DROP TABLE entries;
ALTER TABLE entries_v2 RENAME TO entries;
ALTER TABLE perfs_v2 RENAME TO perfs;
CREATE INDEX perfs_entry ON perfs(entry)
"""
# Schema 2 -> 3, the same way: every entry measured the legacy family.
_MIGRATE_2_3 = _TABLES.format(entries="entries_v3", perfs="perfs_v3") + """
INSERT INTO entries_v3 (id, gpu, cudnn_version, dtype, math, op, shape, family, timing,
                        workspace_cap, batch, repeats, created)
    SELECT id, gpu, cudnn_version, dtype, math, op, shape, 'legacy', timing, workspace_cap,
           batch, repeats, created FROM entries;
INSERT INTO perfs_v3 (entry, algo, time_ms, ws_bytes, algo_math, engine)
    SELECT entry, algo, time_ms, ws_bytes, algo_math, '' FROM perfs;
DROP INDEX IF EXISTS perfs_entry;
DROP TABLE perfs;
DROP TABLE entries;
ALTER TABLE entries_v3 RENAME TO entries;
ALTER TABLE perfs_v3 RENAME TO perfs;
CREATE INDEX perfs_entry ON perfs(entry)
"""
# Schema 3 -> 4: the graph entries measured before their results were checked go.
_MIGRATE_3_4 = """
DELETE FROM perfs WHERE entry IN (SELECT id FROM entries WHERE family = 'graph');
DELETE FROM entries WHERE family = 'graph'
"""
# Schema 4 -> 5: the table of refused engines, empty.
_MIGRATE_4_5 = _REFUSED


def beta_0_where(family: str = "family", entries: str = "") -> str:
    """The legacy backward-filter entries re-timed with beta = 0 (files before
    ``BWD_FILTER_BETA_1_SCHEMA``, Note [Schema migration]); ``family``: the expression of an
    entry's family (:func:`columns`), ``entries``: the table's alias with its dot."""
    return (f"({family} = 'legacy' AND {entries}op = 'bwd_filter' AND "
            f"{entries}timing != 'find')")


# Schema 5 -> 6: the legacy backward-filter entries re-timed with beta = 0 go.
_MIGRATE_5_6 = f"""
DELETE FROM perfs WHERE entry IN (SELECT id FROM entries WHERE {beta_0_where()});
DELETE FROM entries WHERE {beta_0_where()}
"""
# Schema 6 -> 7: no row changes; a schema-7 file may hold 3-D shapes (Note [Schema migration]).
_MIGRATE_6_7 = ""
# A schema-1 file opened read-only, read as schema 2 without writing it: a view in the
# connection's temporary schema, which shadows the file's table of the same name.
SCHEMA_1_AS_2 = f"""
CREATE TEMP VIEW entries AS SELECT id, gpu, cudnn_version, dtype, math, op, shape,
    'events5' AS timing, {UNKNOWN_CAP} AS workspace_cap, batch, repeats, created
    FROM main.entries
"""
# Schema 8 -> 9: the graph entries of the search that kept the first eight configs go.
_MIGRATE_8_9 = _MIGRATE_3_4
# Schema 9 -> 10: the graph entries of 3-D kernels, measured without slab choices, go.
_MIGRATE_9_10 = f"""
DELETE FROM perfs WHERE entry IN (SELECT id FROM entries WHERE {GRAPH_3D_WHERE});
DELETE FROM entries WHERE {GRAPH_3D_WHERE}
"""
_MIGRATIONS = {1: _MIGRATE_1_2, 2: _MIGRATE_2_3, 3: _MIGRATE_3_4, 4: _MIGRATE_4_5,
               5: _MIGRATE_5_6, 6: _MIGRATE_6_7, 7: _MIGRATE_7_8, 8: _MIGRATE_8_9,
               9: _MIGRATE_9_10}

# What each migration drops, and why (Note [Schema migration]).
_DROPPED = {3: "graph-family entries measured before their results were checked",
            5: "legacy backward-filter entries timed with beta 0",
            8: "graph-family entries measured before the search covered the cap's tiers",
            9: "3-D graph-family entries measured without slab choices"}

_KERNEL_COLUMNS = ("gpu", "cudnn_version", "dtype", "math", "op", "shape", "family")


class Columns(NamedTuple):
    """How SQL reads a file of one schema (:func:`columns`)."""
    family: str         # the column ``family`` (a schema-2 file: the value all entries have)
    engine: str         # the column ``engine`` of perfs (likewise)
    kernel_where: str   # one kernel's entries (parameters: CacheKey.kernel_columns())
    visible: str        # the entries that may be read at all (not a schema-3 graph entry)
    usable: str         # visible, and holding no config of a refused engine
    deterministic: str  # the column ``deterministic`` of perfs (before schema 8: NULL)


def columns(version: int, entries: str = "", perfs: str = "") -> Columns:
    """:class:`Columns` of a file of ``version``: a schema-2 file (read-only) reads the values
    every one of its entries has; the graph entries of a file before schema 9 and a file's
    legacy backward-filter entries timed with beta = 0 (before schema 6) are not visible (Note
    [Schema migration]); from schema 5 an entry holding a config of an engine refused for
    its kernel is not usable (Note [Refused engines]); before schema 8 no choice's
    determinism is known. ``entries``, ``perfs``: the tables'
    aliases with their dot (``"e."``), where a statement joins them."""
    family = f"{entries}family" if version >= 3 else "'legacy'"
    engine = f"{perfs}engine" if version >= 3 else "''"
    hidden = []
    if 3 <= version < GRAPH_WITHIN_CAP_SCHEMA:
        hidden.append(f"{entries}family = 'graph'")
    elif 3 <= version < SLAB_SCHEMA:
        hidden.append(f"({entries}family = 'graph' AND {entries}shape LIKE '%,d=%')")
    if version < BWD_FILTER_BETA_1_SCHEMA:
        hidden.append(beta_0_where(family, entries))
    visible = f"NOT ({' OR '.join(hidden)})" if hidden else "1"
    where = " AND ".join(f"{family if c == 'family' else entries + c} = ?"
                         for c in _KERNEL_COLUMNS) + f" AND {visible}"
    usable = visible
    if version >= 5:
        e = entries or "entries."
        same = " AND ".join(f"r.{c} = {e}{c}" for c in _KERNEL_COLUMNS if c != "family")
        usable = (f"{visible} AND ({e}family != 'graph' OR NOT EXISTS (SELECT 1 FROM perfs q "
                  f"JOIN refused r ON {same} WHERE q.entry = {e}id AND (q.engine = 'eng' || "
                  "r.engine OR q.engine LIKE 'eng' || r.engine || '[%' "
                  "OR q.engine LIKE 'eng' || r.engine || '/%')))")
    deterministic = f"{perfs}deterministic" if version >= 8 else "NULL"
    return Columns(family, engine, where, visible, usable, deterministic)


#: The entries of one kernel in this schema (parameters: :meth:`CacheKey.kernel_columns`).
KERNEL_WHERE = columns(SCHEMA_VERSION).kernel_where
#: The refusals of one kernel (parameters: the first six of :meth:`CacheKey.kernel_columns`).
REFUSED_WHERE = " AND ".join(f"{c} = ?" for c in _KERNEL_COLUMNS if c != "family")


class CacheError(InputError):
    """The cache file cannot be used (not ours, corrupted, locked too long, absent, read-only
    for a write); names the path."""


def check_ours(conn: sqlite3.Connection, where: str) -> bool:
    """True if initialised by us with a schema this ucudnn reads or migrates (1 to
    ``SCHEMA_VERSION``), False if an empty SQLite database; else CacheError."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    if app_id == 0 and not tables:
        return False
    if app_id != APPLICATION_ID:
        raise CacheError(f"{where}: an SQLite database of another application "
                         f"(application_id {app_id:#x}, tables {sorted(tables)}), "
                         "not a ucudnn benchmark cache; the file was left untouched")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version not in range(1, SCHEMA_VERSION + 1):
        raise CacheError(f"{where}: cache schema version {version}, this ucudnn reads "
                         f"version {SCHEMA_VERSION} (and migrates versions 1 to "
                         f"{SCHEMA_VERSION - 1}); the file "
                         "was left untouched -- use another --cache file or a newer ucudnn")
    needed = _OUR_TABLES | ({"refused"} if version >= 5 else set())
    if not needed <= tables:
        raise CacheError(f"{where}: a ucudnn cache lacking table(s) "
                         f"{sorted(needed - tables)}; the file was left untouched")
    return True


def initialise(conn: sqlite3.Connection, where: str) -> None:
    """Create the tables of an empty database or migrate an older one; run inside the write
    transaction, so the state is re-checked under the lock (another process may have
    initialised or migrated the file since it was validated)."""
    if not check_ours(conn, where):
        for stmt in _SCHEMA.strip().split(";"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                         [("application", APP_NAME), ("schema_version", str(SCHEMA_VERSION))])
    else:
        first = version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        n = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        dropped = []
        while version < SCHEMA_VERSION:
            before = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            for stmt in _MIGRATIONS[version].strip().split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            gone = before - conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            if gone:
                dropped.append(f"{gone} {_DROPPED[version]}")
            version += 1
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        kept = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                         [("schema_version", str(SCHEMA_VERSION)),
                          ("migrated_from_schema", str(first)),
                          ("migrated", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
                          ("migrated_entries", str(n))])
        if first == 1:
            log.warning("%s: migrated from schema 1: %d entries kept with timing events5 "
                        "and an unknown workspace cap; they are not used for planning and "
                        "are measured again when needed (Note [Schema migration])", where, kept)
        log.warning("%s: migrated from schema %d to %d: %d of %d entries kept%s (Note [Schema "
                    "migration])", where, first, SCHEMA_VERSION, kept, n,
                    "; dropped " + ", ".join(dropped) + ", measured again when a plan needs "
                    "them" if dropped else ", none dropped")
