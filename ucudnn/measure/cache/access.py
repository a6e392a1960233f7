"""Who may write a cache file, and reading one without writing: the permission check done
before opening, the read-only connection, and SQLite's error codes for both.

Note [Read-only caches]
    A cache on shared storage is often one this user can read but not write: the file belongs
    to another user, or its folder is not writable (SQLite then cannot create the journal a
    write needs), or the file system is read-only. ``BenchCache(path)`` checks this before
    opening (:func:`write_refusal`) and opens such a file read-only, logging a warning that
    names the file and why (``benchmark cache /s/c.sqlite: read-only: folder /s not
    writable``); ``cache.readonly`` is then True and ``cache.readonly_reason`` says why. Where
    the check passes and SQLite still refuses to write (an ACL, a root-squashed mount, a -shm
    file of another user), it falls back the same way with SQLite's message. ``readonly=True``
    opens read-only whatever the permissions (planning that will not benchmark does; the
    warning then comes only where the user could not have written anyway); ``readonly=False``
    refuses to fall back. Listing, lookups and planning work on a read-only cache; writes raise
    CacheError; ``BenchCache.fill`` measures what is missing and returns it without storing it
    (with a warning).

    A reader leaves nothing behind. In the rollback-journal mode of our files (Note [Cache file
    safety]) a read-only connection (``mode=ro``) takes shared locks on the file and creates no
    file. A file still in WAL mode (written by an older ucudnn, or by a writer that found it
    held open by another process) needs a -shm file even to be read; a reader that may not
    write the file or its folder never creates one (it would belong to the reader and lock its
    owner out): with a -shm present (a writer has the file open) it reads through it, else with
    ``immutable=1``, which reads the file as it is -- safe because without a -shm no process
    has the file open in WAL mode, and the next read-write open converts it. A reader that may
    write the file reads it so too, where no -wal holds frames (a -wal left by a crash needs
    the -shm to be read), so that a reading command leaves no file. Where SQLite cannot
    create the -shm (``SQLITE_READONLY_DIRECTORY``), the same ``immutable=1`` read follows. A
    hot journal (a write interrupted by a crash) is rolled back by the next open of a process
    that can write the file (:func:`roll_back`, only in a file with our application id); a
    reader is refused with what to do rather than read half a transaction.

    Absent files: only commands that store benchmarks create a cache (``create=True``, the
    default, which makes the folders too); ``create=False`` or ``readonly=True`` raise
    CacheError ``no cache at PATH`` and create nothing (``cache list``, ``cache export``,
    planning from a cache).
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Optional, Tuple

from .schema import APPLICATION_ID, CacheError

__all__ = ["text_or_bytes", "write_refusal", "connect_readonly", "is_locked", "is_unwritable",
           "foreign_sidecars", "in_wal_mode", "HotJournal", "roll_back"]


def _error_name(e: sqlite3.Error) -> str:
    return getattr(e, "sqlite_errorname", "") or ""      # Python >= 3.11


def is_locked(e: sqlite3.OperationalError) -> bool:
    """Another connection holds the lock (SQLITE_BUSY, SQLITE_LOCKED)."""
    name, msg = _error_name(e), str(e).lower()
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in msg or "busy" in msg


def is_unwritable(e: sqlite3.OperationalError) -> bool:
    """SQLite could not write or create a file: a read-only file, folder or file system, or a
    -wal/-shm/-journal it may not open."""
    name, msg = _error_name(e), str(e).lower()
    return (name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM"))
            or "readonly" in msg or "read-only" in msg or "unable to open" in msg)


def write_refusal(path: Path) -> Optional[str]:
    """Why this process cannot write the existing cache file ``path`` (Note [Read-only
    caches]), or None if it can."""
    folder = path.resolve().parent         # where SQLite puts the journal
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return f"read-only file system at {folder}"
    except OSError:
        pass
    why = []
    if not os.access(path, os.W_OK):
        why.append(f"file {path} not writable")
    if not os.access(folder, os.W_OK | os.X_OK):
        why.append(f"folder {folder} not writable")
    return ", ".join(why) or None


def in_wal_mode(path: Path) -> bool:
    """The file's header says WAL (bytes 18 and 19, the read and write versions, are 2)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[18] == 2 and head[19] == 2


def foreign_sidecars(path: Path) -> str:
    """``"; /x-shm belongs to uid 65534"``: the -wal/-shm files of ``path`` this process does
    not own (what keeps a WAL file's owner from writing it), or ``""``."""
    me = os.geteuid()
    found = []
    for suffix in ("-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        try:
            uid = p.stat().st_uid
        except OSError:
            continue
        if uid != me:
            found.append(f"{p} belongs to uid {uid}")
    if not found:
        return ""
    return ("; " + ", ".join(found) + " (left by another user's reader; remove it while no "
            "process uses the cache)")


def text_or_bytes(raw: bytes):
    """A TEXT value as SQLite hands it over: ``str`` where it is UTF-8, else the bytes as
    they are, which the checks of Note [Checked rows] in reads.py refuse as they refuse a
    blob (a flipped bit in a file must skip an entry, not stop the read)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


class HotJournal(CacheError):
    """A write was interrupted; the file must be rolled back by a process that can write it."""


def _hot_journal(path: Path) -> bool:
    """A non-empty -journal beside ``path`` (what a read failure then means, where Python
    does not give SQLite's extended error name)."""
    try:
        return Path(f"{path}-journal").stat().st_size > 0
    except OSError:
        return False


def roll_back(path: Path, timeout: float, where: str) -> None:
    """Let SQLite roll back the interrupted write of a file with our application id (a
    foreign file is left as it is); the caller may write the file."""
    try:
        with open(path, "rb") as f:
            head = f.read(72)
    except OSError as e:
        raise CacheError(f"{where}: cannot read: {e}") from None
    if len(head) < 72 or int.from_bytes(head[68:72], "big") != APPLICATION_ID:
        raise CacheError(f"{where}: a write of another application was interrupted (hot "
                         f"journal {path}-journal); the file was left untouched")
    conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()    # rolls back
    except sqlite3.Error as e:
        raise CacheError(f"{where}: cannot roll back an interrupted write: {e}") from None
    finally:
        conn.close()


def _has_frames(wal: Path) -> bool:
    try:
        return wal.stat().st_size > 0
    except OSError:
        return False


def connect_readonly(path: Path, timeout: float, *, may_write: bool,
                     where: str) -> Tuple[sqlite3.Connection, bool]:
    """A read-only connection to ``path`` and whether it reads with ``immutable=1`` (Note
    [Read-only caches]). ``may_write``: this process may write the file and its folder, so
    the -wal/-shm a WAL file needs are its own to create. Raises CacheError."""
    base = path.resolve().as_uri()
    queries = ["?mode=ro", "?mode=ro&immutable=1"]
    if in_wal_mode(path) and not Path(f"{path}-shm").exists() and (
            not may_write or not _has_frames(Path(f"{path}-wal"))):
        queries = queries[1:]       # no process has it open: read it creating nothing
    last: Optional[sqlite3.Error] = None
    for query in queries:
        conn = None
        try:
            conn = sqlite3.connect(base + query, uri=True, timeout=timeout,
                                   isolation_level=None, check_same_thread=False)
            conn.text_factory = text_or_bytes
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            conn.execute("PRAGMA schema_version").fetchone()       # opens the journal or WAL
            return conn, "immutable" in query
        except sqlite3.OperationalError as e:
            if conn is not None:
                conn.close()
            name = _error_name(e)
            if name == "SQLITE_READONLY_ROLLBACK" or (not name and _hot_journal(path)):
                raise HotJournal(
                    f"{where}: a write was interrupted (hot journal {path}-journal) and only a "
                    f"process that can write the cache can roll it back: run 'ucudnn cache "
                    f"list --cache {path}' once as a user who can write it; the file was left "
                    f"untouched") from None
            if is_locked(e):
                raise CacheError(f"{where}: still locked after {timeout:.0f} s ({e})") from None
            if not is_unwritable(e):
                raise CacheError(f"{where}: the database is corrupted or unreadable ({e}); "
                                 "the file was left untouched") from None
            last = e
        except sqlite3.DatabaseError as e:
            if conn is not None:
                conn.close()
            raise CacheError(f"{where}: the database is corrupted or unreadable ({e}); "
                             "the file was left untouched") from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
    raise CacheError(f"{where}: cannot open, even read-only ({last}); the file was left "
                     "untouched")
