"""Moving entries in and out of a cache: benchmark tables (rows keyed by layer names, through
the layers' shapes), and whole caches (a copy that is itself a cache file, merged back entry
by entry). Note [A cache shared by a cluster] in the package says what they are for."""
from __future__ import annotations

import math as _math
import os
import sqlite3
import time
from pathlib import Path
from typing import Dict, List, Mapping, NamedTuple, Sequence, Tuple

from ...files import write_file
from ...plan.conv import ConvShape
from ...plan.table import OPS, AlgoPerf, BenchRow, deterministic_value, perf_problem
from .file import JOURNAL_MODE
from .key import (DEFAULT_TIMING, DEFAULT_WORKSPACE_CAP, UNKNOWN_CAP, CacheKey, batch_problem,
                  key_from_row)
from .schema import CacheError, columns
from .writes import CacheWrites

__all__ = ["CacheTransfer", "Imported", "SourceRefused"]


class Imported(NamedTuple):
    """What :meth:`CacheTransfer.import_cache` did with the entries of the other file."""
    stored: int             # copied (new, or replacing an older entry)
    kept_newer: int         # this cache's entry was measured later: kept
    legacy_skipped: int     # schema-1 entries of unknown cap: never plan, not copied
    refusals: int = 0       # engine refusals new here (Note [Refused engines])


class SourceRefused(CacheError):
    """The source of an import cannot be read or holds a bad row; names the source."""


def _refuse(src, row: str, problem: str):
    """Refuse an import for a bad entry of its source (Note [Checked rows] in
    ucudnn/measure/cache/reads.py)."""
    raise SourceRefused(f"benchmark cache {src}: {row}: {problem}; nothing was imported")


class _SqliteFailed(Exception):
    """SQLite's error while a copy was written (its message, without the temporary name)."""


class CacheTransfer(CacheWrites):
    """Tables and whole-cache copies of :class:`~ucudnn.measure.cache.BenchCache`."""

    # -- benchmark tables --------------------------------------------------------------------
    @staticmethod
    def _layer_map(layers) -> Dict[str, object]:
        if isinstance(layers, Mapping):
            return dict(layers)
        return {l.name: l for l in layers}

    def import_table(self, rows, layers, *, gpu: str, cudnn_version: int,
                     dtype: str = "float32", math: str = "default", repeats: int = 1,
                     workspace_cap: int = DEFAULT_WORKSPACE_CAP,
                     timing: str = DEFAULT_TIMING) -> int:
        """Store a benchmark table (:class:`BenchRow` rows); ``layers`` ({name: LayerSpec} or
        a list) gives the kernels (:meth:`ConvShape.from_layer`, Caffe's kernel of the
        layer). ``workspace_cap`` and ``timing``: what the table was measured with (a table
        does not say; the defaults are the core's defaults).

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
        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
        shapes = {name: ConvShape.from_layer(l) for name, l in by_name.items()}
        now = time.time()
        entries = [(CacheKey(gpu, cudnn_version, dtype, math, op, shapes[layer], workspace_cap,
                             timing), batch, perfs, repeats, now)
                   for (layer, op, batch), perfs in sorted(grouped.items())]
        self._store(entries)
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
                    rows += [BenchRow(name, op, batch, p.algo, p.time_ms, p.ws_bytes, p.math,
                                      deterministic=p.deterministic)
                             for p in perfs]
        return rows

    # -- whole caches ------------------------------------------------------------------------
    def export_cache(self, dest, *, replace: bool = False) -> int:
        """Copy the whole cache into the new file ``dest`` and return its number of entries.

        The copy is one consistent snapshot (SQLite's backup API; writers may go on), in our
        journal mode, with the permissions of a new file (the umask's): a cache itself, to plan
        from (read-only on shared storage) or to merge into another with :meth:`import_cache`.
        It is written beside ``dest`` and put in place (Note [Writing a named file] in
        ucudnn/files.py), so ``dest`` is whole or absent; an existing ``dest`` is overwritten
        only with ``replace`` (a regular file), anything else never."""
        dest = Path(dest).expanduser()
        where = f"cache copy {dest}"
        counted: List[int] = []

        def fill(tmp: str) -> None:
            try:
                out = sqlite3.connect(tmp, isolation_level=None)
                try:
                    with self._lock:
                        self._connection().backup(out)
                    out.execute(f"PRAGMA journal_mode = {JOURNAL_MODE}")
                    counted.append(out.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
                                   if self._has_tables else 0)
                finally:
                    out.close()
            except sqlite3.Error as e:
                raise _SqliteFailed(e) from None
            finally:
                for suffix in ("-journal", "-wal", "-shm"):
                    try:
                        os.unlink(tmp + suffix)
                    except OSError:
                        pass
        try:
            write_file(dest, fill, replace=replace, fsync=True)
        except FileExistsError:
            raise CacheError(f"{where}: already exists; nothing was overwritten (remove it, "
                             "choose another name or pass --force)") from None
        except _SqliteFailed as e:
            raise CacheError(f"{where}: cannot write: {e.args[0]}") from None
        except OSError as e:
            raise CacheError(f"{where}: cannot write: {e.strerror or e}") from None
        return counted[0]

    def import_cache(self, src) -> Imported:
        """Merge the entries of the cache file ``src`` (another cache, or a copy made by
        :meth:`export_cache`) into this one, in one transaction. An entry replaces this
        cache's entry of the same key, cap, timing and batch unless that one was measured
        later; entries keep their creation time and repeats. The engines ``src`` refused are
        refused here too (Note [Refused engines]), and its entries that hold one are left out.
        ``src`` is only read."""
        src = Path(src).expanduser()
        if self.readonly:
            raise CacheError(f"{self._where}: opened read-only ({self.readonly_reason}); "
                             f"nothing was imported from {src}")
        if src.exists() and self.path.exists() and os.path.samefile(src, self.path):
            raise CacheError(f"{self._where}: importing the cache into itself")
        try:
            other = CacheTransfer(src, readonly=True, warn=False)
        except CacheError as e:
            raise SourceRefused(str(e)) from None
        with other:
            cols = columns(other.schema, entries="e.", perfs="p.")
            family, engine, deterministic = cols.family, cols.engine, cols.deterministic
            rows = other._read(
                "SELECT e.id, e.gpu, e.cudnn_version, e.dtype, e.math, e.op, e.shape, "
                "e.timing, e.workspace_cap, e.batch, e.repeats, e.created, p.algo, p.time_ms, "
                f"p.ws_bytes, p.algo_math, {family}, {engine}, {deterministic} "
                f"FROM entries e LEFT JOIN perfs p ON p.entry = e.id WHERE {cols.usable} "
                "ORDER BY e.id")
            refused = (other._read("SELECT rowid, gpu, cudnn_version, dtype, math, op, shape, "
                                   "engine, reason FROM refused ORDER BY rowid")
                       if other.schema >= 5 and other._has_tables else [])
        for rowid, g, v, d, m, op, shape, engine, reason in refused:
            try:
                key_from_row(g, v, d, m, op, shape, DEFAULT_WORKSPACE_CAP, DEFAULT_TIMING, "graph")
            except ValueError as e:
                _refuse(src, f"refusal {rowid}", str(e))
            if not isinstance(engine, int) or engine < 0 or not isinstance(reason, str):
                _refuse(src, f"refusal {rowid}", f"field 'engine': must be an engine index "
                        f">= 0 with its reason, got {engine!r}, {reason!r}")
        refused = [row[1:] for row in refused]
        entries: Dict[int, list] = {}
        legacy = set()
        for (eid, g, v, d, m, op, shape, timing, cap, batch, repeats, created,
             algo, t, ws, am, fam, eng, det) in rows:
            if cap == UNKNOWN_CAP:
                legacy.add(eid)
                continue
            if eid not in entries:
                try:
                    key = key_from_row(g, v, d, m, op, shape, cap, timing, fam)
                except ValueError as e:
                    _refuse(src, f"entry {eid}", str(e))
                problem = batch_problem(batch)
                if problem is None and (not isinstance(repeats, int) or repeats < 1):
                    problem = f"field 'repeats': must be an integer >= 1, got {repeats!r}"
                if problem is None and not (isinstance(created, (int, float))
                                            and _math.isfinite(created)):
                    problem = f"field 'created': must be a time, got {created!r}"
                if problem is not None:
                    _refuse(src, f"entry {eid}", problem)
                entries[eid] = [key, batch, [], repeats, created]
            if algo is not None:
                problem = perf_problem(algo, t, ws, am, eng or "", det)
                if problem is None and bool(eng) != (fam == "graph"):
                    problem = (f"field 'engine': a {fam} entry holds "
                               f"{'engine configs' if fam == 'graph' else 'algorithms'} only, "
                               f"got {eng!r}")
                if problem is not None:
                    _refuse(src, f"entry {eid}", problem)
                entries[eid][2].append(AlgoPerf(algo, t, ws, am, eng or "",
                                                deterministic_value(det)))
        try:
            stored, new = self._store([tuple(e) for e in entries.values()], keep_newer=True,
                                      refusals=refused)
        except CacheError:
            raise
        except ValueError as e:
            raise SourceRefused(f"benchmark cache {src}: {e}; nothing was imported") from None
        return Imported(stored, len(entries) - stored, len(legacy), new)
