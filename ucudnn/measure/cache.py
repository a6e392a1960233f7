"""SQLite cache of cuDNN benchmark results, shared by processes and runs.

One entry is what cudnnFind measured for one kernel at one micro-batch size: the list of
algorithms that ran (:class:`~ucudnn.plan.table.AlgoPerf`). It is keyed by :class:`CacheKey` (GPU
model, cuDNN version, dtype, math mode, operation, kernel geometry, the workspace offered to
cudnnFind and the timing method) plus the micro-batch size, so a table measured on one GPU or
library version never plans another.

Note [Cache file safety]
    The file may be shared by several processes (a Caffe run benchmarking while ``ucudnn bench``
    fills the same cache): WAL journal, a busy timeout, and every write inside one
    ``BEGIN IMMEDIATE`` transaction, retried while another writer holds the lock. A file that is
    not ours -- not SQLite, corrupted, or another application's database -- raises
    :class:`CacheError` and is never written to: it is validated through a read-only connection
    before the read-write one is opened. An empty (0-byte) file or an SQLite file without any
    table is initialised. Reads of one lookup are one SQL statement (one snapshot), so a
    concurrent writer replacing an entry is seen either before or after, never half.

Note [Workspace cap and timing in the key]
    cudnnFind only runs the algorithms whose workspace fits in what it is offered, and the core
    offers ``min(cap, free memory - 512 MiB)`` (8 GiB cap by default, halved when the
    allocation fails). A benchmark taken under memory pressure therefore lacks the algorithms
    that needed more, and must not plan as if complete. Times differ by method too: cudnnFind's
    own times (``"find"``) are 13-29 % off what plans run at on the H200, the core's re-timing
    of each algorithm back to back with CUDA events (``"events5"`` for 5 runs) is not
    (Note [Find times] in cython/ucudnn/_core.pyx). Both are key fields:
    ``CacheKey.workspace_cap`` (bytes offered to Find) and ``CacheKey.timing``.

    Matching (:meth:`CacheKey.usable_for`, :meth:`BenchCache.get_many`): a lookup asks with the
    cap it needs and a timing; an entry is usable when its timing is the same and its cap is at
    least the asked one. Argument: an algorithm's time and workspace do not depend on how much
    more workspace Find was offered than the algorithm uses, and every algorithm that fits in a
    smaller cap fits in a larger one, so an entry measured with a larger cap holds everything
    a smaller-cap measurement would (plus algorithms the planner filters out by its own limit).
    The converse fails, so a smaller cap never answers a larger ask. Timings are never mixed.
    Of several usable entries of one batch size, the one with the largest cap (then the newest)
    is returned. Writes replace only the entry of the exact (key, cap, timing, batch).

    The recorded cap is what the core reports it offered (``Kernel.last_benchmark_workspace``,
    Note [Offered workspace] in ucudnn/measure/bench.py).

Note [Schema migration]
    Schema 2 added ``workspace_cap`` and ``timing``. A schema-1 file is migrated in place on the
    first read-write open, in one ``BEGIN IMMEDIATE`` transaction (another process that migrates
    it first is noticed inside the lock). Schema-1 entries were all timed the same way: the
    back-to-back re-timing with 5 CUDA-event runs came in with the core itself (232b61d) and no
    caller ever passed another ``time_iters``, so they get ``timing = "events5"``. Their cap is
    unknowable: 8 GiB by default but capped by the free memory of the moment, and ``ucudnn
    bench --workspace-cap`` could lower it. They get ``workspace_cap = UNKNOWN_CAP`` (-1), which
    no lookup for planning matches (only a lookup with that very sentinel, for listing and
    export): they are measured again when needed and can be dropped with
    :meth:`BenchCache.drop_legacy`. A schema-1 file opened read-only cannot be migrated and is
    refused with what to do. A file of a newer schema is refused.

Note [Read-only caches]
    ``BenchCache(path, readonly=True)`` opens through a read-only connection (``mode=ro``; on
    storage where SQLite cannot create the ``-shm`` file of a WAL database, ``immutable=1``,
    which assumes nobody writes the file meanwhile): listing, lookups and planning work,
    writes raise :class:`CacheError`. With the default ``readonly=None`` a file that exists and
    is valid but cannot be opened for writing (read-only file or file system, no permission on
    its folder) falls back to read-only automatically; ``cache.readonly`` then is True and
    ``cache.readonly_reason`` says why. :meth:`BenchCache.fill` on a read-only cache measures
    what is missing and returns it without storing it (and logs a warning). ``readonly=False``
    refuses to fall back.
"""
from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..plan.conv import ConvShape
from ..vocab import DTYPES, MATH_MODES, InputError, format_size
from ..plan.table import OPS, AlgoPerf, BenchRow

__all__ = ["CacheKey", "BenchCache", "CacheError", "default_cache_path", "timing_name",
           "APPLICATION_ID", "SCHEMA_VERSION", "DEFAULT_WORKSPACE_CAP", "DEFAULT_TIMING",
           "UNKNOWN_CAP"]

log = logging.getLogger("ucudnn")

#: ``PRAGMA application_id`` of ucudnn caches ("ucNN").
APPLICATION_ID = 0x75634E4E
SCHEMA_VERSION = 2
#: What the core offers cudnnFind by default (``Kernel.benchmark(workspace_cap=None)``).
DEFAULT_WORKSPACE_CAP = 8 << 30
#: The core's default timing: re-timed with CUDA events, median of 5 (``time_iters=5``).
DEFAULT_TIMING = "events5"
#: ``workspace_cap`` of entries migrated from schema 1 (cap unknown; Note [Schema migration]).
UNKNOWN_CAP = -1
_TIMING_RE = re.compile(r"^(find|events[1-9][0-9]*)$")
APP_NAME = "ucudnn-bench-cache"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_OUR_TABLES = {"meta", "entries", "perfs"}

_TABLES = """
CREATE TABLE {entries} (
    id INTEGER PRIMARY KEY,
    gpu TEXT NOT NULL, cudnn_version INTEGER NOT NULL, dtype TEXT NOT NULL,
    math TEXT NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL,
    timing TEXT NOT NULL, workspace_cap INTEGER NOT NULL, batch INTEGER NOT NULL,
    repeats INTEGER NOT NULL, created REAL NOT NULL,
    UNIQUE (gpu, cudnn_version, dtype, math, op, shape, timing, workspace_cap, batch)
);
CREATE TABLE {perfs} (
    entry INTEGER NOT NULL REFERENCES {entries}(id) ON DELETE CASCADE,
    algo INTEGER NOT NULL, time_ms REAL NOT NULL, ws_bytes INTEGER NOT NULL,
    algo_math INTEGER NOT NULL
);
"""
_SCHEMA = ("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
           + _TABLES.format(entries="entries", perfs="perfs")
           + "CREATE INDEX perfs_entry ON perfs(entry);")

# Schema 1 -> 2 (Note [Schema migration]): new tables, rows copied with their ids, old tables
# dropped (perfs first: no cascade), new ones renamed (SQLite rewrites the foreign key).
_MIGRATE_1_2 = _TABLES.format(entries="entries_v2", perfs="perfs_v2") + f"""
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

_KERNEL_WHERE = ("gpu = ? AND cudnn_version = ? AND dtype = ? AND math = ? AND op = ? "
                 "AND shape = ?")


def timing_name(time_iters: int) -> str:
    """The key's ``timing`` for the core's ``time_iters``: ``"find"`` (0: cudnnFind's own
    times) or ``"events<N>"`` (re-timed with CUDA events, median of N back-to-back runs)."""
    if not isinstance(time_iters, int) or isinstance(time_iters, bool) or time_iters < 0:
        raise ValueError(f"time_iters must be an integer >= 0, got {time_iters!r}")
    return "find" if time_iters == 0 else f"events{time_iters}"


class CacheError(InputError):
    """The cache file cannot be used (not ours, corrupted, locked too long); names the path."""


@dataclass(frozen=True)
class CacheKey:
    """What a benchmark depends on, except the micro-batch size (a separate column).

    ``workspace_cap``: bytes offered to cudnnFind (in a lookup: the least a usable entry must
    have been offered); ``timing``: ``"find"`` or ``"events<N>"`` (:func:`timing_name`).
    Defaults are the core's defaults, 8 GiB and ``"events5"``. See Note [Workspace cap and
    timing in the key] for how lookups match; ``UNKNOWN_CAP`` marks entries migrated from
    schema 1, never usable for planning."""
    gpu: str
    cudnn_version: int
    dtype: str
    math: str
    op: str
    shape: ConvShape
    workspace_cap: int = DEFAULT_WORKSPACE_CAP
    timing: str = DEFAULT_TIMING

    def __post_init__(self):
        if not isinstance(self.gpu, str) or not self.gpu:
            raise ValueError(f"cache key field 'gpu' must be a non-empty string, got {self.gpu!r}")
        if (not isinstance(self.cudnn_version, int) or isinstance(self.cudnn_version, bool)
                or self.cudnn_version < 0):
            raise ValueError(f"cache key field 'cudnn_version' must be an integer >= 0, "
                             f"got {self.cudnn_version!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"cache key field 'dtype': unknown dtype {self.dtype!r} "
                             f"(expected one of {', '.join(DTYPES)})")
        if self.math not in MATH_MODES:
            raise ValueError(f"cache key field 'math': unknown math mode {self.math!r} "
                             f"(expected one of {', '.join(MATH_MODES)})")
        if self.op not in OPS:
            raise ValueError(f"cache key field 'op': {self.op!r} is not one of {', '.join(OPS)}")
        if not isinstance(self.shape, ConvShape):
            raise ValueError(f"cache key field 'shape' must be a ConvShape, got {self.shape!r}")
        if (not isinstance(self.workspace_cap, int) or isinstance(self.workspace_cap, bool)
                or (self.workspace_cap < 0 and self.workspace_cap != UNKNOWN_CAP)):
            raise ValueError(f"cache key field 'workspace_cap' must be a byte count >= 0, "
                             f"got {self.workspace_cap!r}")
        if not isinstance(self.timing, str) or not _TIMING_RE.match(self.timing):
            raise ValueError(f"cache key field 'timing': {self.timing!r} is not 'find' or "
                             "'events<N>' (N >= 1)")

    @property
    def legacy(self) -> bool:
        """Migrated from schema 1: cap unknown, never used for planning."""
        return self.workspace_cap == UNKNOWN_CAP

    def kernel_columns(self) -> Tuple[str, int, str, str, str, str]:
        """The kernel's identity: gpu, cudnn_version, dtype, math, op, shape text."""
        return (self.gpu, self.cudnn_version, self.dtype, self.math, self.op, self.shape.key())

    def columns(self) -> Tuple:
        """Every stored column of the key: :meth:`kernel_columns`, timing, workspace_cap."""
        return self.kernel_columns() + (self.timing, self.workspace_cap)

    def usable_for(self, asked: "CacheKey") -> bool:
        """Whether an entry stored under this key answers a lookup for ``asked``: same kernel,
        same timing, a cap at least the asked one (Note [Workspace cap and timing in the
        key]); a legacy entry answers only a lookup for legacy entries."""
        if self.kernel_columns() != asked.kernel_columns() or self.timing != asked.timing:
            return False
        if asked.legacy or self.legacy:
            return self.legacy and asked.legacy
        return self.workspace_cap >= asked.workspace_cap

    def describe_measurement(self) -> str:
        """``8.0GiB offered, events5`` (``cap unknown (schema 1)``)."""
        cap = "cap unknown (schema 1)" if self.legacy else f"{format_size(self.workspace_cap)} offered"
        return f"{cap}, {self.timing}"

    def text(self) -> str:
        """Stable one-line form, e.g. for listings."""
        cap = "unknown" if self.legacy else str(self.workspace_cap)
        return "|".join(str(c) for c in self.kernel_columns()) + f"|cap={cap}|{self.timing}"


_KEY_ITEM = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]*)")


def shape_from_key(text: str) -> ConvShape:
    """Inverse of :meth:`ConvShape.key` (packed strides come back as ``None``)."""
    kw = {}
    for name, value in _KEY_ITEM.findall(text):
        if value.startswith("["):
            kw[name] = tuple(int(x) for x in value[1:-1].split(",") if x)
        elif value == "None":
            kw[name] = None
        else:
            kw[name] = int(value)
    shape = ConvShape(**kw)
    packed = ConvShape(**{**kw, "x_strides": None, "y_strides": None})
    x = None if shape.x_strides == packed.packed_x_strides() else shape.x_strides
    y = None if shape.y_strides == packed.packed_y_strides() else shape.y_strides
    return ConvShape(**{**kw, "x_strides": x, "y_strides": y})


def default_cache_path() -> Path:
    """``$UCUDNN_CACHE`` or ``~/.cache/ucudnn/bench.sqlite``."""
    env = os.environ.get("UCUDNN_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "ucudnn" / "bench.sqlite"


def _is_locked(e: sqlite3.OperationalError) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


def _is_cantopen(e: sqlite3.OperationalError) -> bool:
    return "unable to open" in str(e).lower()


def _is_readonly_error(e: sqlite3.OperationalError) -> bool:
    """SQLite could not write: a read-only file or file system, or no -wal/-shm there."""
    msg = str(e).lower()
    return "readonly" in msg or "read-only" in msg or "unable to open" in msg


class BenchCache:
    """The benchmark cache at ``path`` (Notes [Cache file safety], [Workspace cap and timing in
    the key], [Schema migration], [Read-only caches]).

    ``readonly``: ``True`` opens read-only (the file must exist); ``None`` (default) opens
    read-write and falls back to read-only where the file cannot be written; ``False`` never
    falls back. ``self.readonly`` says how it was opened, ``self.readonly_reason`` why."""

    def __init__(self, path: Union[str, os.PathLike, None] = None, timeout: float = 60.0, *,
                 readonly: Optional[bool] = None):
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self.timeout = float(timeout)
        self.readonly = bool(readonly)
        self.readonly_reason: Optional[str] = "asked for" if readonly else None
        self._conn: Optional[sqlite3.Connection] = None
        self._has_tables = True            # False: a read-only, empty (uninitialised) file
        self._lock = threading.RLock()     # one connection, possibly used from several threads
        where = f"benchmark cache {self.path}"
        if self.path.is_dir():
            raise CacheError(f"{where}: is a directory, not a file")
        exists = self.path.exists()
        if readonly and not exists:
            raise CacheError(f"{where}: no such file (opened read-only, nothing to read)")
        if exists and self.path.stat().st_size > 0:
            sidecars = [Path(f"{self.path}{s}") for s in ("-wal", "-shm")]
            existed = [p.exists() for p in sidecars]
            try:
                version = self._validate_existing()
            except CacheError:
                self._remove_new_sidecars(sidecars, existed)
                raise
        else:
            version = 0
        if readonly is None and exists and not self._writable():
            self.readonly = True
            self.readonly_reason = (f"{self.path} or its folder is not writable "
                                    "(opened read-only)")
        if not self.readonly:
            try:
                self._open_readwrite()
                return
            except CacheError:
                raise
            except sqlite3.OperationalError as e:
                self.close()
                if readonly is False or not exists or not _is_readonly_error(e):
                    raise CacheError(f"{where}: {e}") from None
                self.readonly = True
                self.readonly_reason = f"cannot write: {e} (opened read-only)"
            except sqlite3.DatabaseError as e:
                self.close()
                raise CacheError(f"{where}: {e}") from None
            except BaseException:
                self.close()
                raise
        if version == 1:
            raise CacheError(
                f"{where}: cache schema version 1 needs migrating to version {SCHEMA_VERSION} "
                f"(entries gain the workspace offered to cudnnFind and the timing method), and "
                f"it is opened read-only ({self.readonly_reason}): open it once where it can "
                f"be written, or copy it to writable storage and use the copy (it is migrated "
                f"when opened)")
        self._open_readonly()
        if self.readonly_reason and readonly is None:
            log.warning("%s: %s", where, self.readonly_reason)

    # -- opening -----------------------------------------------------------------------------
    def _writable(self) -> bool:
        folder = self.path.parent
        return os.access(self.path, os.W_OK) and os.access(folder, os.W_OK | os.X_OK)

    def _open_readwrite(self) -> None:
        if not self.path.parent.exists():
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise CacheError(f"benchmark cache {self.path}: cannot create its folder: "
                                 f"{e}") from None
        self._conn = sqlite3.connect(str(self.path), timeout=self.timeout,
                                     isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        self._conn.execute("PRAGMA foreign_keys = ON")
        self._retry(lambda: self._conn.execute("PRAGMA journal_mode = WAL").fetchone())
        # WAL + NORMAL: a crash may lose the last commits, never consistency
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._initialise()

    def _open_readonly(self) -> None:
        """A read-only connection; ``immutable=1`` where SQLite cannot create the -shm file
        of a WAL database (read-only storage)."""
        where = f"benchmark cache {self.path}"
        base = self.path.resolve().as_uri()
        last = None
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            conn = None
            try:
                conn = sqlite3.connect(base + query, uri=True, timeout=self.timeout,
                                       isolation_level=None, check_same_thread=False)
                conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
                ours = self._check_ours(conn, where)
                if ours and conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                    raise CacheError(f"{where}: changed its schema while being opened")
                self._conn, self._has_tables = conn, ours
                if "immutable" in query:
                    self.readonly_reason = (f"{self.readonly_reason}; read as immutable "
                                            "(SQLite cannot create its -shm file there)")
                return
            except sqlite3.OperationalError as e:
                last = e
                if conn is not None:
                    conn.close()
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
        raise CacheError(f"{where}: cannot open read-only: {last}")

    def _validate_existing(self) -> int:
        """Check an existing non-empty file through a read-only connection; never writes.
        Returns its schema version (0: an empty SQLite database)."""
        where = f"benchmark cache {self.path}"
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError as e:
            raise CacheError(f"{where}: cannot read: {e}") from None
        if head != _SQLITE_MAGIC:
            raise CacheError(f"{where}: not an SQLite database (not a ucudnn benchmark cache); "
                             "the file was left untouched -- move it away or pass another --cache")
        base = self.path.resolve().as_uri()
        last = None
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                conn = sqlite3.connect(base + query, uri=True, timeout=self.timeout,
                                       isolation_level=None)
            except sqlite3.OperationalError as e:
                if not _is_cantopen(e):
                    raise CacheError(f"{where}: cannot open: {e}") from None
                last = e
                continue
            except sqlite3.Error as e:
                raise CacheError(f"{where}: cannot open: {e}") from None
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
                check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
                if check != ["ok"]:
                    raise CacheError(f"{where}: the database is corrupted "
                                     f"({'; '.join(check[:3])}); the file was left untouched")
                if not self._check_ours(conn, where):
                    return 0
                return conn.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.OperationalError as e:
                # read-only storage: a WAL database whose -shm cannot be created
                if not _is_cantopen(e):
                    raise CacheError(f"{where}: the database is corrupted or unreadable ({e}); "
                                     "the file was left untouched") from None
                last = e
            except sqlite3.DatabaseError as e:
                raise CacheError(f"{where}: the database is corrupted or unreadable ({e}); "
                                 "the file was left untouched") from None
            finally:
                conn.close()
        raise CacheError(f"{where}: cannot open, even read-only ({last}); the file was left "
                         "untouched")

    @staticmethod
    def _remove_new_sidecars(sidecars: List[Path], existed: List[bool]) -> None:
        """Remove the empty -wal and the -shm a read-only open of a WAL file left behind."""
        wal, shm = sidecars
        try:
            if not existed[0] and wal.exists() and wal.stat().st_size == 0:
                wal.unlink()
            if not existed[1] and shm.exists() and not wal.exists():
                shm.unlink()
        except OSError:
            pass

    @staticmethod
    def _check_ours(conn: sqlite3.Connection, where: str) -> bool:
        """True if initialised by us with a schema this ucudnn reads or migrates (1 or
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
        if not _OUR_TABLES <= tables:
            raise CacheError(f"{where}: a ucudnn cache lacking table(s) "
                             f"{sorted(_OUR_TABLES - tables)}; the file was left untouched")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (1, SCHEMA_VERSION):
            raise CacheError(f"{where}: cache schema version {version}, this ucudnn reads "
                             f"version {SCHEMA_VERSION} (and migrates version 1); the file was "
                             "left untouched -- use another --cache file or a newer ucudnn")
        return True

    def _initialise(self) -> None:
        def init(conn):
            # re-checked inside the write lock: another process may have initialised or
            # migrated it
            where = f"benchmark cache {self.path}"
            if not self._check_ours(conn, where):
                for stmt in _SCHEMA.strip().split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                 [("application", APP_NAME),
                                  ("schema_version", str(SCHEMA_VERSION))])
            elif conn.execute("PRAGMA user_version").fetchone()[0] == 1:
                n = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
                for stmt in _MIGRATE_1_2.strip().split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                 [("schema_version", str(SCHEMA_VERSION)),
                                  ("migrated_from_schema", "1"),
                                  ("migrated", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
                                  ("migrated_entries", str(n))])
                log.warning("%s: migrated from schema 1: %d entries kept with timing events5 "
                            "and an unknown workspace cap; they are not used for planning and "
                            "are measured again when needed (Note [Schema migration])", where, n)
        self._write(init)

    # -- transactions ------------------------------------------------------------------------
    def _retry(self, fn):
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not _is_locked(e) or time.monotonic() > deadline:
                    if _is_locked(e):
                        raise CacheError(f"benchmark cache {self.path}: still locked after "
                                         f"{self.timeout:.0f} s ({e})") from None
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def _write(self, body) -> None:
        """Run ``body(conn)`` in one ``BEGIN IMMEDIATE`` transaction, retried while locked."""
        if self.readonly:
            raise CacheError(f"benchmark cache {self.path}: opened read-only "
                             f"({self.readonly_reason}); nothing can be stored")
        conn = self._connection()

        def attempt():
            with self._lock:
                return locked_attempt()

        def locked_attempt():
            conn.execute("BEGIN IMMEDIATE")
            try:
                body(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        self._retry(attempt)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise CacheError(f"benchmark cache {self.path}: already closed")
        return self._conn

    def _read(self, sql: str, params: Sequence = ()) -> list:
        conn = self._connection()
        if not self._has_tables:
            return []

        def attempt():
            with self._lock:
                return conn.execute(sql, params).fetchall()
        return self._retry(attempt)

    # -- reading -----------------------------------------------------------------------------
    @staticmethod
    def _match(key: CacheKey, exact: bool) -> Tuple[str, tuple]:
        """SQL condition and parameters of the entries that answer ``key`` (Note [Workspace
        cap and timing in the key]); ``exact``: only the entries stored under ``key`` itself."""
        if not isinstance(key, CacheKey):
            raise ValueError(f"cache key expected, got {key!r}")
        cond = f"{_KERNEL_WHERE} AND timing = ? AND workspace_cap "
        cond += "= ?" if exact or key.legacy else ">= ?"
        return cond, key.columns()

    def get(self, key: CacheKey, batch: int, *, exact: bool = False) -> Optional[List[AlgoPerf]]:
        """The algorithms measured for ``key`` at ``batch`` (fastest first), or ``None``."""
        return self.get_many(key, [batch], exact=exact).get(batch)

    def get_many(self, key: CacheKey, batches: Iterable[int], *,
                 exact: bool = False) -> Dict[int, List[AlgoPerf]]:
        """``{batch: perfs}`` for the requested batches that have an entry usable for ``key``:
        same kernel and timing, measured with at least ``key.workspace_cap`` offered; of
        several, the largest cap, then the newest (``exact``: only ``key``'s own cap)."""
        wanted = sorted({int(b) for b in batches})
        if not wanted:
            return {}
        cond, params = self._match(key, exact)
        out: Dict[int, List[AlgoPerf]] = {}
        for i in range(0, len(wanted), 500):        # stay below SQLite's parameter limit
            part = wanted[i:i + 500]
            # one statement, one snapshot: the chosen entry and its perfs agree
            rows = self._read(
                "WITH best AS (SELECT id, batch, ROW_NUMBER() OVER (PARTITION BY batch "
                "ORDER BY workspace_cap DESC, created DESC, id DESC) AS rank FROM entries "
                f"WHERE {cond} AND batch IN ({','.join('?' * len(part))})) "
                "SELECT b.batch, p.algo, p.time_ms, p.ws_bytes, p.algo_math FROM best b "
                "LEFT JOIN perfs p ON p.entry = b.id WHERE b.rank = 1",
                params + tuple(part))
            for batch, algo, t, ws, m in rows:
                perfs = out.setdefault(batch, [])
                if algo is not None:
                    perfs.append(AlgoPerf(algo, t, ws, m))
        for perfs in out.values():
            perfs.sort(key=lambda p: (p.time_ms, p.ws_bytes, p.algo, p.math))
        return dict(sorted(out.items()))

    def batches(self, key: CacheKey, *, exact: bool = False) -> List[int]:
        """Micro-batch sizes with an entry usable for ``key`` (``exact``: stored under it)."""
        cond, params = self._match(key, exact)
        return [r[0] for r in self._read(
            f"SELECT DISTINCT batch FROM entries WHERE {cond} ORDER BY batch", params)]

    def keys(self, *, include_legacy: bool = True) -> List[CacheKey]:
        """Every key with at least one entry (each cap and timing its own key), in a stable
        order; ``include_legacy=False`` leaves out the schema-1 entries of unknown cap."""
        rows = self._read("SELECT DISTINCT gpu, cudnn_version, dtype, math, op, shape, "
                          "workspace_cap, timing FROM entries "
                          + ("" if include_legacy else f"WHERE workspace_cap != {UNKNOWN_CAP} ")
                          + "ORDER BY gpu, cudnn_version, dtype, math, op, shape, "
                          "timing, workspace_cap")
        return [CacheKey(g, v, d, m, op, shape_from_key(s), cap, t)
                for g, v, d, m, op, s, cap, t in rows]

    def entries(self, *, include_legacy: bool = True) -> List[Tuple[CacheKey, List[int]]]:
        """``[(key, batches)]`` exactly as stored: what a listing shows."""
        return [(k, self.batches(k, exact=True))
                for k in self.keys(include_legacy=include_legacy)]

    def legacy_count(self) -> int:
        """Entries migrated from schema 1 (unknown cap, never used for planning)."""
        rows = self._read(f"SELECT COUNT(*) FROM entries WHERE workspace_cap = {UNKNOWN_CAP}")
        return rows[0][0] if rows else 0

    def __len__(self) -> int:
        rows = self._read("SELECT COUNT(*) FROM entries")
        return rows[0][0] if rows else 0

    # -- writing -----------------------------------------------------------------------------
    def put(self, key: CacheKey, batch: int, perfs: Iterable[AlgoPerf], repeats: int = 1) -> None:
        """Store (replace) the entry of ``key`` (its exact cap and timing) at ``batch``."""
        self.put_many(key, {batch: perfs}, repeats)

    def put_many(self, key: CacheKey, results: Mapping[int, Iterable[AlgoPerf]],
                 repeats: int = 1) -> None:
        """Store (replace) several batch sizes of one key in one transaction."""
        self._put_entries([(key, b, list(p)) for b, p in results.items()], repeats)

    def drop_legacy(self) -> int:
        """Delete the schema-1 entries of unknown cap; returns how many there were."""
        counted = []

        def body(conn):
            cur = conn.execute(f"DELETE FROM entries WHERE workspace_cap = {UNKNOWN_CAP}")
            counted.append(cur.rowcount)
        self._write(body)
        return counted[0]

    def fill(self, key: CacheKey, sizes: Iterable[int],
             measure: Callable[[List[int]], Mapping[int, List[AlgoPerf]]], repeats: int = 1,
             force: bool = False) -> Dict[int, List[AlgoPerf]]:
        """Entries usable for ``key`` at ``sizes``: the cached ones as they are, the missing
        ones (all of them with ``force``) from ``measure(missing_sizes)``, stored before
        returning.

        What ``measure`` returns is stored under ``key`` with the ``workspace_cap`` and
        ``timing`` attributes of the returned mapping where it has them (as
        :func:`ucudnn.measure.bench.measure_kernel`'s result does), so a measurement offered
        less than ``key.workspace_cap`` (memory pressure) is stored as such -- and returned, as
        the best this GPU offers now, but not found by the next lookup for ``key``. A timing
        other than ``key.timing`` is an error. On a read-only cache nothing is stored."""
        sizes = sorted(set(sizes))
        have = {} if force else self.get_many(key, sizes)
        missing = [b for b in sizes if b not in have]
        if missing:
            raw = measure(missing)
            cap = getattr(raw, "workspace_cap", None)
            timing = getattr(raw, "timing", None)
            if timing is not None and timing != key.timing:
                raise ValueError(f"benchmark of {key.op} was timed {timing!r}, the cache key "
                                 f"asks for {key.timing!r}")
            stored = key if cap is None else replace(key, workspace_cap=int(cap))
            if cap is not None and cap < key.workspace_cap:
                log.warning("%s %s: cudnnFind was offered %s, less than the %s asked for "
                            "(memory pressure); stored as such, not reused for that ask",
                            key.gpu, key.op, format_size(int(cap)),
                            format_size(key.workspace_cap))
            fresh = {b: list(raw[b]) for b in missing if b in raw}
            if self.readonly:
                log.warning("benchmark cache %s is read-only (%s): %d fresh measurement(s) "
                            "not stored", self.path, self.readonly_reason, len(fresh))
            else:
                self.put_many(stored, fresh, repeats)
            have.update(fresh)
        return {b: have[b] for b in sizes if b in have}

    def _put_entries(self, entries: Sequence[Tuple[CacheKey, int, List[AlgoPerf]]],
                     repeats: int) -> None:
        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
        for key, batch, perfs in entries:
            if not isinstance(key, CacheKey):
                raise ValueError(f"cache key expected, got {key!r}")
            if key.legacy:
                raise ValueError("cache key field 'workspace_cap': entries of unknown cap come "
                                 "only from migrating a schema-1 file; store the cap offered")
            if not isinstance(batch, int) or batch < 1:
                raise ValueError(f"batch must be a positive integer, got {batch!r}")
            for p in perfs:
                if not isinstance(p, AlgoPerf):
                    raise ValueError(f"AlgoPerf expected, got {p!r}")
        now = time.time()

        def body(conn):
            for key, batch, perfs in entries:
                cols = key.columns() + (batch,)
                conn.execute(f"DELETE FROM entries WHERE {_KERNEL_WHERE} AND timing = ? AND "
                             "workspace_cap = ? AND batch = ?", cols)
                cur = conn.execute(
                    "INSERT INTO entries (gpu, cudnn_version, dtype, math, op, shape, timing, "
                    "workspace_cap, batch, repeats, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", cols + (repeats, now))
                conn.executemany(
                    "INSERT INTO perfs (entry, algo, time_ms, ws_bytes, algo_math) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [(cur.lastrowid, p.algo, float(p.time_ms), int(p.ws_bytes), p.math)
                     for p in perfs])
        self._write(body)

    # -- tables ------------------------------------------------------------------------------
    @staticmethod
    def _layer_map(layers) -> Dict[str, object]:
        if isinstance(layers, Mapping):
            return dict(layers)
        return {l.name: l for l in layers}

    def import_table(self, rows: Iterable[BenchRow], layers, *, gpu: str, cudnn_version: int,
                     dtype: str = "float32", math: str = "default", repeats: int = 1,
                     workspace_cap: int = DEFAULT_WORKSPACE_CAP,
                     timing: str = DEFAULT_TIMING) -> int:
        """Store a benchmark table; ``layers`` ({name: LayerSpec} or a list) gives the kernels
        (:meth:`ConvShape.from_layer`, Caffe's kernel of the layer). ``workspace_cap`` and
        ``timing``: what the table was measured with (a table does not say; the defaults are
        the core's defaults).

        Every (layer, op, batch) of the table replaces its cache entry; all in one transaction.
        Returns the number of entries written.
        """
        by_name = self._layer_map(layers)
        grouped: Dict[Tuple[str, str, int], List[AlgoPerf]] = {}
        for r in rows:
            grouped.setdefault((r.layer, r.op, r.batch), []).append(r.perf)
        unknown = sorted({layer for layer, _, _ in grouped if layer not in by_name})
        if unknown:
            raise ValueError(f"table layer(s) {unknown} are not in the layer list "
                             f"({', '.join(sorted(by_name)) or 'empty'})")
        shapes = {name: ConvShape.from_layer(l) for name, l in by_name.items()}
        entries = [(CacheKey(gpu, cudnn_version, dtype, math, op, shapes[layer], workspace_cap,
                             timing), batch, perfs)
                   for (layer, op, batch), perfs in sorted(grouped.items())]
        self._put_entries(entries, repeats)
        return len(entries)

    def export_rows(self, layers, *, gpu: str, cudnn_version: int, dtype: str = "float32",
                    math: str = "default", ops: Sequence[str] = OPS,
                    workspace_cap: int = DEFAULT_WORKSPACE_CAP,
                    timing: str = DEFAULT_TIMING) -> List[BenchRow]:
        """Every cached measurement of ``layers`` usable for a lookup with ``workspace_cap``
        and ``timing``, as table rows (layer names from ``layers``)."""
        rows: List[BenchRow] = []
        for name, layer in self._layer_map(layers).items():
            shape = ConvShape.from_layer(layer)
            for op in ops:
                key = CacheKey(gpu, cudnn_version, dtype, math, op, shape, workspace_cap, timing)
                for batch, perfs in self.get_many(key, self.batches(key)).items():
                    rows += [BenchRow(name, op, batch, p.algo, p.time_ms, p.ws_bytes, p.math)
                             for p in perfs]
        return rows

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    def __enter__(self) -> "BenchCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        ro = ", readonly=True" if self.readonly else ""
        return f"BenchCache({str(self.path)!r}{ro})"
