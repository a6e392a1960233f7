"""Measuring cuDNN on this machine's GPU: device facts and per-kernel benchmarks.

The timing itself happens in the compiled core (``Kernel.benchmark``: cudnnFind...AlgorithmEx,
repeated, median, then re-timed back to back with CUDA events); this module turns its records
into :class:`~ucudnn.plan.table.AlgoPerf` lists and goes through the benchmark cache so that a
kernel is measured once per GPU model, cuDNN version, dtype, math mode, shape, workspace offered,
timing method and micro-batch size (Note [Workspace cap and timing in the key] in
:mod:`ucudnn.measure.cache`).

Note [Offered workspace]
    The cache key records the workspace cudnnFind was really offered, since an entry is reused
    for any ask up to it. The core offers ``min(cap, free - 512 MiB)`` and halves it while the
    allocation fails; ``Kernel.last_benchmark_workspace`` reports what it offered in its latest
    ``benchmark`` call, and that is what :func:`measure_kernel` stores.
"""
from __future__ import annotations

import functools
import importlib.util
import subprocess
from typing import Callable, Iterable, List, Optional, Sequence

from ..plan.conv import ConvShape
from ..plan.settings import FIND_REPEATS
from ..plan.table import AlgoPerf, KernelBench
from ..vocab import ENGINE, ENGINE_FAMILIES, Status, UcudnnError, parse_engine
from . import cache as cache_db
from .cache import DEFAULT_WORKSPACE_CAP, CacheKey, timing_name

__all__ = ["NoGpuError", "core", "core_status", "device_info", "set_device", "driver_version", "cache_key",
           "benchmark_kernel", "measure_kernel", "measure", "merge_families", "holds_refused",
           "Measured", "TIME_ITERS", "unknown_determinism", "fill_known"]

#: The core's default re-timing: median of 5 CUDA-event runs (timing ``"events5"``).
TIME_ITERS = 5

# Note [Find repeats]
#     cudnnFind calls per micro-batch size (their median) default to one
#     (ucudnn.plan.settings.FIND_REPEATS, also Caffe's ``benchmark_repeats``). With the
#     re-timing (TIME_ITERS), a Find only ranks the algorithms and gives their status and
#     workspace; the planner uses the CUDA-event medians of those near the (time, workspace)
#     front (Note [Re-timing near the front] in cython/ucudnn/_timing.pyx). Three Finds per size
#     cost 60 % of a cold pruned planning of ResNet-18 and gave no better plans than one: on
#     the H200 the predicted times of one-Find and three-Find plans differ by less than their
#     run-to-run spread (results/h200/cold_planning/).


class Measured(dict):
    """A :data:`~ucudnn.plan.table.KernelBench` (``{batch: [AlgoPerf]}``) that also says how it
    was measured: ``workspace_cap`` (bytes offered to cudnnFind, a lower bound: Note [Offered
    workspace]) and ``timing`` (``"find"`` or ``"events<N>"``). :meth:`BenchCache.fill` stores
    it under those."""

    def __init__(self, results, workspace_cap: int, timing: str):
        super().__init__(results)
        self.workspace_cap = int(workspace_cap)
        self.timing = timing


class NoGpuError(UcudnnError, RuntimeError):
    """The compiled core is missing or no CUDA device is visible."""
    status = Status.CUDA


def _load_core():
    """The one import of the compiled core (Note [Layers of the package] in
    :mod:`ucudnn`): lazy, so that what needs no GPU runs without it, or with the tests' fake
    core in ``sys.modules["ucudnn._core"]``."""
    from .. import _core
    return _core


def core():
    """The compiled core module; :class:`NoGpuError` if it was not built."""
    try:
        return _load_core()
    except ImportError as e:
        raise NoGpuError(f"the compiled core ucudnn._core is not available ({e}); "
                         "build it with `pip install .`") from None


def core_status():
    """("ok" | "missing" | "error", detail) of the compiled core (``ucudnn info``)."""
    try:
        spec = importlib.util.find_spec("ucudnn._core")
    except (ImportError, ValueError) as e:
        return "error", str(e)
    if spec is None:
        return "missing", "ucudnn._core is not built (pip install . on a machine with CUDA/cuDNN)"
    try:
        mod = _load_core()
    except Exception as e:      # noqa: BLE001 - any failure to load is reported, not raised
        return "error", f"ucudnn._core is built but cannot be loaded: {e}"
    return "ok", getattr(mod, "__file__", None) or spec.origin or "ucudnn._core"


def driver_version() -> str:
    """The NVIDIA driver version (e.g. ``580.159.03``), or ``unknown``."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and word.count(".") >= 1:
                    return word
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


@functools.lru_cache(maxsize=None)
def _device_info(device: int) -> dict:
    info = core().device_info()
    info["driver"] = driver_version()
    return info


def device_info() -> dict:
    """GPU name, compute capability, memory, driver, CUDA and cuDNN versions of the current
    device. :class:`NoGpuError` when the core is missing or no device is visible."""
    c = core()
    if c.device_count() == 0:
        raise NoGpuError("no CUDA device is visible (driver missing, or no GPU on this machine)")
    try:
        dev = c.device_info()["device"]
    except c.CoreError as e:
        raise NoGpuError(f"CUDA is not usable: {e}") from None
    return dict(_device_info(dev))


def set_device(device: int) -> None:
    """Make ``device`` the calling thread's current GPU (Note [Benchmarks over several GPUs in
    one process] in :mod:`ucudnn.measure.for_plan`)."""
    core().set_device(device)


def cache_key(shape: ConvShape, op: str, math: str = "default", dtype: str = "float32", *,
              workspace_cap: Optional[int] = None, time_iters: int = TIME_ITERS,
              family: str = "legacy"):
    """The cache key of a kernel's ``family`` of choices on the current device, for a lookup
    that needs ``workspace_cap`` bytes offered (default: the core's 8 GiB) and the timing of
    ``time_iters`` (default: re-timed with 5 CUDA-event runs)."""
    info = device_info()
    return CacheKey(gpu=info["gpu"], cudnn_version=info["cudnn_version"], dtype=dtype,
                    math=math, op=op, shape=shape,
                    workspace_cap=DEFAULT_WORKSPACE_CAP if workspace_cap is None
                    else int(workspace_cap),
                    timing=timing_name(time_iters), family=family)


def _perfs(records) -> List[AlgoPerf]:
    """Successful choices of one size (the core's records: algo, status, time_ms, ws_bytes,
    math, engine, deterministic), fastest first. A record without the last field (a core
    built before it) is of unknown determinism (Note [Deterministic plans] in
    ucudnn/plan/dp.py)."""
    return sorted((AlgoPerf(int(r[0]), float(r[2]), int(r[3]), int(r[4]), str(r[5]),
                            None if len(r) < 7 or r[6] is None else bool(r[6]))
                   for r in records if r[1] == 0),
                  key=lambda p: (p.time_ms, p.ws_bytes, p.algo, p.engine))


def benchmark_kernel(shape: ConvShape, op: str, n: int, sizes: Iterable[int], *,
                     repeats: int = FIND_REPEATS, math: str = "default", dtype: str = "float32",
                     workspace_cap: Optional[int] = None,
                     progress: Optional[Callable[[int], None]] = None,
                     name: Optional[str] = None, time_iters: int = TIME_ITERS,
                     engines: str = "legacy") -> Measured:
    """Time every choice of the ``engines`` setting (``legacy``, ``graph`` or ``both``) at
    each micro-batch size (no cache). ``{b: [AlgoPerf]}`` with the workspace offered and the
    timing as attributes (:class:`Measured`). The layout is the shape's."""
    device_info()
    kern = core().Kernel(shape, op, n, dtype, math, name)
    return measure_kernel(kern, sizes, repeats=repeats, workspace_cap=workspace_cap,
                          progress=progress, time_iters=time_iters, engines=engines)


def measure_kernel(kern, sizes, *, repeats=FIND_REPEATS, workspace_cap=None, progress=None,
                   time_iters: int = TIME_ITERS, engines: str = "legacy") -> Measured:
    """Benchmark ``kern`` (a core ``Kernel``) at ``sizes``, no cache: :class:`Measured` with
    the workspace offered (Note [Offered workspace]) and the timing."""
    sizes = list(sizes)
    timing = timing_name(time_iters)
    cap = DEFAULT_WORKSPACE_CAP if workspace_cap is None else int(workspace_cap)
    families = ENGINE_FAMILIES[ENGINE(engines, "engines")]
    results, offered = {}, None
    while sizes:
        raw = kern.benchmark(sizes, repeats, cap, progress, time_iters, families)
        results.update((b, _perfs(recs)) for b, recs in raw.items())
        got = int(kern.last_benchmark_workspace)
        offered = got if offered is None else min(offered, got)
        # the sizes whose front an engine refused later in the call had hidden: measured
        # again, now with it refused (Note [Graph results checked])
        sizes = list(kern.last_unchecked_sizes)
    return Measured(results, offered, timing)


def holds_refused(perfs: Iterable[AlgoPerf], refused) -> bool:
    """Whether ``perfs`` hold a config of an engine of ``refused`` (engine indices)."""
    return any(p.engine and parse_engine(p.engine)[0] in refused for p in perfs)


def merge_families(parts: Sequence[KernelBench]) -> KernelBench:
    """One kernel's benchmarks of several families as one: each size's choices of all of
    them, fastest first. One family's comes back as it is (the cache's order)."""
    if len(parts) == 1:
        return parts[0]
    out: KernelBench = {}
    for part in parts:
        for b, perfs in part.items():
            out.setdefault(b, []).extend(perfs)
    return {b: sorted(perfs, key=lambda p: (p.time_ms, p.ws_bytes, p.algo, p.math, p.engine))
            for b, perfs in sorted(out.items())}


def unknown_determinism(bench: KernelBench) -> List[int]:
    """The sizes of ``bench`` holding a choice of unknown determinism (measured before it was
    recorded: Note [Deterministic plans] in ucudnn/plan/dp.py)."""
    return [b for b, perfs in bench.items() if any(p.deterministic is None for p in perfs)]


def fill_known(cache, key, sizes, run, repeats: int, *, force: bool = False,
               determinism: bool = False) -> KernelBench:
    """``cache.fill(key, sizes, run, repeats, force=force)``; with ``determinism`` the sizes
    it answers with a choice of unknown determinism are measured again and replaced (for a
    deterministic plan: Note [Deterministic plans] in ucudnn/plan/dp.py)."""
    got = cache.fill(key, sizes, run, repeats, force=force)
    stale = unknown_determinism(got) if determinism else []
    if stale:
        got.update(cache.fill(key, stale, run, repeats, force=True))
    return got


def measure(kern, sizes: Iterable[int], *, repeats: int = FIND_REPEATS, cache_path=None,
            workspace_cap: Optional[int] = None, progress=None,
            time_iters: int = TIME_ITERS, cache=None, engines: str = "legacy",
            determinism: bool = False) -> KernelBench:
    """Benchmarks of ``kern`` (a core ``Kernel``) at ``sizes``, each family of ``engines``
    its own cache entry: from the cache where an entry measured with at least
    ``workspace_cap`` offered (default 8 GiB) and the same timing is present, measured and
    stored otherwise (stored with what was really offered). ``engines`` ``both``: every
    size's choices of both families, fastest first. ``cache``: an open
    :class:`~ucudnn.measure.cache.BenchCache` to use (and leave open) instead of opening
    ``cache_path`` for this call (a search measuring in rounds opens it once).
    ``determinism``: a cached size holding a choice of unknown determinism is measured again
    (for a deterministic plan: Note [Deterministic plans] in ucudnn/plan/dp.py)."""
    sizes = list(sizes)

    def family_fill(c, family):
        key = cache_key(kern.shape, kern.op, kern.math, kern.dtype, workspace_cap=workspace_cap,
                        time_iters=time_iters, family=family)

        def run(missing):
            return measure_kernel(kern, missing, repeats=repeats, workspace_cap=workspace_cap,
                                  progress=progress, time_iters=time_iters, engines=family)
        if family != "graph":
            return fill_known(c, key, sizes, run, repeats, determinism=determinism)
        # Note [Refused engines] in ucudnn/measure/cache/schema.py
        stored = c.refusals(key)
        kern.refuse_engines(stored)
        got = fill_known(c, key, sizes, run, repeats, determinism=determinism)
        refused = kern.refused_engines
        new = {e: why for e, why in refused.items() if e not in stored}
        if new:
            c.refuse(key, new)
            stale = [b for b, perfs in got.items() if holds_refused(perfs, refused)]
            if stale:
                got.update(c.fill(key, stale, run, repeats, force=True))
        return got

    def fill(c):
        return merge_families([family_fill(c, family)
                               for family in ENGINE_FAMILIES[ENGINE(engines, "engines")]])
    if cache is not None:
        return fill(cache)
    with cache_db.BenchCache(cache_path) as c:
        return fill(c)
