#!/usr/bin/env python3
"""What the benchmark cache's journal mode costs writers that share one cache (Note [Cache
file safety] in ucudnn/measure/cache/file.py).

``--procs`` processes open one fresh cache at the same moment (as Caffe's GPUs do) and each
stores ``--entries`` entries the way ``BenchCache.fill`` does: a lookup that misses, then one
``put`` of ``--algos`` algorithms. Every put and lookup is timed; while they run,
``--readers`` more processes list the cache in a loop (``keys()`` and lookups, as ``ucudnn
cache list`` and planning read it). ``--gap-ms`` pauses each writer after each put, a
stand-in for the measurement that precedes a put in real use. Prints one JSON line:

    {"mode": "delete", "procs": 4, "entries": 200, "algos": 8, "readers": 1, "gap_ms": 0.0,
     "sync_ms": ..., "wall_s": ..., "put_ms": {"median": ..., "p95": ..., "max": ...},
     "get_ms": {...}, "reads": ...}

``sync_ms``, measured first, is the folder's median time for the file operations a
rollback-journal commit waits on (:func:`_sync_ms`): its cost follows the disk.

``--mode wal`` or ``truncate`` replaces the cache's journal mode in these processes only
(``ucudnn.measure.cache.file.JOURNAL_MODE``), to compare. Runs on a CPU. The Note's figures
are medians of 5 runs of each of these with ``--mode wal`` and ``--mode delete``:

    python3 scripts/cache_journal.py --entries 200 --procs 1
    python3 scripts/cache_journal.py --entries 200 --procs 4
    python3 scripts/cache_journal.py --entries 200 --procs 4 --readers 1
    python3 scripts/cache_journal.py --entries 200 --procs 4 --readers 1 --gap-ms 20
"""
import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time


def _key(w, i):
    from ucudnn.measure.cache import CacheKey
    from ucudnn.plan.conv import ConvShape
    return CacheKey("NVIDIA H200", 91400, "float32", "default", "fwd",
                    ConvShape(64, 56, 56, 1 + w * 100000 + i, 3, 3, 1, 1))


def _use_mode(mode):
    from ucudnn.measure.cache import file
    file.JOURNAL_MODE = mode.upper()


def _writer(path, mode, w, entries, algos, gap, barrier, out):
    from ucudnn.measure.cache import BenchCache
    from ucudnn.plan.table import AlgoPerf
    _use_mode(mode)
    perfs = [AlgoPerf(a, 0.1 * (a + 1), 1024 * a, 0) for a in range(algos)]
    puts, gets = [], []
    barrier.wait()
    with BenchCache(path) as c:
        for i in range(entries):
            key = _key(w, i)
            t0 = time.perf_counter()
            assert c.get(key, 32) is None
            t1 = time.perf_counter()
            c.put(key, 32, perfs)
            t2 = time.perf_counter()
            gets.append(t1 - t0)
            puts.append(t2 - t1)
            if gap:
                time.sleep(gap)
    out.put(("writer", puts, gets))


def _reader(path, mode, barrier, stop, out):
    from ucudnn.measure.cache import BenchCache
    _use_mode(mode)
    barrier.wait()
    reads = 0
    while not stop.is_set():
        try:
            with BenchCache(path, readonly=True) as c:
                for k in c.keys()[:20]:
                    c.get_many(k, [32])
            reads += 1
        except Exception as e:          # noqa: BLE001 - a reader racing the file's creation
            if "no cache at" not in str(e):
                raise
    out.put(("reader", reads))


def _sync_ms(folder, n=20):
    """Median time in ``folder`` of what a rollback-journal commit does around its data:
    create a file, write 4 KiB, fsync it, fsync the file beside it, delete the first."""
    journal, db = os.path.join(folder, "probe-journal"), os.path.join(folder, "probe")
    fd_db = os.open(db, os.O_CREAT | os.O_WRONLY, 0o600)
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            fd = os.open(journal, os.O_CREAT | os.O_WRONLY, 0o600)
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            os.close(fd)
            os.write(fd_db, b"x" * 4096)
            os.fsync(fd_db)
            os.unlink(journal)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd_db)
        os.unlink(db)
    return round(statistics.median(times) * 1000, 3)


def _ms(xs):
    xs = sorted(x * 1000 for x in xs)
    return {"median": round(statistics.median(xs), 3),
            "p95": round(xs[int(0.95 * (len(xs) - 1))], 3), "max": round(xs[-1], 3)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="delete", choices=("delete", "truncate", "wal"))
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--entries", type=int, default=200)
    p.add_argument("--algos", type=int, default=8, help="algorithms per entry")
    p.add_argument("--readers", type=int, default=0)
    p.add_argument("--gap-ms", type=float, default=0.0,
                   help="pause after each put (a stand-in for the measurement before it)")
    p.add_argument("--dir", help="folder for the cache (default: a fresh temporary one)")
    a = p.parse_args()
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        path = os.path.join(tmp, "bench.sqlite")
        sync_ms = _sync_ms(tmp)
        barrier, out, stop = ctx.Barrier(a.procs + a.readers + 1), ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=_writer, args=(path, a.mode, w, a.entries, a.algos,
                                                  a.gap_ms / 1000, barrier, out))
                 for w in range(a.procs)]
        procs += [ctx.Process(target=_reader, args=(path, a.mode, barrier, stop, out))
                  for _ in range(a.readers)]
        for pr in procs:
            pr.start()
        barrier.wait()
        t0 = time.perf_counter()
        got = [out.get() for _ in range(a.procs)]
        wall = time.perf_counter() - t0
        stop.set()
        got += [out.get() for _ in range(a.readers)]
        for pr in procs:
            pr.join()
        if any(pr.exitcode for pr in procs):
            raise SystemExit("a worker failed")
    puts = [x for g in got if g[0] == "writer" for x in g[1]]
    gets = [x for g in got if g[0] == "writer" for x in g[2]]
    print(json.dumps({"mode": a.mode, "procs": a.procs, "entries": a.entries,
                      "algos": a.algos, "readers": a.readers, "gap_ms": a.gap_ms,
                      "sync_ms": sync_ms, "wall_s": round(wall, 3),
                      "put_ms": _ms(puts), "get_ms": _ms(gets),
                      "reads": sum(g[1] for g in got if g[0] == "reader")}))


if __name__ == "__main__":
    main()
