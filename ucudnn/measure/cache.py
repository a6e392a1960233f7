"""SQLite cache of cuDNN benchmark results, shared by processes and runs.

One entry is what cudnnFind measured for one kernel at one micro-batch size: the list of
algorithms that ran (:class:`~ucudnn.plan.table.AlgoPerf`). It is keyed by :class:`CacheKey` (GPU
model, cuDNN version, dtype, math mode, operation, kernel geometry) plus the micro-batch size, so
a table measured on one GPU or library version never plans another.

Note [Cache file safety]
    The file may be shared by several processes (a Caffe run benchmarking while ``ucudnn bench``
    fills the same cache): WAL journal, a busy timeout, and every write inside one
    ``BEGIN IMMEDIATE`` transaction, retried while another writer holds the lock. A file that is
    not ours -- not SQLite, corrupted, or another application's database -- raises
    :class:`CacheError` and is never written to: it is validated through a read-only connection
    before the read-write one is opened. An empty (0-byte) file or an SQLite file without any
    table is initialised.
"""
from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..plan.conv import ConvShape
from ..vocab import DTYPES, MATH_MODES
from ..plan.table import OPS, AlgoPerf, BenchRow

__all__ = ["CacheKey", "BenchCache", "CacheError", "default_cache_path",
           "APPLICATION_ID", "SCHEMA_VERSION"]

#: ``PRAGMA application_id`` of ucudnn caches ("ucNN").
APPLICATION_ID = 0x75634E4E
SCHEMA_VERSION = 1
APP_NAME = "ucudnn-bench-cache"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_OUR_TABLES = {"meta", "entries", "perfs"}

_SCHEMA = """
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


class CacheError(RuntimeError):
    """The cache file cannot be used (not ours, corrupted, locked too long); names the path."""


@dataclass(frozen=True)
class CacheKey:
    """What a benchmark depends on, except the micro-batch size (a separate column)."""
    gpu: str
    cudnn_version: int
    dtype: str
    math: str
    op: str
    shape: ConvShape

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

    def columns(self) -> Tuple[str, int, str, str, str, str]:
        return (self.gpu, self.cudnn_version, self.dtype, self.math, self.op, self.shape.key())

    def text(self) -> str:
        """Stable one-line form, e.g. for listings."""
        return "|".join(str(c) for c in self.columns())


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


class BenchCache:
    """The benchmark cache at ``path`` (see Note [Cache file safety])."""

    def __init__(self, path: Union[str, os.PathLike, None] = None, timeout: float = 60.0):
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self.timeout = float(timeout)
        self._conn: Optional[sqlite3.Connection] = None
        self._lock = threading.RLock()     # one connection, possibly used from several threads
        if self.path.is_dir():
            raise CacheError(f"benchmark cache {self.path}: is a directory, not a file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheError(f"benchmark cache {self.path}: cannot create its folder: {e}") from None
        if self.path.exists() and self.path.stat().st_size > 0:
            sidecars = [Path(f"{self.path}{s}") for s in ("-wal", "-shm")]
            existed = [p.exists() for p in sidecars]
            try:
                self._validate_existing()
            except CacheError:
                self._remove_new_sidecars(sidecars, existed)
                raise
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=self.timeout,
                                         isolation_level=None, check_same_thread=False)
            self._conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._retry(lambda: self._conn.execute("PRAGMA journal_mode = WAL").fetchone())
            # WAL + NORMAL: a crash may lose the last commits, never consistency
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._initialise()
        except sqlite3.DatabaseError as e:
            self.close()
            raise CacheError(f"benchmark cache {self.path}: {e}") from None
        except BaseException:
            self.close()
            raise

    # -- opening -----------------------------------------------------------------------------
    def _validate_existing(self) -> None:
        """Check an existing non-empty file through a read-only connection; never writes."""
        where = f"benchmark cache {self.path}"
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError as e:
            raise CacheError(f"{where}: cannot read: {e}") from None
        if head != _SQLITE_MAGIC:
            raise CacheError(f"{where}: not an SQLite database (not a ucudnn benchmark cache); "
                             "the file was left untouched -- move it away or pass another --cache")
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as e:
            raise CacheError(f"{where}: cannot open: {e}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
            if check != ["ok"]:
                raise CacheError(f"{where}: the database is corrupted ({'; '.join(check[:3])}); "
                                 "the file was left untouched")
            self._check_ours(conn, where)
        except sqlite3.DatabaseError as e:
            raise CacheError(f"{where}: the database is corrupted or unreadable ({e}); "
                             "the file was left untouched") from None
        finally:
            conn.close()

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
        """True if initialised by us, False if an empty SQLite database; else CacheError."""
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
        if version != SCHEMA_VERSION:
            raise CacheError(f"{where}: cache schema version {version}, this ucudnn reads "
                             f"version {SCHEMA_VERSION}; use another --cache file")
        return True

    def _initialise(self) -> None:
        def init(conn):
            # re-checked inside the write lock: another process may have initialised it
            if not self._check_ours(conn, f"benchmark cache {self.path}"):
                for stmt in _SCHEMA.strip().split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                 [("application", APP_NAME),
                                  ("schema_version", str(SCHEMA_VERSION))])
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

        def attempt():
            with self._lock:
                return conn.execute(sql, params).fetchall()
        return self._retry(attempt)

    # -- reading -----------------------------------------------------------------------------
    def get(self, key: CacheKey, batch: int) -> Optional[List[AlgoPerf]]:
        """The algorithms measured for ``key`` at ``batch`` (fastest first), or ``None``."""
        return self.get_many(key, [batch]).get(batch)

    def get_many(self, key: CacheKey, batches: Iterable[int]) -> Dict[int, List[AlgoPerf]]:
        """``{batch: perfs}`` for the requested batches present in the cache."""
        wanted = sorted({int(b) for b in batches})
        if not wanted:
            return {}
        out: Dict[int, List[AlgoPerf]] = {}
        for i in range(0, len(wanted), 500):        # stay below SQLite's parameter limit
            part = wanted[i:i + 500]
            rows = self._read(
                "SELECT e.batch, p.algo, p.time_ms, p.ws_bytes, p.algo_math FROM entries e "
                "LEFT JOIN perfs p ON p.entry = e.id "
                "WHERE e.gpu = ? AND e.cudnn_version = ? AND e.dtype = ? AND e.math = ? "
                "AND e.op = ? AND e.shape = ? "
                f"AND e.batch IN ({','.join('?' * len(part))})",
                key.columns() + tuple(part))
            for batch, algo, t, ws, m in rows:
                perfs = out.setdefault(batch, [])
                if algo is not None:
                    perfs.append(AlgoPerf(algo, t, ws, m))
        for perfs in out.values():
            perfs.sort(key=lambda p: (p.time_ms, p.ws_bytes, p.algo, p.math))
        return dict(sorted(out.items()))

    def batches(self, key: CacheKey) -> List[int]:
        """Micro-batch sizes cached for ``key``."""
        return [r[0] for r in self._read(
            "SELECT batch FROM entries WHERE gpu = ? AND cudnn_version = ? AND dtype = ? "
            "AND math = ? AND op = ? AND shape = ? ORDER BY batch", key.columns())]

    def keys(self) -> List[CacheKey]:
        """Every key with at least one entry, in a stable order."""
        rows = self._read("SELECT DISTINCT gpu, cudnn_version, dtype, math, op, shape "
                          "FROM entries ORDER BY gpu, cudnn_version, dtype, math, op, shape")
        return [CacheKey(g, v, d, m, op, shape_from_key(s)) for g, v, d, m, op, s in rows]

    def __len__(self) -> int:
        return self._read("SELECT COUNT(*) FROM entries")[0][0]

    # -- writing -----------------------------------------------------------------------------
    def put(self, key: CacheKey, batch: int, perfs: Iterable[AlgoPerf], repeats: int = 1) -> None:
        """Store (replace) the entry of ``key`` at ``batch`` in one transaction."""
        self.put_many(key, {batch: perfs}, repeats)

    def put_many(self, key: CacheKey, results: Mapping[int, Iterable[AlgoPerf]],
                 repeats: int = 1) -> None:
        """Store (replace) several batch sizes of one key in one transaction."""
        self._put_entries([(key, b, list(p)) for b, p in results.items()], repeats)

    def fill(self, key: CacheKey, sizes: Iterable[int],
             measure: Callable[[List[int]], Mapping[int, List[AlgoPerf]]], repeats: int = 1,
             force: bool = False) -> Dict[int, List[AlgoPerf]]:
        """Entries of ``key`` at ``sizes``: the cached ones as they are, the missing ones (all
        of them with ``force``) from ``measure(missing_sizes)``, stored before returning."""
        sizes = sorted(set(sizes))
        have = {} if force else self.get_many(key, sizes)
        missing = [b for b in sizes if b not in have]
        if missing:
            fresh = measure(missing)
            fresh = {b: list(fresh[b]) for b in missing if b in fresh}
            self.put_many(key, fresh, repeats)
            have.update(fresh)
        return {b: have[b] for b in sizes if b in have}

    def _put_entries(self, entries: Sequence[Tuple[CacheKey, int, List[AlgoPerf]]],
                     repeats: int) -> None:
        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
        for key, batch, perfs in entries:
            if not isinstance(key, CacheKey):
                raise ValueError(f"cache key expected, got {key!r}")
            if not isinstance(batch, int) or batch < 1:
                raise ValueError(f"batch must be a positive integer, got {batch!r}")
            for p in perfs:
                if not isinstance(p, AlgoPerf):
                    raise ValueError(f"AlgoPerf expected, got {p!r}")
        now = time.time()

        def body(conn):
            for key, batch, perfs in entries:
                cols = key.columns() + (batch,)
                conn.execute("DELETE FROM entries WHERE gpu = ? AND cudnn_version = ? AND "
                             "dtype = ? AND math = ? AND op = ? AND shape = ? AND batch = ?", cols)
                cur = conn.execute(
                    "INSERT INTO entries (gpu, cudnn_version, dtype, math, op, shape, batch, "
                    "repeats, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", cols + (repeats, now))
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
                     dtype: str = "float32", math: str = "default", repeats: int = 1) -> int:
        """Store a benchmark table; ``layers`` ({name: LayerSpec} or a list) gives the shapes.

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
        entries = [(CacheKey(gpu, cudnn_version, dtype, math, op, shapes[layer]), batch, perfs)
                   for (layer, op, batch), perfs in sorted(grouped.items())]
        self._put_entries(entries, repeats)
        return len(entries)

    def export_rows(self, layers, *, gpu: str, cudnn_version: int, dtype: str = "float32",
                    math: str = "default", ops: Sequence[str] = OPS) -> List[BenchRow]:
        """Every cached measurement of ``layers`` as table rows (layer names from ``layers``)."""
        rows: List[BenchRow] = []
        for name, layer in self._layer_map(layers).items():
            shape = ConvShape.from_layer(layer)
            for op in ops:
                key = CacheKey(gpu, cudnn_version, dtype, math, op, shape)
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
        return f"BenchCache({str(self.path)!r})"
