"""Storing entries: put, fill (measure what is missing, store it), refusing engines, dropping
legacy entries.
Every call is one transaction (Note [Cache file safety])."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Callable, Dict, Iterable, List, Mapping, Sequence, Tuple

from ...plan.table import AlgoPerf
from ...vocab import format_size
from .key import UNKNOWN_CAP, CacheKey
from .reads import CacheReads
from .schema import KERNEL_WHERE

__all__ = ["CacheWrites"]

log = logging.getLogger("ucudnn")

#: (key, batch, perfs, repeats, created): one entry as stored
Entry = Tuple[CacheKey, int, List[AlgoPerf], int, float]


class CacheWrites(CacheReads):
    """The writes of :class:`~ucudnn.measure.cache.BenchCache`."""

    def put(self, key: CacheKey, batch: int, perfs: Iterable[AlgoPerf], repeats: int = 1) -> None:
        """Store (replace) the entry of ``key`` (its exact cap and timing) at ``batch``."""
        self.put_many(key, {batch: perfs}, repeats)

    def put_many(self, key: CacheKey, results: Mapping[int, Iterable[AlgoPerf]],
                 repeats: int = 1) -> None:
        """Store (replace) several batch sizes of one key in one transaction."""
        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
        now = time.time()
        self._store([(key, b, list(p), repeats, now) for b, p in results.items()])

    def refuse(self, key: CacheKey, reasons: Mapping[int, str]) -> int:
        """Store the refusal of the engines ``{engine index: why}`` for ``key``'s kernel, in
        one transaction (Note [Refused engines]); from then on no lookup uses an entry of the
        kernel that holds a config of one of them. A refusal already stored keeps its first
        reason. Returns how many were new; on a read-only cache none are stored (a warning)."""
        if key.family != "graph":
            raise ValueError("cache key field 'family': engines are refused in the graph "
                             f"family, got {key.family!r}")
        rows = [(int(e), str(why)) for e, why in sorted(dict(reasons).items())]
        if not rows:
            return 0
        if self.readonly:
            log.warning("benchmark cache %s is read-only (%s): the refusal of engine(s) %s "
                        "not stored", self.path, self.readonly_reason,
                        ", ".join(str(e) for e, _ in rows))
            return 0
        return self._store([], refusals=[key.kernel_columns()[:6] + row for row in rows])[1]

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

    def _store(self, entries: Sequence[Entry], *, keep_newer: bool = False,
               refusals: Sequence[tuple] = ()) -> Tuple[int, int]:
        """Store ``entries`` in one transaction, each replacing the entry of its exact key,
        cap, timing and batch -- unless that one was created later, with ``keep_newer`` --
        and the ``refusals`` (rows of the table ``refused`` less their time). Returns how many
        entries were stored and how many refusals were new."""
        for key, batch, perfs, repeats, created in entries:
            if not isinstance(key, CacheKey):
                raise ValueError(f"cache key expected, got {key!r}")
            if key.legacy:
                raise ValueError("cache key field 'workspace_cap': entries of unknown cap come "
                                 "only from migrating a schema-1 file; store the cap offered")
            if not isinstance(batch, int) or batch < 1:
                raise ValueError(f"batch must be a positive integer, got {batch!r}")
            if not isinstance(repeats, int) or repeats < 1:
                raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
            for p in perfs:
                if not isinstance(p, AlgoPerf):
                    raise ValueError(f"AlgoPerf expected, got {p!r}")
                if bool(p.engine) != (key.family == "graph"):
                    raise ValueError(f"a {key.family} entry holds "
                                     f"{'engine configs' if key.family == 'graph' else 'algorithms'}"
                                     f" only, got {p!r}")
        stored: List[int] = []
        new: List[int] = []

        def body(conn):
            stored.clear()
            new.clear()
            exact = f"{KERNEL_WHERE} AND timing = ? AND workspace_cap = ? AND batch = ?"
            for key, batch, perfs, repeats, created in entries:
                cols = key.columns() + (batch,)
                if keep_newer and conn.execute(
                        f"SELECT 1 FROM entries WHERE {exact} AND created > ?",
                        cols + (created,)).fetchone():
                    continue
                conn.execute(f"DELETE FROM entries WHERE {exact}", cols)
                cur = conn.execute(
                    "INSERT INTO entries (gpu, cudnn_version, dtype, math, op, shape, family, "
                    "timing, workspace_cap, batch, repeats, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", cols + (repeats, created))
                conn.executemany(
                    "INSERT INTO perfs (entry, algo, time_ms, ws_bytes, algo_math, engine, "
                    "deterministic) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(cur.lastrowid, p.algo, float(p.time_ms), int(p.ws_bytes), p.math,
                      p.engine, None if p.deterministic is None else int(p.deterministic))
                     for p in perfs])
                stored.append(1)
            now = time.time()
            for row in refusals:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO refused (gpu, cudnn_version, dtype, math, op, shape, "
                    "engine, reason, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    tuple(row) + (now,))
                new.append(cur.rowcount)
        self._write(body)
        return len(stored), sum(new)
