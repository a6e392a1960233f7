"""The cache file: where it is, opening it (validation first, then read-write or read-only),
its journal mode, the transactions every read and write goes through, and closing it.

Note [Cache file safety]
    The file is shared by processes (Caffe's GPUs benchmarking into one cache while ``ucudnn
    bench`` fills it) and by users (a cluster's shared cache, Note [A cache shared by a
    cluster]). Every write is one ``BEGIN IMMEDIATE`` transaction, retried while another
    writer holds the lock (then CacheError naming the file, after ``timeout`` seconds); a
    lookup is one SQL statement, one snapshot, so a concurrent writer replacing an entry is
    seen either before or after, never half.

    The journal is SQLite's rollback journal (``journal_mode = DELETE``, ``synchronous =
    FULL``), not WAL. A WAL file cannot be read without its -wal and -shm files: a reader
    creates them where they are absent and, not being able to write the cache, cannot remove
    them, so another user's ``cache list`` leaves files its owner can no longer write (and a
    folder the reader cannot write makes the cache unreadable to it). WAL does not work on
    network file systems either (its index is shared memory). With the rollback journal a
    reader only takes a shared lock on the file and creates nothing; a writer's -journal lives
    for one transaction; a reader delays a commit only while its one statement runs. The
    cost is in the writes: a commit creates, syncs and deletes the journal and syncs the file
    (scripts/cache_journal.py: puts of 8 algorithms into a fresh cache; medians of 5 runs on 2
    cores and a virtual disk where those file operations took 12 ms; rollback journal vs WAL):

        1 writer, 200 puts             put 19.7 vs 0.08 ms; lookup 0.17 vs 0.04 ms
        4 writers at once, 200 puts    wall 8.7 vs 0.29 s; put 10.2 vs 0.09 ms (p95 134 vs
          each, back to back             3.4 ms), longest 1.4 s vs 48 ms (waiting for the lock)
        the same, 2 readers listing    wall 8.0 vs 0.42 s; longest put 1.0 s vs 83 ms
          the cache in a loop
        4 writers pausing 20 ms after  wall 9.4 vs 4.4 s (4.0 s of it the pauses); longest
          each put, 1 reader listing     put 275 vs 19 ms

    The cost follows the disk: on the same machine at a time its disk synced faster, the one
    writer's put took 0.84 ms. In use a put follows the measurement of one kernel at all its
    sizes, stored in one commit by ``fill`` (cold ResNet-18 on the H200: 28.8 s for 32
    kernels, 0.9 s each), so the rollback journal adds about 2 % there even on the slow disk,
    and the long waits of writers back to back (one takes the lock again before a waiting one
    polls) do not arise. Waiting connections poll every few milliseconds (``_retry``) rather than sleep in
    SQLite's busy handler, whose sleeps of up to 100 ms let other writers overtake a waiting
    one for seconds.

    A file in WAL mode (written by an older ucudnn) is switched on the first read-write open
    that has it to itself; while another process holds it open, both keep WAL.

    A file that is not ours -- not SQLite, corrupted, or another application's database --
    raises CacheError and is never written to: it is validated through a read-only connection
    before a read-write one is opened. An empty (0-byte) file or an SQLite file without any
    table is initialised. A FIFO, a device or a socket is refused without being opened.

    A write that fails otherwise -- a full disk, an I/O error -- is rolled back (the journal
    goes with the transaction) and raises CacheError naming the file: the file is as it was.
    A first open that fails so removes the empty file (and journal) it created, and a cache
    created by an open that a failure leaves (``with BenchCache(...)``) holding nothing is
    removed as the ``with`` ends: a failed command leaves no cache it made behind.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence, Union

from .access import (HotJournal, connect_readonly, foreign_sidecars, in_wal_mode, is_locked,
                     is_unwritable, roll_back, text_or_bytes, write_refusal)
from .schema import (BWD_FILTER_BETA_1_SCHEMA, GRAPH_3D_WHERE, GRAPH_WITHIN_CAP_SCHEMA,
                     SCHEMA_1_AS_2, SCHEMA_VERSION, SLAB_SCHEMA, SQLITE_MAGIC, CacheError, beta_0_where, check_ours, columns, initialise)

__all__ = ["CacheFile", "default_cache_path", "JOURNAL_MODE"]

log = logging.getLogger("ucudnn")

#: The journal of our files (Note [Cache file safety]).
JOURNAL_MODE = "DELETE"


def default_cache_path() -> Path:
    """``$UCUDNN_CACHE`` or ``~/.cache/ucudnn/bench.sqlite``."""
    env = os.environ.get("UCUDNN_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "ucudnn" / "bench.sqlite"


class CacheFile:
    """The open cache file at ``path`` (default :func:`default_cache_path`).

    ``readonly``: ``True`` opens read-only; ``None`` (default) read-write, falling back to
    read-only where this process cannot write the file (Note [Read-only caches]); ``False``
    never falls back. ``create``: an absent file is created (with its folders); without it, or
    read-only, an absent file raises CacheError ``no cache at PATH`` and nothing is created.
    ``self.readonly`` says how it was opened, ``self.readonly_reason`` why; ``warn``: log
    that reason where this process could not have written the file."""

    def __init__(self, path: Union[str, os.PathLike, None] = None, timeout: float = 60.0, *,
                 readonly: Optional[bool] = None, create: bool = True, warn: bool = True):
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self.timeout = float(timeout)
        self.readonly = bool(readonly)
        self.readonly_reason: Optional[str] = None
        self._conn: Optional[sqlite3.Connection] = None
        self._has_tables = True            # False: a read-only, empty (uninitialised) file
        self.schema = SCHEMA_VERSION        # the file's schema (older only when read-only)
        self._lock = threading.RLock()     # one connection, possibly used from several threads
        self._warn = warn
        self.created = False                # this open created the file
        if self.path.is_dir():
            raise CacheError(f"{self._where}: is a directory, not a file")
        if self.path.exists() and not self.path.is_file():
            # a FIFO would block the open, a device be read or written as a database
            raise CacheError(f"{self._where}: not a regular file (a FIFO, a device or a "
                             "socket); the file was left untouched")
        exists = self.path.exists()
        if not exists and (readonly or not create):
            raise CacheError(f"no cache at {self.path} (nothing was created: only commands "
                             "that store benchmarks create one)")
        refusal = write_refusal(self.path) if exists else None
        conn, immutable, version = self._validated(refusal is None) if exists else (None, False, 0)
        if readonly:
            self.readonly_reason = refusal or "asked for"
        elif refusal is not None:
            if readonly is False:
                if conn is not None:
                    conn.close()
                raise CacheError(f"{self._where}: cannot be written: {refusal}")
            self.readonly, self.readonly_reason = True, refusal
        else:
            if conn is not None:
                conn.close()
                conn = None
            if self._try_readwrite(exists, strict=readonly is False):
                self.created = not exists
                return
        self._finish_readonly(conn, immutable, version, may_write=refusal is None)

    @property
    def _where(self) -> str:
        return f"benchmark cache {self.path}"

    # -- opening -----------------------------------------------------------------------------
    def _validated(self, may_write: bool):
        """(read-only connection, immutable, schema version) of the existing file, validated;
        (None, False, 0) for an empty (0-byte) file."""
        if self.path.stat().st_size == 0:
            return None, False, 0
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as e:
            raise CacheError(f"{self._where}: cannot read: {e}") from None
        if head != SQLITE_MAGIC:
            raise CacheError(f"{self._where}: not an SQLite database (not a ucudnn benchmark "
                             "cache); the file was left untouched -- move it away or pass "
                             "another --cache")
        sidecars = [Path(f"{self.path}{s}") for s in ("-wal", "-shm")]
        existed = [p.exists() for p in sidecars]
        try:
            conn, immutable = connect_readonly(self.path, self.timeout, may_write=may_write,
                                               where=self._where)
        except HotJournal:
            if not may_write:
                raise
            roll_back(self.path, self.timeout, self._where)
            conn, immutable = connect_readonly(self.path, self.timeout, may_write=may_write,
                                               where=self._where)
        try:
            return conn, immutable, self._validate(conn)
        except BaseException:
            conn.close()
            self._remove_new_sidecars(sidecars, existed)
            raise

    def _try_readwrite(self, exists: bool, strict: bool) -> bool:
        """Open read-write; False where SQLite refuses to write an existing file and
        ``strict`` is not set (then ``self.readonly`` and its reason are set)."""
        try:
            self._open_readwrite()
            return True
        except sqlite3.OperationalError as e:
            self.close()
            if not exists and not is_locked(e):
                self._remove_created()
            folder = self.path.parent
            if not exists and folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
                raise CacheError(f"{self._where}: cannot create it: folder {folder} not "
                                 "writable") from None
            if strict or not exists or not is_unwritable(e):
                hint = foreign_sidecars(self.path) if exists and is_unwritable(e) else ""
                raise CacheError(f"{self._where}: {e}{hint}") from None
            self.readonly = True
            self.readonly_reason = f"cannot write: {e}{foreign_sidecars(self.path)}"
            return False
        except sqlite3.DatabaseError as e:
            self.close()
            if not exists:
                self._remove_created()
            raise CacheError(f"{self._where}: {e}") from None
        except BaseException:
            self.close()
            raise

    def _remove_created(self) -> None:
        """Remove the empty file (and journal) that a failed first open created: a command
        that fails leaves no 0-byte cache behind."""
        for p in (Path(f"{self.path}-journal"), self.path):
            try:
                if p.stat().st_size == 0:
                    p.unlink()
            except OSError:
                pass

    def _finish_readonly(self, conn: Optional[sqlite3.Connection], immutable: bool,
                         version: int, may_write: bool) -> None:
        if conn is None:
            conn, immutable, version = self._validated(may_write)
            if conn is None:
                conn, immutable = connect_readonly(self.path, self.timeout,
                                                   may_write=may_write, where=self._where)
        if version == 1:
            try:
                conn.execute(SCHEMA_1_AS_2)         # in memory: the file is not written
            except sqlite3.Error as e:
                conn.close()
                raise CacheError(f"{self._where}: schema 1, read-only: cannot read it as "
                                 f"schema 2 ({e}); the file was left untouched") from None
            if self._warn:
                log.warning("%s: schema 1, read-only: read as it is, its entries with an "
                            "unknown workspace cap, never used for planning (Note [Schema "
                            "migration])", self._where)
        conn.execute("PRAGMA busy_timeout = 0")            # _retry waits
        self._conn, self._has_tables = conn, version != 0
        self.schema = version or SCHEMA_VERSION
        if 3 <= version < GRAPH_WITHIN_CAP_SCHEMA and self._warn and conn.execute(
                "SELECT COUNT(*) FROM entries WHERE family = 'graph'").fetchone()[0]:
            why = ("the check of their results" if version == 3 else
                   "the search within the workspace cap")
            log.warning("%s: schema %d, read-only: its graph-family entries predate %s and "
                        "are not read (Note [Schema migration])", self._where, version, why)
        if version == SLAB_SCHEMA - 1 and self._warn and conn.execute(
                f"SELECT COUNT(*) FROM entries WHERE {GRAPH_3D_WHERE}").fetchone()[0]:
            log.warning("%s: schema %d, read-only: its 3-D graph-family entries were measured "
                        "without slab choices and are not read (Note [Schema migration])",
                        self._where, version)
        if 2 <= version < BWD_FILTER_BETA_1_SCHEMA and self._warn and conn.execute(
                "SELECT COUNT(*) FROM entries WHERE "
                + beta_0_where(columns(version).family)).fetchone()[0]:
            log.warning("%s: schema %d, read-only: its legacy backward-filter entries were "
                        "timed with beta 0 and are not read (Note [Schema migration])",
                        self._where, version)
        if immutable and not may_write:
            self.readonly_reason += ("; read as immutable: a WAL-mode file whose -shm this "
                                     "user may not create")
        if self._warn and self.readonly_reason != "asked for":
            log.warning("%s: read-only: %s", self._where, self.readonly_reason)

    def _validate(self, conn: sqlite3.Connection) -> int:
        """Check an existing non-empty file through the read-only ``conn``; never writes.
        Returns its schema version (0: an empty SQLite database). One read transaction: every
        check sees the same state of a file another process may be initialising."""
        where = self._where
        try:
            conn.execute("BEGIN")
            try:
                check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
                if check != ["ok"]:
                    raise CacheError(f"{where}: the database is corrupted "
                                     f"({'; '.join(check[:3])}); the file was left untouched")
                if not check_ours(conn, where):
                    return 0
                return conn.execute("PRAGMA user_version").fetchone()[0]
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.OperationalError as e:
            if is_locked(e):
                raise CacheError(f"{where}: still locked after {self.timeout:.0f} s "
                                 f"({e})") from None
            raise CacheError(f"{where}: the database is corrupted or unreadable ({e}); "
                             "the file was left untouched") from None
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
            # UnicodeDecodeError: SQLite's own message, about a damaged name, is not UTF-8
            raise CacheError(f"{where}: the database is corrupted or unreadable ({e}); "
                             "the file was left untouched") from None

    def _open_readwrite(self) -> None:
        if not self.path.parent.exists():
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise CacheError(f"{self._where}: cannot create its folder: {e}") from None
        self._conn = sqlite3.connect(str(self.path), timeout=0, isolation_level=None,
                                     check_same_thread=False)
        self._conn.text_factory = text_or_bytes
        self._conn.execute("PRAGMA busy_timeout = 0")      # _retry waits
        self._conn.execute("PRAGMA foreign_keys = ON")
        self._set_journal_mode()
        # a first write transaction: creates or migrates the tables where needed, and finds
        # out now whether SQLite can write the file at all
        self._write(lambda conn: initialise(conn, self._where), opening=True)
        self.schema = SCHEMA_VERSION

    def _set_journal_mode(self) -> None:
        """Our journal mode (Note [Cache file safety]); a WAL file that another connection
        holds open stays WAL for now (leaving WAL needs the file to itself)."""
        conn = self._connection()

        def switch():
            return conn.execute(f"PRAGMA journal_mode = {JOURNAL_MODE}").fetchone()[0]
        if not in_wal_mode(self.path):
            mode = self._retry(switch)
        else:
            try:
                mode = switch()
            except sqlite3.OperationalError as e:
                if not is_locked(e):
                    raise
                mode = self._retry(lambda: conn.execute("PRAGMA journal_mode").fetchone()[0])
                log.debug("%s: stays in %s mode while another process has it open",
                          self._where, mode)
        # in WAL mode NORMAL loses at most the last commits in a crash, never consistency
        conn.execute(f"PRAGMA synchronous = {'NORMAL' if mode.lower() == 'wal' else 'FULL'}")

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

    # -- transactions ------------------------------------------------------------------------
    def _retry(self, fn):
        """``fn()``, tried again while another connection holds the lock, up to ``timeout``
        seconds. The connection's own busy timeout is 0: SQLite's busy handler sleeps up to
        100 ms at a time, long enough for other writers to overtake a waiting one again and
        again (Note [Cache file safety]); this polls every few milliseconds."""
        deadline = time.monotonic() + self.timeout
        delay = 0.0005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not is_locked(e) or time.monotonic() > deadline:
                    if is_locked(e):
                        raise CacheError(f"{self._where}: still locked after "
                                         f"{self.timeout:.0f} s ({e})") from None
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.004)

    def _write(self, body, *, opening: bool = False) -> None:
        """Run ``body(conn)`` in one ``BEGIN IMMEDIATE`` transaction, retried while locked.
        Where SQLite cannot write the file: CacheError, or with ``opening`` its
        OperationalError (the open then falls back to read-only)."""
        if self.readonly:
            raise CacheError(f"{self._where}: opened read-only ({self.readonly_reason}); "
                             "nothing can be stored")
        conn = self._connection()

        def attempt():
            with self._lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    body(conn)
                    # readers still hold the file: the commit stays pending (no new reader
                    # starts) and is tried again, rather than rolled back
                    self._retry(lambda: conn.execute("COMMIT"))
                except BaseException:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error as e:      # the next open rolls it back
                            log.debug("%s: rollback failed: %s", self._where, e)
                    raise
        try:
            self._retry(attempt)
        except sqlite3.OperationalError as e:
            if opening:
                raise
            # a full disk, an I/O error, a file or folder this process may not write: the
            # transaction was rolled back, the file is as it was
            hint = foreign_sidecars(self.path) if is_unwritable(e) else ""
            raise CacheError(f"{self._where}: cannot write: {e}{hint}; nothing was "
                             "stored") from None
        except sqlite3.DatabaseError as e:
            raise CacheError(f"{self._where}: cannot write: {e}; nothing was "
                             "stored") from None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise CacheError(f"{self._where}: already closed")
        return self._conn

    def _read(self, sql: str, params: Sequence = ()) -> list:
        conn = self._connection()
        if not self._has_tables:
            return []

        def attempt():
            with self._lock:
                return conn.execute(sql, params).fetchall()
        try:
            return self._retry(attempt)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
            # a page that the open's quick_check passed and a read finds damaged
            raise CacheError(f"{self._where}: the database is corrupted or unreadable ({e}); "
                             "the file was left untouched") from None

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is not None and self.created:
                self._discard_if_empty()
        finally:
            self.close()

    def _discard_if_empty(self) -> None:
        """Remove the file this open created where it still holds nothing: a command that
        fails (a refused import, a full disk) leaves no cache it made behind."""
        conn = self._conn
        if conn is None:
            return
        try:
            with self._lock:
                held = conn.execute("SELECT (SELECT COUNT(*) FROM entries) + "
                                    "(SELECT COUNT(*) FROM refused)").fetchone()[0]
        except sqlite3.Error:
            return
        if held:
            return
        self.close()
        try:
            self.path.unlink()
        except OSError:
            return
        self._remove_created()                  # its empty journal, if any

    def __repr__(self) -> str:
        ro = ", readonly=True" if self.readonly else ""
        return f"{type(self).__name__}({str(self.path)!r}{ro})"
