"""The processes of the cache's concurrency tests (tests/measure/test_cache.py): spawned
children import them from here, the test support folder on sys.path."""
import dataclasses

from ucudnn.measure.cache import BenchCache, CacheError, CacheKey
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.table import AlgoPerf

SHAPE = ConvShape(64, 56, 56, 64, 3, 3, 1, 1)
KEY = CacheKey("NVIDIA H200", 91400, "float32", "default", "fwd", SHAPE)
#: one entry every writer replaces
SHARED_KEY = dataclasses.replace(KEY, op="bwd_data")
N_WORKERS, N_ENTRIES = 4, 40


def _worker_key(w, i):
    return dataclasses.replace(KEY, shape=dataclasses.replace(SHAPE, k=1 + w * 1000 + i))


def _worker_perfs(w, i):
    return [AlgoPerf(a, 0.01 * (w + 1) * (i + 1) + a, 1024 * a, 0) for a in range(1 + (i % 4))]


def _shared_pattern(w):
    return [AlgoPerf(w, float(j + 1), w * 10 + j) for j in range(w + 2)]


def _writer(path, w, barrier, results):
    try:
        barrier.wait(timeout=60)           # open the fresh file at the same moment
        with BenchCache(path, timeout=60) as c:
            for i in range(N_ENTRIES):
                c.put(_worker_key(w, i), 1 + i % 3, _worker_perfs(w, i))
                c.put(SHARED_KEY, 1, _shared_pattern(w))
                got = c.get(SHARED_KEY, 1)
                # an entry is replaced as a whole: never a mix of two writers
                assert got in [_shared_pattern(x) for x in range(N_WORKERS)], got
                other = (w + 1) % N_WORKERS
                seen = c.get(_worker_key(other, i // 2), 1 + (i // 2) % 3)
                assert seen is None or seen == _worker_perfs(other, i // 2), seen
        results.put((w, "ok"))
    except BaseException as e:             # reported to the parent
        results.put((w, repr(e)))


def _migrator(path, barrier, results):
    try:
        barrier.wait(timeout=60)
        with BenchCache(path, timeout=60) as c:
            results.put(len(c.keys(include_legacy=False)) == 0 and c.legacy_count() == 2)
    except BaseException as e:             # reported to the parent
        results.put(repr(e))


def _reader(path, barrier, stop, results):
    try:
        barrier.wait(timeout=60)
        reads = 0
        while not stop.is_set() or reads == 0:
            try:
                with BenchCache(path, timeout=60, readonly=True) as c:
                    for k in c.keys():
                        if k.op == SHARED_KEY.op:
                            assert c.get(k, 1) in [_shared_pattern(x) for x in range(N_WORKERS)]
                            continue
                        w, i = divmod(k.shape.k - 1, 1000)       # as _worker_key made it
                        assert c.get(k, 1 + i % 3) == _worker_perfs(w, i), k
                reads += 1
            except CacheError as e:
                if "no cache at" not in str(e):      # not created yet
                    raise
        results.put(("reader", reads))
    except BaseException as e:             # reported to the parent
        results.put(("reader", repr(e)))
