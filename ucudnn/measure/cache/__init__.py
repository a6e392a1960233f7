"""SQLite cache of cuDNN benchmark results, shared by processes, runs and users.

One entry is what cudnnFind measured for one kernel at one micro-batch size: the list of
algorithms that ran (:class:`~ucudnn.plan.table.AlgoPerf`). It is keyed by :class:`CacheKey` (GPU
model, cuDNN version, dtype, math mode, operation, kernel geometry, the workspace offered to
cudnnFind and the timing method) plus the micro-batch size, so a table measured on one GPU or
library version never plans another.

:class:`BenchCache` is built in layers, one module each:

* :mod:`.key` -- the key, its text form, how an entry answers a lookup (Note [Workspace cap
  and timing in the key]);
* :mod:`.schema` -- the tables, what makes a file ours, creation and migration (Note [Schema
  migration]);
* :mod:`.access` -- who may write the file, reading without writing (Note [Read-only caches]);
* :mod:`.file` -- opening, the journal, transactions (Note [Cache file safety]);
* :mod:`.reads`, :mod:`.writes` -- lookups, every row checked (Note [Checked rows]); put
  and fill;
* :mod:`.transfer` -- benchmark tables in and out, whole-cache copies.

Imports :mod:`ucudnn.plan` and :mod:`ucudnn.vocab` only; never the rest of
:mod:`ucudnn.measure` (Note [Layers of the package] in :mod:`ucudnn`).

Note [A cache shared by a cluster]
    One node measures, the others read. The measuring node (or each node in turn) writes into
    a cache of its own, then publishes it: ``ucudnn cache export /shared/bench.sqlite`` writes
    a consistent copy (``BenchCache.export_cache``) that is itself a cache, and the other nodes
    plan from it with ``--cache /shared/bench.sqlite`` (or ``UCUDNN_CACHE``). Users who cannot
    write that file or its folder open it read-only, are told so, and leave no file beside it
    (Note [Read-only caches]); a GPU run of such a user measures what the copy lacks without
    storing it. Caches measured on several nodes are merged with ``ucudnn cache import
    OTHER.sqlite`` (``BenchCache.import_cache``: the later measurement of an entry wins), then
    exported again. A cache its users can all write (a group-writable folder) also works in
    place, several writers at once: the rollback journal needs only file locks, which network
    file systems provide where they provide locking at all (Note [Cache file safety]).
"""
from __future__ import annotations

from .file import default_cache_path
from .key import (DEFAULT_TIMING, DEFAULT_WORKSPACE_CAP, UNKNOWN_CAP, CacheKey, shape_from_key,
                  timing_name)
from .schema import APPLICATION_ID, SCHEMA_VERSION, CacheError
from .transfer import CacheTransfer, Imported

__all__ = ["CacheKey", "BenchCache", "CacheError", "Imported", "default_cache_path",
           "timing_name", "shape_from_key", "APPLICATION_ID", "SCHEMA_VERSION",
           "DEFAULT_WORKSPACE_CAP", "DEFAULT_TIMING", "UNKNOWN_CAP"]


class BenchCache(CacheTransfer):
    """The benchmark cache at ``path`` (default :func:`default_cache_path`): opening and
    read-only use (:class:`~.file.CacheFile`), lookups (:class:`~.reads.CacheReads`), writes
    (:class:`~.writes.CacheWrites`), tables and copies (:class:`~.transfer.CacheTransfer`).

    ``BenchCache(path, timeout=60.0, *, readonly=None, create=True, warn=True)``:
    ``readonly=True`` opens read-only; ``None`` read-write, falling back to read-only where
    this process cannot write the file (Note [Read-only caches]); ``False`` never falls back.
    ``create=False`` (or read-only) never creates an absent file: CacheError ``no cache at
    PATH``. ``self.readonly`` says how it was opened, ``self.readonly_reason`` why."""
