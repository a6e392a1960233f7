"""Lookups: the entries that answer a key (Note [Workspace cap and timing in the key]), the
stored keys and batch sizes, counts, a kernel's refused engines (Note [Refused engines]).
Each lookup is one SQL statement (one snapshot).

Note [Checked rows]
    A cache file is another program's output as far as a reader knows: a row may hold any
    value (SQLite keeps text in a REAL column), written by hand, by another tool or by a bug.
    Every row is checked where it is read, by the checks the rest of the package makes: a
    key's fields by :class:`CacheKey` (:func:`~.key.key_from_row`: gpu, cuDNN version,
    dtype, math, op, shape, cap, timing, family), a measurement by the benchmark tables' own
    check (:func:`ucudnn.plan.table.perf_problem`: times finite and >= 0, workspace an integer
    >= 0), a micro-batch size by :func:`~.key.batch_problem`. A reader skips a bad entry --
    all of it: its other choices alone would plan as if the bad one had never been measured
    -- with one warning naming the cache, the entry and the field, once per entry; the entry
    is then missing, as if never measured (measured again where a GPU is, else planned from
    the other sources). Skipping rather than refusing keeps one bad row of a cache shared by
    a cluster from stopping every user's plan. ``import_cache`` refuses instead: a bad
    entry of the source stops the whole import before anything is written, with the source,
    the entry and the field, so that no bad value enters a cache.
"""
from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Optional, Tuple

from ...plan.table import AlgoPerf, deterministic_value, perf_problem
from .file import CacheFile
from .key import UNKNOWN_CAP, CacheKey, batch_problem, key_from_row
from .schema import REFUSED_WHERE, columns

__all__ = ["CacheReads"]

log = logging.getLogger("ucudnn")


# Note [Slab choices and larger caps]
#     An entry measured with a larger cap answers a smaller ask (Note [Workspace cap and
#     timing in the key]) because everything that fits the smaller cap was tried under the
#     larger one too. Slab choices break that for a 3-D kernel's graph entry at one sample:
#     the benchmark tries them only for the configs over the cap it was offered (Note [Slab
#     choices tried] in ucudnn/plan/slabs.py), so an entry measured at 512 MiB holds no
#     slabs that 256 MiB would have needed (nnU-Net's fast configs need 256-386 MiB at one
#     sample). So where such an entry's fastest choice does not fit the ask, it answers only
#     if its cap is the ask's own; otherwise the entry of the next smaller cap answers, down
#     to the ask's own, under the same rule, or none (and the size is measured under the
#     asked cap, which tries the slabs).


def _lacks_slabs(key: CacheKey, batch: int, cap: int, perfs: List[AlgoPerf]) -> bool:
    """Note [Slab choices and larger caps]: whether the entry of ``batch`` measured with
    ``cap`` may lack the slab choices ``key``'s cap needs."""
    return (key.family == "graph" and key.shape.ndim == 3 and batch == 1
            and cap > key.workspace_cap and bool(perfs)
            and perfs[0].ws_bytes > key.workspace_cap)


def _cap_problem(cap) -> Optional[str]:
    if not isinstance(cap, int) or isinstance(cap, bool) or (cap < 0 and cap != UNKNOWN_CAP):
        return f"field 'workspace_cap': must be an integer >= 0, got {cap!r}"
    return None


class CacheReads(CacheFile):
    """The lookups of :class:`~ucudnn.measure.cache.BenchCache`."""

    def _match(self, key: CacheKey, exact: bool) -> Tuple[str, tuple]:
        """SQL condition and parameters of the entries that answer ``key`` (Note [Workspace
        cap and timing in the key]); ``exact``: only the entries stored under ``key`` itself."""
        if not isinstance(key, CacheKey):
            raise ValueError(f"cache key expected, got {key!r}")
        cols = columns(self.schema)
        cond = f"{cols.kernel_where} AND {cols.usable} AND timing = ? AND workspace_cap "
        cond += "= ?" if exact or key.legacy else ">= ?"
        return cond, key.columns()

    def _skip(self, entry, key: str, problem: str) -> None:
        """Warn, once per entry, that the entry ``entry`` is skipped (Note [Checked rows])."""
        skipped = self.__dict__.setdefault("_skipped", set())
        if entry not in skipped:
            skipped.add(entry)
            log.warning("%s: entry %s (%s) skipped: %s", self._where, entry, key, problem)

    def get(self, key: CacheKey, batch: int, *, exact: bool = False) -> Optional[List[AlgoPerf]]:
        """The algorithms measured for ``key`` at ``batch`` (fastest first), or ``None``."""
        return self.get_many(key, [batch], exact=exact).get(batch)

    def get_many(self, key: CacheKey, batches: Iterable[int], *,
                 exact: bool = False) -> Dict[int, List[AlgoPerf]]:
        """``{batch: perfs}`` for the requested batches that have an entry usable for ``key``:
        same kernel and timing, measured with at least ``key.workspace_cap`` offered; of
        several, the largest cap, then the newest (``exact``: only ``key``'s own cap); but
        Note [Slab choices and larger caps]."""
        got, caps = self._get_many(key, batches, exact)
        for b in [b for b, perfs in got.items() if _lacks_slabs(key, b, caps[b], perfs)]:
            del got[b]
            while True:                 # the next smaller cap that does answer, if any
                more, cap = self._get_many(key, [b], exact, below=caps[b])
                if b not in more:
                    break
                caps[b] = cap[b]
                if not _lacks_slabs(key, b, cap[b], more[b]):
                    got[b] = more[b]
                    break
        return dict(sorted(got.items()))

    def _get_many(self, key: CacheKey, batches: Iterable[int], exact: bool,
                  below: Optional[int] = None):
        """:meth:`get_many` by the cap rule alone (``below``: of the entries with a smaller
        cap than that), and the cap of each entry returned."""
        wanted = sorted({int(b) for b in batches})
        caps: Dict[int, int] = {}
        if not wanted:
            return {}, caps
        cond, params = self._match(key, exact)
        if below is not None:
            cond, params = f"{cond} AND workspace_cap < ?", params + (int(below),)
        cols = columns(self.schema)
        engine, deterministic = cols.engine, cols.deterministic
        out: Dict[int, List[AlgoPerf]] = {}
        for i in range(0, len(wanted), 500):        # stay below SQLite's parameter limit
            part = wanted[i:i + 500]
            # one statement, one snapshot: the chosen entry and its perfs agree
            rows = self._read(
                "WITH best AS (SELECT id, batch, workspace_cap, ROW_NUMBER() OVER (PARTITION BY "
                "batch ORDER BY workspace_cap DESC, created DESC, id DESC) AS rank FROM entries "
                f"WHERE {cond} AND batch IN ({','.join('?' * len(part))})) "
                "SELECT b.id, b.batch, b.workspace_cap, p.algo, p.time_ms, p.ws_bytes, "
                f"p.algo_math, {engine}, {deterministic} FROM best b "
                "LEFT JOIN perfs p ON p.entry = b.id WHERE b.rank = 1",
                params + tuple(part))
            bad = set()
            for eid, batch, cap, algo, t, ws, m, e, det in rows:
                problem = batch_problem(batch) or _cap_problem(cap) or (
                    None if algo is None else perf_problem(algo, t, ws, m, e, det))
                if problem is not None:
                    kernel = "|".join(map(str, key.kernel_columns()))
                    self._skip(eid, f"{kernel}|cap={cap!r}|{key.timing}, batch {batch!r}",
                               problem)
                    bad.add(batch)
                    continue
                perfs = out.setdefault(batch, [])
                caps[batch] = cap
                if algo is not None:
                    perfs.append(AlgoPerf(algo, t, ws, m, e, deterministic_value(det)))
            for batch in bad:
                out.pop(batch, None)
        for perfs in out.values():
            perfs.sort(key=lambda p: (p.time_ms, p.ws_bytes, p.algo, p.math, p.engine))
        return dict(sorted(out.items())), caps

    def batches(self, key: CacheKey, *, exact: bool = False) -> List[int]:
        """Micro-batch sizes with an entry usable for ``key`` (``exact``: stored under it)."""
        cond, params = self._match(key, exact)
        out = []
        for eid, batch in self._read(f"SELECT MIN(id), batch FROM entries WHERE {cond} "
                                     "GROUP BY batch ORDER BY batch", params):
            problem = batch_problem(batch)
            if problem is None:
                out.append(batch)
            else:
                self._skip(eid, key.text(), problem)
        return out

    def keys(self, *, include_legacy: bool = True) -> List[CacheKey]:
        """Every key with at least one entry (each cap and timing its own key), in a stable
        order; ``include_legacy=False`` leaves out the schema-1 entries of unknown cap."""
        cols = columns(self.schema)
        rows = self._read("SELECT MIN(id), gpu, cudnn_version, dtype, math, op, shape, "
                          f"workspace_cap, timing, {cols.family} AS fam FROM entries "
                          f"WHERE {cols.usable} "
                          + ("" if include_legacy else f"AND workspace_cap != {UNKNOWN_CAP} ")
                          + "GROUP BY gpu, cudnn_version, dtype, math, op, shape, fam, "
                          "timing, workspace_cap ORDER BY gpu, cudnn_version, dtype, math, op, "
                          "shape, fam, timing, workspace_cap")
        out = []
        for eid, *fields in rows:
            try:
                out.append(key_from_row(*fields))
            except ValueError as e:
                self._skip(eid, "|".join(map(str, fields)), str(e))
        return out

    def entries(self, *, include_legacy: bool = True) -> List[Tuple[CacheKey, List[int]]]:
        """``[(key, batches)]`` exactly as stored: what a listing shows."""
        return [(k, self.batches(k, exact=True))
                for k in self.keys(include_legacy=include_legacy)]

    def legacy_count(self) -> int:
        """Entries migrated from schema 1 (unknown cap, never used for planning)."""
        rows = self._read(f"SELECT COUNT(*) FROM entries WHERE workspace_cap = {UNKNOWN_CAP}")
        return rows[0][0] if rows else 0

    def __len__(self) -> int:
        """Entries that may be read (what :meth:`entries` lists)."""
        rows = self._read(f"SELECT COUNT(*) FROM entries WHERE {columns(self.schema).usable}")
        return rows[0][0] if rows else 0

    def refusals(self, key: CacheKey) -> Dict[int, str]:
        """``{engine index: why}`` of the engines refused for ``key``'s kernel (Note [Refused
        engines]); none for the legacy family, or in a file older than schema 5."""
        if key.family != "graph" or self.schema < 5 or not self._has_tables:
            return {}
        return dict(self._read(f"SELECT engine, reason FROM refused WHERE {REFUSED_WHERE} "
                               "ORDER BY engine", key.kernel_columns()[:6]))
