"""Where benchmark data for planning comes from: tables, the cache, this GPU, the shipped data.

:func:`gather` finds benchmarks for a list of layers (see Note [Where plan gets its benchmark
data]); :func:`benchmark_layers` measures what a cache lacks on this GPU (``ucudnn bench``);
:func:`import_table`, :func:`export_rows` and :func:`cache_listing` move tables in and out of
the cache. Nothing here prints: progress goes through a ``progress(text)`` callback, and what a
user should know comes back as notes.

Note [Where plan gets its benchmark data]
    1. tables (``--table`` files), if given; every layer must appear by name;
    2. else the cache when it holds every kernel at every micro-batch size the policy names,
       for the device asked for: ``gpu``/``cudnn_version`` if given, else the visible GPU,
       else any GPU of the cache with the asked dtype and math mode;
    3. else, with a GPU visible (and matching what was asked), the missing sizes are
       benchmarked into the cache, in the asked dtype and math mode;
    4. else the H200 data shipped with the package, found by kernel shape (not layer name),
       when it was measured with what was asked (GPU, cuDNN version, dtype, math mode);
    5. else a cache holding mini-batch size N of every kernel but not every micro-batch size
       (planning with the sizes it has, with a note);
    6. else :class:`SourceError`, naming what was tried and what to do.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..plan.conv import ConvShape
from ..plan.dp import WINOGRAD_ALGOS, without_algorithms
from ..plan.settings import FIND_REPEATS, PlanSettings, candidate_sizes, plan_workspace
from ..plan.table import BenchRow, KernelBench, group_by_kernel, read_table
from ..vocab import ENGINE, ENGINE_FAMILIES, OPS, InputError
from . import bench, shipped
from .cache import DEFAULT_WORKSPACE_CAP, BenchCache, CacheKey, default_cache_path
from .for_plan import kernel_cost
from .live import plan_kernels
from .planner_state import planner_state

__all__ = ["SourceError", "Source", "Gathered", "device_status", "format_cudnn", "gather",
           "gather_net", "benchmark_layers", "shard_kernels", "resolve_device",
           "import_table", "export_rows", "cache_listing", "shipped_meta"]

Benches = Dict[Tuple[str, str], KernelBench]
Progress = Optional[Callable[[str], None]]


class SourceError(InputError):
    """No benchmark data can be found or made for what was asked; says what to do."""


@dataclass
class Source:
    """Where the benchmarks of a plan came from (``kind``: table, cache, benchmark, shipped)."""
    kind: str
    detail: str
    gpu: Optional[str] = None
    cudnn_version: Optional[int] = None
    dtype: Optional[str] = None
    math: Optional[str] = None
    complete: bool = True       # every micro-batch size the policy names is measured

    def as_dict(self) -> dict:
        return {"kind": self.kind, "detail": self.detail, "gpu": self.gpu,
                "cudnn_version": self.cudnn_version, "dtype": self.dtype, "math": self.math,
                "complete": self.complete}


@dataclass
class Gathered:
    benches: Benches
    source: Source
    notes: List[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# the device
# ---------------------------------------------------------------------------------------------

def device_status() -> Tuple[Optional[dict], str]:
    """``(device_info(), "")`` with a usable GPU, else ``(None, reason)``."""
    try:
        return bench.device_info(), ""
    except (RuntimeError, OSError) as e:
        return None, str(e) or type(e).__name__


def format_cudnn(v, patch: bool = True) -> str:
    """91400 -> ``9.14.0`` (``9.14`` without ``patch``); 8905 -> ``8.9.5``."""
    if not isinstance(v, int) or isinstance(v, bool):
        return str(v)
    if v >= 90000:      # cuDNN 9: major * 10000 + minor * 100 + patch
        parts = (v // 10000, v // 100 % 100, v % 100)
    else:
        parts = (v // 1000, v // 100 % 10, v % 100)
    return ".".join(map(str, parts if patch else parts[:2]))


def _matches(info: Optional[dict], gpu: Optional[str], cudnn_version: Optional[int]) -> bool:
    return info is not None and (gpu is None or info.get("gpu") == gpu) and (
        cudnn_version is None or info.get("cudnn_version") == cudnn_version)


# ---------------------------------------------------------------------------------------------
# benchmarking into the cache
# ---------------------------------------------------------------------------------------------

def _say(progress: Progress, text: str) -> None:
    if progress is not None:
        progress(text)


def _fill(layers, ops: Sequence[str], sizes_of: Callable, cache, *, math: str, dtype: str,
          repeats: int, workspace_cap: Optional[int], force: bool, progress: Progress,
          only=None, search_limit: Optional[int] = None, engines: str = "legacy",
          determinism: bool = False) -> Benches:
    """Measure what ``cache`` lacks on this GPU; ``{(layer, op): {batch: [AlgoPerf]}}``
    (``only``: the ``(layer, op)`` pairs to do, default all; ``search_limit``: policy all
    through the pruned search within that limit, :func:`~.live.plan_kernels`; ``engines``: the
    families to measure, each its own cache entry, their choices merged per size;
    ``determinism``: sizes cached with a choice of unknown determinism measured again, Note
    [Deterministic plans] in ucudnn/plan/dp.py)."""
    kernels = [(l, op) for l in layers for op in ops if op in l.ops
               and (only is None or (l.name, op) in only)]
    t0 = time.perf_counter()
    if search_limit is not None:
        def said(i, l, op, kern):
            _say(progress, f"[{i}/{len(kernels)}] {l.name} {op}: pruned search looked at "
                 f"{len(planner_state(kern).bench)} sizes, "
                 f"elapsed {time.perf_counter() - t0:.1f} s")
        # the sizes the pruned search measured go into the cache; its benches are those
        settings = PlanSettings(policy="all", limit=search_limit, search="pruned",
                                cache_path=str(cache.path), repeats=repeats, math=math,
                                dtype=dtype, engines=engines)
        return {(l.name, op): dict(planner_state(k).bench) for l, op, k in plan_kernels(
            kernels, settings, workspace_cap=workspace_cap, done=said)}
    benches: Benches = {}
    families = ENGINE_FAMILIES[ENGINE(engines, "engines")]
    for i, (l, op) in enumerate(kernels, start=1):
        benches[l.name, op] = bench.merge_families([
            _fill_kernel(cache, l, op, family, sizes_of(l), math=math, dtype=dtype,
                         repeats=repeats, workspace_cap=workspace_cap, force=force,
                         progress=progress, t0=t0, determinism=determinism,
                         head=f"[{i}/{len(kernels)}] {l.name} {op}"
                         + ("" if family == "legacy" else f" ({family})"))
            for family in families])
    return benches


def _fill_kernel(cache, l, op: str, family: str, sizes, *, math: str, dtype: str,
                 repeats: int, workspace_cap: Optional[int], force: bool, progress: Progress,
                 t0: float, head: str, determinism: bool = False):
    """One kernel's family at ``sizes``, from ``cache`` or measured into it."""
    shape = ConvShape.from_layer(l)
    key = bench.cache_key(shape, op, math, dtype, workspace_cap=workspace_cap,
                          family=family)
    measured = []

    def measure(missing, shape=shape, op=op, n=l.n, head=head, sizes=sizes):
        measured.append(missing)
        done = []

        def step(*a, **kw):
            done.append(a[0] if a else None)
            _say(progress, f"{head}: {len(done)}/{len(missing)} sizes done, "
                 f"elapsed {time.perf_counter() - t0:.1f} s")
        _say(progress, f"{head}: measuring {len(missing)} of {len(sizes)} sizes "
             f"({len(sizes) - len(missing)} cached)")
        results = bench.benchmark_kernel(shape, op, n, missing, repeats=repeats, math=math,
                                         dtype=dtype, workspace_cap=workspace_cap,
                                         progress=step, engines=family)
        _say(progress, f"{head}: done, elapsed {time.perf_counter() - t0:.1f} s")
        return results

    got = bench.fill_known(cache, key, sizes, measure, repeats, force=force,
                           determinism=determinism)
    if not measured:
        _say(progress, f"{head}: {len(sizes)} sizes cached")
    return got


def _open_cache(path, create: bool = True, readonly: Optional[bool] = None):
    """The cache at ``path`` (default: $UCUDNN_CACHE or ~/.cache/...); None if the file is
    absent and not ``create``."""
    p = Path(path).expanduser() if path is not None else default_cache_path()
    if not create and not p.exists():
        return None
    return BenchCache(p, readonly=readonly)


def benchmark_layers(layers, *, policy: str = "powerOfTwo", sizes: Optional[Sequence[int]] = None,
                     ops: Sequence[str] = OPS, cache_path=None, math: str = "default",
                     dtype: str = "float32", repeats: int = FIND_REPEATS,
                     workspace_cap: Optional[int] = None, force: bool = False,
                     progress: Progress = None,
                     shard: Optional[Tuple[int, int]] = None,
                     search_limit: Optional[int] = None,
                     engines: str = "legacy") -> Tuple[Benches, str]:
    """Benchmark ``layers`` on this GPU into the cache (what it lacks; everything with
    ``force``). Returns the benchmarks and the cache's path. :class:`SourceError` without a
    GPU (the cache is then not created). ``shard=(i, n)``: only the kernels that
    :func:`shard_kernels` gives to shard ``i`` of ``n`` (one GPU's part of ``bench
    --devices``). ``search_limit``: policy ``all`` measured by the pruned search within this
    workspace limit instead of at every size (not with ``force``). ``engines``: the families
    of choices to measure (Note [Choices] in ucudnn/vocab.py)."""
    info, reason = device_status()
    if info is None:
        raise SourceError(f"bench needs a GPU: no GPU visible: {reason}")
    sizes_of = lambda l: candidate_sizes(policy, l.n, sizes)        # noqa: E731
    kernels = None
    if shard is not None:
        i, n = shard
        kernels = set(shard_kernels(layers, ops, sizes_of, n)[i])
    with _open_cache(cache_path) as cache:
        benches = _fill(layers, ops, sizes_of, cache, math=math, dtype=dtype, repeats=repeats,
                        workspace_cap=workspace_cap, force=force, progress=progress,
                        only=kernels, search_limit=search_limit, engines=engines)
        return benches, str(cache.path)


def shard_kernels(layers, ops: Sequence[str], sizes_of: Callable,
                  n: int) -> List[List[Tuple[str, str]]]:
    """The kernels ``(layer, op)`` of ``layers`` split into ``n`` shards of about equal
    :func:`kernel_cost` (largest first, each to the cheapest shard so far); deterministic, so
    every process of ``bench --devices`` computes the same split."""
    if not isinstance(n, int) or n < 1:
        raise InputError(f"shards: need a positive count, got {n!r}")
    kernels = [(kernel_cost(l, op, sizes_of(l)), l.name, op)
               for l in layers for op in ops if op in l.ops]
    shards: List[List[Tuple[str, str]]] = [[] for _ in range(n)]
    load = [0.0] * n
    for cost, name, op in sorted(kernels, key=lambda k: (-k[0], k[1], k[2])):
        i = min(range(n), key=lambda j: (load[j], j))
        shards[i].append((name, op))
        load[i] += cost
    return shards


# ---------------------------------------------------------------------------------------------
# the shipped data
# ---------------------------------------------------------------------------------------------

def shipped_meta() -> dict:
    """What the shipped benchmark data was measured with (gpu, cudnn_version, dtype, math...)."""
    return shipped.meta()


# ---------------------------------------------------------------------------------------------
# gathering benchmarks for a plan
# ---------------------------------------------------------------------------------------------

def _cache_candidates(cache, info, *, gpu, cudnn_version, math, dtype, workspace_cap):
    """``(label, gpu, cudnn_version, keyfn)`` for looking layers up in the cache."""
    cap = DEFAULT_WORKSPACE_CAP if workspace_cap is None else workspace_cap
    if gpu is None and cudnn_version is None and info is not None:
        combos = [(info.get("gpu"), info.get("cudnn_version"))]
    else:
        combos = sorted({(k.gpu, k.cudnn_version) for k in cache.keys(include_legacy=False)
                         if (gpu is None or k.gpu == gpu)
                         and (cudnn_version is None or k.cudnn_version == cudnn_version)
                         and k.math == math and k.dtype == dtype})
    out = []
    for g, v in combos:
        def keyfn(l, op, g=g, v=v):
            return CacheKey(g, v, dtype, math, op, ConvShape.from_layer(l), cap)
        out.append((f"{g}, cuDNN {format_cudnn(v)}", g, v, keyfn))
    return out


def _from_cache(cache, layers, keyfn, sizes_of) -> Tuple[Optional[Benches], bool]:
    """(benches, complete), or (None, False) when a kernel lacks its mini-batch size N."""
    benches, complete = {}, True
    for l in layers:
        for op in l.ops:
            want = sizes_of(l)
            got = cache.get_many(keyfn(l, op), want)
            if l.n not in got:
                return None, False
            complete &= len(got) == len(want)
            benches[l.name, op] = got
    return benches, complete


def _from_tables(layers, tables: Sequence, texts: Mapping[str, str]) -> Gathered:
    rows: List[BenchRow] = []
    for path in tables:
        rows += read_table(path, texts.get(path))
    benches = group_by_kernel(rows)
    names = sorted({layer for layer, _ in benches})
    missing = [l.name for l in layers if not any((l.name, op) in benches for op in l.ops)]
    if missing:
        raise SourceError(f"--table: no measurements for layer(s) {missing} (the table has "
                          f"{names[:12]}{' ...' if len(names) > 12 else ''})")
    # a layer the tables have is planned in every op it runs
    partial = [f"{l.name} {op}" for l in layers for op in l.ops if (l.name, op) not in benches]
    if partial:
        raise SourceError(f"--table: no measurements for {_list(partial)} (a layer needs "
                          "fwd and bwd_filter, and bwd_data unless it is the net's first)")
    return Gathered(benches, Source("table", ", ".join(map(str, tables))))


def _list(names: Sequence[str], most: int = 6) -> str:
    names = list(dict.fromkeys(names))
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most
                                      else "")


def gather(layers, *, policy: str = "powerOfTwo", sizes: Optional[Sequence[int]] = None,
           tables: Optional[Sequence] = None, texts: Optional[Mapping[str, str]] = None,
           cache_path=None, gpu: Optional[str] = None,
           cudnn_version: Optional[int] = None, math: str = "default", dtype: str = "float32",
           workspace_cap: Optional[int] = None, repeats: int = FIND_REPEATS,
           benchmark: bool = True, strict: bool = False, progress: Progress = None,
           determinism: bool = False) -> Gathered:
    """Benchmarks of every kernel of ``layers`` (Note [Where plan gets its benchmark data]).

    ``gpu``/``cudnn_version`` ask for data of that device (default: the visible GPU, or any in
    the cache or the shipped data); ``math``/``dtype`` for data measured so; ``workspace_cap``
    for measurements offered at least that much workspace (default: the core's 8 GiB).
    ``texts``: {table path: its text} where the caller has read the ``tables`` already.
    ``benchmark=False`` never measures. ``strict``: the shipped data must hold every
    micro-batch size the policy names (else it answers with the sizes it has, noted and marked
    incomplete, as the planner then skips the others). Without benchmarking the cache is opened read-only,
    and the default cache is never created. ``progress(text)`` hears what is measured.
    ``determinism``: with a GPU to measure on, a cached size holding a choice of unknown
    determinism counts as missing (Note [Deterministic plans] in ucudnn/plan/dp.py).
    """
    sizes_of = lambda l: candidate_sizes(policy, l.n, sizes)        # noqa: E731
    if tables:
        return _from_tables(layers, tables, texts or {})

    info, reason = device_status()
    use_gpu = benchmark and _matches(info, gpu, cudnn_version)
    cache = _open_cache(cache_path, create=use_gpu, readonly=None if use_gpu else True)
    asked = f"{dtype}, math {math}" + (f", {gpu}" if gpu else "") + (
        f", cuDNN {format_cudnn(cudnn_version)}" if cudnn_version else "")
    partial: Optional[Gathered] = None
    try:
        if cache is not None:
            for label, g, v, keyfn in _cache_candidates(cache, info, gpu=gpu,
                                                        cudnn_version=cudnn_version, math=math,
                                                        dtype=dtype, workspace_cap=workspace_cap):
                benches, complete = _from_cache(cache, layers, keyfn, sizes_of)
                if use_gpu and determinism and benches is not None and any(
                        bench.unknown_determinism(b) for b in benches.values()):
                    complete = False
                src = Source("cache", f"{cache.path} ({label})", g, v, dtype, math, complete)
                if benches is not None and complete:
                    return Gathered(benches, src)
                if benches is not None and partial is None:
                    partial = Gathered(benches, src, [
                        f"the cache {cache.path} lacks some micro-batch sizes of policy "
                        f"{policy} ({label}); planning with those it has"])
            in_cache = f"the cache {cache.path} does not hold them ({asked})"
        else:
            in_cache = f"there is no cache at {cache_path or default_cache_path()}"
        if use_gpu:
            _say(progress, f"benchmarking the missing micro-batch sizes on "
                 f"{info.get('gpu', 'the GPU')} ({dtype}, math {math}) into {cache.path}")
            benches = _fill(layers, OPS, sizes_of, cache, math=math, dtype=dtype,
                            repeats=repeats, workspace_cap=workspace_cap, force=False,
                            progress=progress, determinism=determinism)
            return Gathered(benches, Source("benchmark", str(cache.path), info.get("gpu"),
                                            info.get("cudnn_version"), dtype, math))
    finally:
        if cache is not None:
            cache.close()

    if info is None:
        no_gpu = f"no GPU is visible ({reason})"
    elif not benchmark:
        no_gpu = "benchmarking was not asked for"
    else:
        no_gpu = (f"the visible GPU ({info.get('gpu')}, cuDNN "
                  f"{format_cudnn(info.get('cudnn_version'))}) is not the one asked for")

    # the shipped data, found by kernel shape (Note [Shipped data is never stretched])
    meta = shipped.meta()
    short = str(meta["gpu"]).replace("NVIDIA ", "")
    benches, missing = shipped.lookup(layers, math=math, dtype=dtype, gpu=gpu,
                                      cudnn_version=cudnn_version,
                                      workspace_cap=workspace_cap or 0,
                                      sizes_of=sizes_of, require_all_sizes=strict)
    if not missing:
        complete = all(set(sizes_of(l)) <= set(benches[l.name, op])
                       for l in layers for op in l.ops)
        src = Source("shipped", f"ucudnn/data/{shipped.DATA} ({meta['gpu']}, cuDNN "
                     f"{format_cudnn(meta['cudnn_version'])}, {meta['dtype']}, math "
                     f"{meta['math']}; matched by kernel shape)", meta["gpu"],
                     meta["cudnn_version"], meta["dtype"], meta["math"], complete)
        lead = "no GPU" if info is None else no_gpu
        return Gathered(benches, src, [
            f"{lead}: planning from the shipped {short} benchmark data (cuDNN "
            f"{format_cudnn(meta['cudnn_version'], patch=False)})"])
    if partial is not None:
        return partial
    reasons = list(dict.fromkeys(missing.values()))
    names = [name for name, _ in missing]
    if len(reasons) == 1 and len(names) == sum(len(l.ops) for l in layers):
        in_shipped = f"the shipped {short} data cannot answer ({reasons[0]})"
    else:
        in_shipped = (f"the shipped {short} data lacks layer(s) {_list(names)} "
                      f"({reasons[0]}{'; ...' if len(reasons) > 1 else ''})")
    raise SourceError(
        f"no benchmark data for these layers: {no_gpu}, {in_cache}, and {in_shipped}. "
        "To plan them, measure them on a GPU with what you ask for ('ucudnn bench ... --csv "
        "OUT' there), then pass --table OUT here, or 'ucudnn cache import OUT' with the same "
        "layers and plan with --cache (the cache matches layers by shape, not name)")


def gather_net(layers, settings, *, tables: Optional[Sequence] = None,
               texts: Optional[Mapping[str, str]] = None, cache_path=None,
               gpu: Optional[str] = None, cudnn_version: Optional[int] = None,
               benchmark: bool = True, strict: bool = False,
               progress: Progress = None) -> Gathered:
    """:func:`gather` for a net whose layers have their own settings (``{layer name:
    PlanSettings}``): one gather per group of layers measured alike (sizes, math, dtype,
    repeats), each with the workspace its plans may use offered, and the Winograd algorithms
    left out where a layer's settings ask."""
    # Note [Predictions from legacy measurements]
    #     Shipped data, tables and the command line's gathering hold the legacy family's
    #     measurements only; the graph family is measured and planned where the net runs
    #     (the C API's ucudnn_net_plan, scripts/bench_engines.py). A layer asking for GRAPH
    #     alone is refused: no plan of this data is one Caffe could run. A layer asking for
    #     BOTH (ucudnn_param's default) is planned from the legacy family, and the notes say
    #     so: Caffe's plan can only be as fast or faster, each size taking the faster family.
    graph = sorted(l.name for l in layers if settings[l.name].engines == "graph")
    if graph:
        raise InputError(f"layer {graph[0]!r}: field 'ucudnn_param.engines': GRAPH is planned "
                         "where the net runs (Caffe through the C API); ucudnn plan predicts "
                         f"from the legacy family only ({len(graph)} layer(s) ask for GRAPH)")
    both = [l.name for l in layers if settings[l.name].engines == "both"]
    need = plan_workspace(settings, layers)     # Note [Workspace a plan may use]
    groups: Dict[tuple, list] = {}
    for l in layers:
        s = settings[l.name]
        groups.setdefault((s.policy, s.sizes, s.math, s.dtype, s.repeats, s.deterministic),
                          []).append(l)
    benches: Benches = {}
    sources, notes = [], []
    for (policy, sizes, math, dtype, repeats, determinism), group in groups.items():
        got = gather(group, policy=policy, sizes=sizes, tables=tables, texts=texts,
                     cache_path=cache_path,
                     gpu=gpu, cudnn_version=cudnn_version, math=math, dtype=dtype,
                     workspace_cap=min(max(need[l.name] for l in group), DEFAULT_WORKSPACE_CAP),
                     repeats=repeats, benchmark=benchmark, strict=strict, progress=progress,
                     determinism=determinism)
        for l in group:
            for op in l.ops:
                b = got.benches[l.name, op]
                if settings[l.name].exclude_winograd:
                    b = without_algorithms(b, WINOGRAD_ALGOS[op])
                benches[l.name, op] = b
        sources.append(got.source)
        notes += [n for n in got.notes if n not in notes]
    if both:
        notes.append(f"engines BOTH ({len(both)} of {len(layers)} layers): planned from the "
                     "legacy family's measurements, which ucudnn plan has; where the net runs "
                     "each micro-batch size also takes the graph API's engine configs when "
                     "faster (Note [Predictions from legacy measurements])")
    if len(sources) == 1:
        return Gathered(benches, sources[0], notes)
    kinds = sorted({src.kind for src in sources})
    src = dataclasses.replace(sources[0], kind=kinds[0] if len(kinds) == 1 else "mixed",
                              detail="; ".join(dict.fromkeys(x.detail for x in sources)))
    notes.append(f"layers measured differently (their ucudnn_param): {len(groups)} groups "
                 "gathered separately")
    return Gathered(benches, src, notes)


# ---------------------------------------------------------------------------------------------
# the cache: import, export, listing
# ---------------------------------------------------------------------------------------------

def resolve_device(gpu: Optional[str], cudnn_version: Optional[int], *, cache=None,
                   math: str = "default") -> Tuple[str, int]:
    """(gpu, cudnn_version): as given, else the visible GPU's, else the only one in ``cache``."""
    if gpu is None or cudnn_version is None:
        info, _ = device_status()
        if info is not None:
            gpu = gpu if gpu is not None else info.get("gpu")
            cudnn_version = cudnn_version if cudnn_version is not None else info.get(
                "cudnn_version")
    if (gpu is None or cudnn_version is None) and cache is not None:
        combos = {(k.gpu, k.cudnn_version) for k in cache.keys()
                  if (gpu is None or k.gpu == gpu)
                  and (cudnn_version is None or k.cudnn_version == cudnn_version)}
        if len(combos) == 1:
            gpu, cudnn_version = combos.pop()
        elif len(combos) > 1:
            raise SourceError(f"--gpu: the cache holds several GPUs / cuDNN versions "
                              f"{sorted(combos)}; choose with --gpu and --cudnn-version")
    if gpu is None:
        raise SourceError("--gpu: needed when no GPU is visible (e.g. --gpu 'NVIDIA H200')")
    if cudnn_version is None:
        raise SourceError("--cudnn-version: needed when no GPU is visible (e.g. 91400)")
    return gpu, cudnn_version


def import_table(table, layers, *, cache_path=None, gpu: Optional[str] = None,
                 cudnn_version: Optional[int] = None, dtype: str = "float32",
                 math: str = "default", repeats: int = 1,
                 text: Optional[str] = None) -> Tuple[int, int, str, str, int]:
    """Store the table at ``table`` in the cache, keyed by the shapes of ``layers``; ``text``:
    its text where the caller has read it already.

    Returns (entries written, rows read, cache path, gpu, cudnn_version)."""
    rows = read_table(table, text)
    names = {l.name for l in layers}
    unknown = sorted({r.layer for r in rows if r.layer not in names})
    if unknown:
        raise SourceError(f"table: {table}: layer(s) {unknown} are not in the layer list "
                          f"({', '.join(sorted(names)) or 'empty'})")
    gpu, cudnn_version = resolve_device(gpu, cudnn_version, math=math)
    with _open_cache(cache_path) as cache:
        n = cache.import_table(rows, layers, gpu=gpu, cudnn_version=cudnn_version, dtype=dtype,
                               math=math, repeats=repeats)
        return n, len(rows), str(cache.path), gpu, cudnn_version


def export_rows(layers, *, cache_path=None, gpu: Optional[str] = None,
                cudnn_version: Optional[int] = None, dtype: str = "float32",
                math: str = "default") -> List[BenchRow]:
    """Every cached measurement of ``layers`` as table rows; :class:`SourceError` if none
    (CacheError if there is no cache: nothing is created)."""
    with BenchCache(cache_path, readonly=True) as cache:      # read as it is
        gpu, cudnn_version = resolve_device(gpu, cudnn_version, cache=cache, math=math)
        rows = cache.export_rows(layers, gpu=gpu, cudnn_version=cudnn_version, dtype=dtype,
                                 math=math)
        if not rows:
            raise SourceError(f"no cached measurements for these layers ({gpu}, cuDNN "
                              f"{format_cudnn(cudnn_version)}, {dtype}, math {math}) in "
                              f"{cache.path}")
        return rows


def cache_listing(cache_path=None) -> Tuple[str, int, list]:
    """(path, number of entries, [(CacheKey, [batches])]); CacheError ``no cache at PATH``
    for an absent file (nothing is created)."""
    with BenchCache(cache_path, readonly=True) as cache:      # read as it is
        return str(cache.path), len(cache), cache.entries()
