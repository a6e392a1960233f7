"""The ``ucudnn`` command: device info, benchmarking, planning and the benchmark cache.

    ucudnn info [--json]
    ucudnn bench (--net NET | --layers CSV | --prototxt FILE) [--batch N] [--policy P | --sizes L]
                 [--ops fwd,bwd_data,bwd_filter] [--repeats 3] [--math M] [--workspace-cap SIZE]
                 [--cache PATH] [--csv OUT] [--force]
    ucudnn plan [--net NET | --layers CSV | --prototxt FILE] [--table CSV ...] [--cache PATH]
                [--policy P | --sizes L] [--limit SIZE] [--budget SIZE] [--optimizer dp|ilp]
                [--batch N] [--math M] [--gpu NAME] [--cudnn-version V] [--json] [--strict]
    ucudnn cache {list,import,export} ...

Errors in the input are reported as one line ``ucudnn: error: <field>: <what>`` on stderr with
exit status 2; notes go to stderr as ``ucudnn: note: ...``.

Note [Where plan gets its benchmark data]
    1. ``--table`` files, if given;
    2. else the cache (``--cache``, or the default cache if that file exists) when it holds
       every kernel at every micro-batch size the policy names (with a GPU visible: the entries
       of that GPU; without one: ``--gpu``/``--cudnn-version`` or the only GPU in the cache);
    3. else, with a GPU visible, the missing sizes are benchmarked into the cache;
    4. else for ``--net`` the H200 tables shipped in ``ucudnn/data/h200``;
    5. else an incomplete cache (planning with the sizes it has, with a note), or an error.

Note [plan --json]
    A JSON object with the keys
    ``ucudnn_version``; ``network`` (net name or file); ``source`` {``kind``: table | cache |
    benchmark | shipped, ``detail``}; ``batch``; ``policy``; ``sizes`` (explicit list or null);
    ``optimizer`` (dp | ilp); ``limit_bytes``; ``budget_bytes`` (ILP, else null);
    ``baseline_limit_bytes`` (workspace per kernel of the undivided baseline);
    ``kernels``: a list, one per kernel instance, of {``kernel``, ``layer``, ``op``,
    ``instance``, ``plan`` (Plan.describe()), ``micro_batches``, ``chunks`` [{``batch``,
    ``algo``, ``math``, ``time_ms``, ``ws_bytes``}], ``time_ms``, ``ws_bytes``,
    ``undivided_plan``, ``undivided_time_ms``, ``undivided_ws_bytes``, ``speedup``};
    ``totals`` {``kernels``, ``undivided_time_ms``, ``time_ms``, ``speedup``, ``ws_bytes``,
    ``undivided_ws_bytes``}; ``solver`` {``name`` (dp | cbc), ``seconds``, ``status``,
    ``variables``}; ``ilp`` (null for dp) {``budget_bytes``, ``baseline_limit_bytes``,
    ``expected_speedup`` (vs. undivided at the same total memory)}; ``notes`` (list of text).
    Speedups that are undefined (zero time) are null.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..plan.table import OPS, TableError

__all__ = ["main", "build_parser", "CliError"]

PROG = "ucudnn"
NETS = ("alexnet", "resnet18")
SHIPPED = "h200"


class CliError(Exception):
    """A bad command line; the message starts with the option it concerns."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``ucudnn plan: error: ...``) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------

def _version() -> str:
    import ucudnn
    v = getattr(ucudnn, "__version__", None)
    if v:
        return str(v)
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("ucudnn")
    except (ImportError, PackageNotFoundError):
        return "unknown (not installed)"


def _note(msg: str) -> None:
    print(f"{PROG}: note: {msg}", file=sys.stderr)


def _format_cudnn(v: Optional[int], patch: bool = True) -> str:
    """91400 -> ``9.14.0`` (``9.14`` without ``patch``); 8905 -> ``8.9.5``."""
    if not isinstance(v, int):
        return str(v)
    if v >= 90000:      # cuDNN 9: major * 10000 + minor * 100 + patch
        parts = (v // 10000, v // 100 % 100, v % 100)
    else:
        parts = (v // 1000, v // 100 % 10, v % 100)
    return ".".join(map(str, parts if patch else parts[:2]))


def _size(text: Optional[str], field: str) -> Optional[int]:
    from ..vocab import parse_size
    if text is None:
        return None
    return parse_size(text, field)      # ValueError("--limit: ...")


def _sizes(text: Optional[str]) -> Optional[List[int]]:
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            v = 0
        if v < 1:
            raise CliError(f"--sizes: expected comma-separated positive integers, got {text!r}")
        out.append(v)
    return sorted(set(out))


def _policy(text: str) -> str:
    from ..plan.dp import POLICIES, PlanError, normalise_policy
    try:
        return normalise_policy(text)
    except PlanError:
        raise CliError(f"--policy: unknown policy {text!r} (expected one of "
                       f"{', '.join(POLICIES)})") from None


def _math(text: str) -> str:
    from ..vocab import MATH_MODES
    if text not in MATH_MODES:
        raise CliError(f"--math: unknown math mode {text!r} (expected one of "
                       f"{', '.join(MATH_MODES)})")
    return text


def _dtype(text: str) -> str:
    from ..vocab import DTYPES
    if text not in DTYPES:
        raise CliError(f"--dtype: unknown dtype {text!r} (expected one of {', '.join(DTYPES)})")
    return text


def _ops(text: str) -> List[str]:
    ops = [o.strip() for o in text.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise CliError(f"--ops: unknown op(s) {bad or [text]} (expected a comma-separated "
                       f"subset of {','.join(OPS)})")
    return [o for o in OPS if o in ops]


def _positive(value: Optional[int], field: str) -> Optional[int]:
    if value is not None and value < 1:
        raise CliError(f"{field}: must be a positive integer, got {value}")
    return value


def _gpu_status() -> Tuple[Optional[dict], str]:
    """(device_info(), "") with a usable GPU, else (None, reason)."""
    try:
        from ..measure import bench
    except ImportError as e:
        return None, f"the GPU benchmark module is unavailable ({e})"
    try:
        return bench.device_info(), ""
    except (RuntimeError, OSError) as e:
        return None, str(e) or type(e).__name__


def _core_status() -> Tuple[str, str]:
    """("ok" | "missing" | "error", detail) of the compiled core, imported only here."""
    import importlib
    import importlib.util
    try:
        spec = importlib.util.find_spec("ucudnn._core")
    except (ImportError, ValueError) as e:
        return "error", str(e)
    if spec is None:
        return "missing", "ucudnn._core is not built (pip install . on a machine with CUDA/cuDNN)"
    try:
        mod = importlib.import_module("ucudnn._core")
    except Exception as e:      # noqa: BLE001 - any failure to load is reported, not raised
        return "error", f"ucudnn._core is built but cannot be loaded: {e}"
    return "ok", getattr(mod, "__file__", None) or spec.origin or "ucudnn._core"


def _shipped(name: str):
    """A traversable for a file of the shipped H200 data."""
    from importlib import resources
    return resources.files("ucudnn") / "data" / SHIPPED / name


def _shipped_meta() -> dict:
    return json.loads(_shipped("meta.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# layers
# ---------------------------------------------------------------------------------------------

def _add_layer_source(p: argparse.ArgumentParser, default_net: bool) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--net", help="a shipped network: " + ", ".join(NETS) +
                   (" (default: alexnet)" if default_net else ""))
    g.add_argument("--layers", metavar="CSV", help="a layer list (name,N,C,H,W,K,R,S,pad,stride"
                   ",dilation,groups,count,bwd_data)")
    g.add_argument("--prototxt", metavar="FILE", help="a Caffe network definition; every "
                   "Convolution layer of --phase")
    p.add_argument("--phase", default="TRAIN", choices=("TRAIN", "TEST"),
                   help="phase of --prototxt (default TRAIN)")
    p.add_argument("--batch", type=int, metavar="N", help="replace the mini-batch size")


def _load_layers(args, default_net: Optional[str]):
    """(layers, label, net name or None)."""
    from ..plan.network import read_layers
    from ..caffe.prototxt import read_prototxt
    batch = _positive(args.batch, "--batch")
    if args.prototxt:
        layers = read_prototxt(args.prototxt, phase=args.phase, batch=batch)
        return layers, args.prototxt, None
    if args.layers:
        if not os.path.isfile(args.layers):
            raise CliError(f"--layers: cannot read {args.layers!r}: no such file")
        layers, label, net = read_layers(args.layers), args.layers, None
    else:
        net = args.net or default_net
        if net is None:
            raise CliError("one of --net, --layers or --prototxt is required")
        if net not in NETS:
            raise CliError(f"--net: unknown network {net!r} (expected one of {', '.join(NETS)})")
        from importlib import resources
        with resources.as_file(_shipped(f"{net}_layers.csv")) as path:
            layers = read_layers(path)
        label = net
    if batch is not None:
        layers = [dataclasses.replace(l, n=batch) for l in layers]
    return layers, label, net


# ---------------------------------------------------------------------------------------------
# benchmarking into the cache
# ---------------------------------------------------------------------------------------------

def _benchmark(layers, ops: Sequence[str], sizes_of: Callable, cache, *, math_mode: str,
               repeats: int, workspace_cap: Optional[int], force: bool) -> Dict:
    """Measure what the cache lacks; returns {(layer, op): {batch: [AlgoPerf]}}."""
    from ..measure import bench
    from ..plan.conv import ConvShape
    t0 = time.perf_counter()
    kernels = [(l, op) for l in layers for op in ops if op in l.ops]
    benches = {}
    for i, (l, op) in enumerate(kernels, start=1):
        shape = ConvShape.from_layer(l)
        key = bench.cache_key(shape, op, math_mode)
        sizes = sizes_of(l)
        head = f"[{i}/{len(kernels)}] {l.name} {op}"

        measured = []

        def measure(missing, shape=shape, op=op, n=l.n, head=head):
            measured.append(missing)
            done = []

            def progress(*a, **kw):
                done.append(a[0] if a else None)
                print(f"{head}: {len(done)}/{len(missing)} sizes done, "
                      f"elapsed {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            print(f"{head}: measuring {len(missing)} of {len(sizes)} sizes "
                  f"({len(sizes) - len(missing)} cached)", file=sys.stderr)
            results = bench.benchmark_kernel(shape, op, n, missing, repeats=repeats,
                                             math=math_mode, workspace_cap=workspace_cap,
                                             progress=progress)
            print(f"{head}: done, elapsed {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            return results

        benches[l.name, op] = cache.fill(key, sizes, measure, repeats, force=force)
        if not measured:
            print(f"{head}: {len(sizes)} sizes cached", file=sys.stderr)
    return benches


def _open_cache(path: Optional[str], create: bool = True):
    """The cache at ``path`` (default: $UCUDNN_CACHE or ~/.cache/...); None if absent and not
    ``create``."""
    from ..measure.cache import BenchCache, default_cache_path
    p = path if path is not None else default_cache_path()
    if not create and not os.path.exists(p):
        return None
    return BenchCache(p)


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------

def cmd_info(args) -> int:
    info, reason = _gpu_status()
    core, core_detail = _core_status()
    if args.json:
        print(json.dumps({"ucudnn_version": _version(), "core": {"status": core,
                          "detail": core_detail}, "gpu": info, "no_gpu_reason": reason or None},
                         indent=2, sort_keys=True, default=str))
        return 0
    print(f"ucudnn {_version()}")
    print(f"compiled core: {core} ({core_detail})" if core != "ok" else
          f"compiled core: ok ({core_detail})")
    if info is None:
        print(f"no GPU visible: {reason}")
    else:
        for k, v in info.items():
            print(f"{k}: {_format_cudnn(v) if k.startswith('cudnn') else v}")
    return 0


def _need_gpu(what: str) -> None:
    info, reason = _gpu_status()
    if info is None:
        raise CliError(f"{what} needs a GPU: no GPU visible: {reason}")


def cmd_bench(args) -> int:
    from ..plan.dp import candidate_sizes
    from ..plan.table import rows_from_kernel, write_table
    if not (args.net or args.layers or args.prototxt):
        raise CliError("one of --net, --layers or --prototxt is required")
    policy = _policy(args.policy) if args.policy else "powerOfTwo"
    sizes = _sizes(args.sizes)
    ops = _ops(args.ops)
    math_mode = _math(args.math)
    _positive(args.repeats, "--repeats")
    cap = _size(args.workspace_cap, "--workspace-cap")
    layers, label, _ = _load_layers(args, None)
    _need_gpu("bench")
    with _open_cache(args.cache) as cache:
        benches = _benchmark(layers, ops, lambda l: candidate_sizes(policy, l.n, sizes), cache,
                             math_mode=math_mode, repeats=args.repeats, workspace_cap=cap,
                             force=args.force)
    if args.csv:
        rows = [r for (layer, op), b in benches.items() for r in rows_from_kernel(layer, op, b)]
        write_table(args.csv, rows)
        print(f"wrote {len(rows)} rows to {args.csv}", file=sys.stderr)
    return 0


def _cache_benches(cache, layers, keyfn, sizes_of):
    """({(layer, op): {batch: perfs}}, complete) or (None, False) when a kernel lacks size N."""
    benches, complete = {}, True
    for l in layers:
        for op in l.ops:
            key = keyfn(l, op)
            want = sizes_of(l)
            got = cache.get_many(key, want)
            if l.n not in got:
                return None, False
            complete &= len(got) == len(want)
            benches[l.name, op] = got
    return benches, complete


def _cache_candidates(cache, args):
    """Key factories ``(label, keyfn)`` for looking layers up in the cache."""
    from ..measure.cache import CacheKey
    from ..plan.conv import ConvShape
    math_mode, dtype = _math(args.math), _dtype(args.dtype)
    if args.gpu or args.cudnn_version is not None:
        combos = sorted({(k.gpu, k.cudnn_version) for k in cache.keys()
                         if (args.gpu is None or k.gpu == args.gpu)
                         and (args.cudnn_version is None or k.cudnn_version == args.cudnn_version)})
    else:
        info, _ = _gpu_status()
        if info is not None:
            from ..measure import bench
            return [("this GPU", lambda l, op: bench.cache_key(ConvShape.from_layer(l), op,
                                                                math_mode))]
        combos = sorted({(k.gpu, k.cudnn_version) for k in cache.keys()
                         if k.math == math_mode and k.dtype == dtype})
    return [(f"{g}, cuDNN {_format_cudnn(v)}",
             (lambda g, v: lambda l, op: CacheKey(g, v, dtype, math_mode, op,
                                                  ConvShape.from_layer(l)))(g, v))
            for g, v in combos]


def _gather(args, layers, net, policy, sizes) -> Tuple[Dict, dict, List[str]]:
    """Benchmarks for ``layers`` (see Note [Where plan gets its benchmark data])."""
    from ..plan.dp import candidate_sizes
    from ..plan.table import group_by_kernel, read_table
    notes: List[str] = []
    sizes_of = lambda l: candidate_sizes(policy, l.n, sizes)     # noqa: E731
    if args.table:
        rows = []
        for path in args.table:
            if not os.path.isfile(path):
                raise CliError(f"--table: cannot read {path!r}: no such file")
            try:
                rows += read_table(path)
            except TableError as e:
                raise CliError(f"--table: {e}") from None
        benches = group_by_kernel(rows)
        names = sorted({layer for layer, _ in benches})
        missing = [l.name for l in layers if not any((l.name, op) in benches for op in l.ops)]
        if missing:
            raise CliError(f"--table: no measurements for layer(s) {missing} (the table has "
                           f"{names[:12]}{' ...' if len(names) > 12 else ''})")
        return benches, {"kind": "table", "detail": ", ".join(args.table)}, notes

    info, reason = _gpu_status()
    cache = _open_cache(args.cache, create=args.cache is not None or info is not None)
    partial = None
    try:
        if cache is not None:
            for label, keyfn in _cache_candidates(cache, args):
                benches, complete = _cache_benches(cache, layers, keyfn, sizes_of)
                if benches is not None and complete:
                    return benches, {"kind": "cache", "detail": f"{cache.path} ({label})"}, notes
                if benches is not None and partial is None:
                    partial = (benches, {"kind": "cache", "detail": f"{cache.path} ({label})"})
        if info is not None:
            _note(f"benchmarking the missing micro-batch sizes on {info.get('gpu', 'the GPU')} "
                  f"into {cache.path}")
            benches = _benchmark(layers, [o for o in OPS], sizes_of, cache,
                                 math_mode=_math(args.math), repeats=3, workspace_cap=None,
                                 force=False)
            return benches, {"kind": "benchmark", "detail": str(cache.path)}, notes
    finally:
        if cache is not None:
            cache.close()

    if net is not None:
        meta = _shipped_meta()
        if args.math != meta["math"]:
            raise CliError(f"--math: the shipped {meta['gpu']} data was measured with math "
                           f"{meta['math']!r}, not {args.math!r}; pass --table")
        msg = (f"no GPU: planning from the shipped {meta['gpu'].replace('NVIDIA ', '')} "
               f"benchmark data (cuDNN {_format_cudnn(meta['cudnn_version'], patch=False)})")
        _note(msg)
        notes.append(msg)
        text = _shipped(f"{net}_bench.csv").read_text(encoding="utf-8")
        from ..plan.table import parse_table
        benches = group_by_kernel(parse_table(text, source=f"ucudnn/data/{SHIPPED}/{net}_bench.csv"))
        return benches, {"kind": "shipped", "detail": f"ucudnn/data/{SHIPPED} ({meta['gpu']}, "
                         f"cuDNN {_format_cudnn(meta['cudnn_version'])})"}, notes
    if partial is not None:
        msg = "the cache lacks some micro-batch sizes of the policy; planning with those it has"
        _note(msg)
        notes.append(msg)
        return partial[0], partial[1], notes
    where = f"the cache {cache.path}" if cache is not None else "no cache"
    raise CliError(f"no benchmark data for these layers: no GPU visible ({reason}) and "
                   f"{where} does not hold them; pass --table CSV with these layer names "
                   "(e.g. written by 'ucudnn bench --csv' on a GPU machine), or --cache PATH "
                   "after 'ucudnn cache import CSV --net/--layers ...' (the cache matches "
                   "layers by shape, not name)")


def _speedup(base: float, t: float) -> Optional[float]:
    return base / t if t > 0 else None


def _plan_json(plan, args, label, source, layers, solve_s) -> dict:
    kernels = []
    for k in plan.kernels:
        kernels.append({
            "kernel": k.name, "layer": k.layer, "op": k.op, "instance": k.instance,
            "plan": k.plan.describe(), "micro_batches": k.plan.micro_batches,
            "chunks": [dataclasses.asdict(c) for c in k.plan.chunks],
            "time_ms": k.plan.time_ms, "ws_bytes": k.plan.ws_bytes,
            "undivided_plan": k.baseline.describe(), "undivided_time_ms": k.baseline.time_ms,
            "undivided_ws_bytes": k.baseline.ws_bytes,
            "speedup": _speedup(k.baseline.time_ms, k.plan.time_ms),
        })
    batches = sorted({l.n for l in layers})
    doc = {
        "ucudnn_version": _version(), "network": label, "source": source,
        "batch": batches[0] if len(batches) == 1 else batches,
        "policy": plan.policy, "sizes": _sizes(args.sizes), "optimizer": plan.optimizer,
        "limit_bytes": plan.limit, "budget_bytes": plan.budget,
        "baseline_limit_bytes": plan.baseline_limit,
        "kernels": kernels,
        "totals": {"kernels": len(plan.kernels), "undivided_time_ms": plan.baseline_time_ms,
                   "time_ms": plan.time_ms,
                   "speedup": _speedup(plan.baseline_time_ms, plan.time_ms),
                   "ws_bytes": plan.ws_bytes,
                   "undivided_ws_bytes": sum(k.baseline.ws_bytes for k in plan.kernels)},
        "solver": ({"name": "cbc", "seconds": plan.ilp.solve_seconds, "status": plan.ilp.status,
                    "variables": plan.ilp.n_variables} if plan.ilp is not None else
                   {"name": "dp", "seconds": solve_s, "status": "Optimal", "variables": None}),
        "ilp": ({"budget_bytes": plan.budget, "baseline_limit_bytes": plan.baseline_limit,
                 "expected_speedup": _speedup(plan.baseline_time_ms, plan.time_ms)}
                if plan.ilp is not None else None),
        "notes": list(plan.notes),
    }
    return doc


def _plan_groups(plan):
    """Consecutive instances of one kernel with equal plans, as (label, KernelPlan, count)."""
    total: Dict[Tuple[str, str], int] = {}
    for k in plan.kernels:
        total[k.layer, k.op] = total.get((k.layer, k.op), 0) + 1
    groups: List[list] = []
    for k in plan.kernels:
        g = groups[-1] if groups else None
        if g and (g[0].layer, g[0].op) == (k.layer, k.op) and g[0].plan == k.plan:
            g[1].append(k.instance)
        else:
            groups.append([k, [k.instance]])
    out = []
    for k, inst in groups:
        base = f"{k.layer}/{k.op}"
        if len(inst) == total[k.layer, k.op]:
            label = base + (f" x{len(inst)}" if len(inst) > 1 else "")
        else:
            label = base + (f"#{inst[0]}" if len(inst) == 1 else f"#{inst[0]}-{inst[-1]} x{len(inst)}")
        out.append((label, k, len(inst)))
    return out


def _print_plan(doc, plan) -> None:
    from ..vocab import format_size
    rows = [("kernel", "micro-batches", "time(ms)", "workspace", "undivided(ms)", "speedup")]
    for label, k, _ in _plan_groups(plan):
        s = _speedup(k.baseline.time_ms, k.plan.time_ms)
        rows.append((label, k.plan.describe(), f"{k.plan.time_ms:.3f}",
                     format_size(k.plan.ws_bytes), f"{k.baseline.time_ms:.3f}",
                     f"{s:.2f}x" if s is not None else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"network {doc['network']}, batch {doc['batch']}, policy {doc['policy']}"
          + (f" (sizes {','.join(map(str, doc['sizes']))})" if doc["sizes"] else "")
          + f", data: {doc['source']['kind']} {doc['source']['detail']}")
    for r in rows:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    t = doc["totals"]
    print("(times and workspaces per kernel instance; xN: N instances per iteration)")
    base_ws = format_size(plan.baseline_limit)
    print(f"undivided total: {t['undivided_time_ms']:.3f} ms "
          f"(fastest single algorithm within {base_ws} per kernel)")
    print(f"planned total:   {t['time_ms']:.3f} ms")
    print(f"speedup:         {t['speedup']:.3f}x" if t["speedup"] is not None else "speedup: -")
    print(f"total workspace: {format_size(t['ws_bytes'])} ({t['ws_bytes']} B) over "
          f"{t['kernels']} kernels")
    sv = doc["solver"]
    if plan.ilp is not None:
        print(f"budget:          {format_size(plan.budget)} ({plan.budget} B)")
        print(f"expected speedup vs undivided at the same total memory "
              f"({base_ws} per kernel): {doc['ilp']['expected_speedup']:.3f}x")
        print(f"optimizer:       ilp (CBC), status {sv['status']}, {sv['variables']} variables, "
              f"solve {sv['seconds']:.3f} s")
    else:
        print(f"optimizer:       dp, limit {format_size(plan.limit)} per kernel, "
              f"{sv['seconds']:.3f} s")


def _check_budget(layers, benches, policy, sizes, strict, budget, limit) -> None:
    """Name the budget when it is below the least total workspace of any plan.

    plan_network computes the undivided baseline at budget / kernels first, whose error
    ("no plan within ...") would hide the cause.
    """
    from ..plan.dp import PlanError, desirable_set, undivided_plan
    from ..vocab import format_size
    n_kernels = sum(l.count * len(l.ops) for l in layers)
    if budget is None:
        budget, field = limit * n_kernels, "--limit"
    else:
        field = "--budget"
    need = sum(l.count * desirable_set(benches[l.name, op], l.n, policy, sizes, strict=strict,
                                       name=f"layer {l.name!r} op {op}")[0].ws_bytes
               for l in layers for op in l.ops if (l.name, op) in benches)
    what = (f"{format_size(budget)} ({budget} B)" if field == "--budget" else
            f"{format_size(limit)} x {n_kernels} kernels = {format_size(budget)}")
    if budget < need:
        raise CliError(f"{field}: {what} is below the smallest total workspace of any plan, "
                       f"{format_size(need)} ({need} B)")
    per = budget // n_kernels
    for l in layers:
        for op in l.ops:
            try:
                undivided_plan(benches[l.name, op], l.n, per)
            except (PlanError, KeyError):
                raise CliError(f"{field}: {what} leaves {format_size(per)} per kernel, where the "
                               f"undivided baseline of layer {l.name!r} op {op} has no "
                               "algorithm; the speedup cannot be stated (raise the budget)"
                               ) from None


def cmd_plan(args) -> int:
    from ..plan.dp import PlanError
    from ..plan.network import plan_network
    policy = _policy(args.policy)
    sizes = _sizes(args.sizes)
    limit = _size(args.limit, "--limit")
    budget = _size(args.budget, "--budget")
    _math(args.math)
    _dtype(args.dtype)
    optimizer = args.optimizer or ("ilp" if budget is not None else "dp")
    if optimizer == "dp" and budget is not None:
        raise CliError("--budget: only the ilp optimizer takes a total budget "
                       "(use --optimizer ilp, or --limit for dp)")
    layers, label, net = _load_layers(args, "alexnet")
    benches, source, notes = _gather(args, layers, net, policy, sizes)
    t0 = time.perf_counter()
    try:
        plan = plan_network(layers, benches, policy=policy, limit=limit, budget=budget,
                            optimizer=optimizer, sizes=sizes, strict=args.strict)
    except PlanError:
        if optimizer == "ilp":
            _check_budget(layers, benches, policy, sizes, args.strict,
                          budget if budget is not None else None, limit)
        raise
    solve_s = time.perf_counter() - t0
    for n in plan.notes:
        _note(n)
    plan.notes[:0] = notes
    doc = _plan_json(plan, args, label, source, layers, solve_s)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_plan(doc, plan)
    return 0


def _device_key_args(args, cache) -> Tuple[str, int]:
    """(gpu, cudnn_version) from --gpu/--cudnn-version, the visible GPU or the cache."""
    from ..plan.conv import ConvShape
    gpu, ver = args.gpu, args.cudnn_version
    if gpu is None or ver is None:
        info, reason = _gpu_status()
        if info is not None:
            from ..measure import bench
            k = bench.cache_key(ConvShape(1, 1, 1, 1, 1, 1), "fwd", _math(args.math))
            gpu = gpu if gpu is not None else k.gpu
            ver = ver if ver is not None else k.cudnn_version
    if (gpu is None or ver is None) and cache is not None and args.command == "export":
        combos = {(k.gpu, k.cudnn_version) for k in cache.keys()
                  if (gpu is None or k.gpu == gpu) and (ver is None or k.cudnn_version == ver)}
        if len(combos) == 1:
            gpu, ver = combos.pop()
        elif len(combos) > 1:
            raise CliError(f"--gpu: the cache holds several GPUs / cuDNN versions "
                           f"{sorted(combos)}; choose with --gpu and --cudnn-version")
    if gpu is None:
        raise CliError("--gpu: needed when no GPU is visible (e.g. --gpu 'NVIDIA H200')")
    if ver is None:
        raise CliError("--cudnn-version: needed when no GPU is visible (e.g. 91400)")
    return gpu, ver


def cmd_cache(args) -> int:
    from ..plan.table import format_table, read_table, write_table
    if args.command == "list":
        with _open_cache(args.cache) as cache:
            keys = cache.keys()
            listing = [(k, cache.batches(k)) for k in keys]
            if args.json:
                print(json.dumps([{"gpu": k.gpu, "cudnn_version": k.cudnn_version,
                                   "dtype": k.dtype, "math": k.math, "op": k.op,
                                   "shape": k.shape.key(), "batches": b}
                                  for k, b in listing], indent=2))
                return 0
            print(f"{cache.path}: {len(keys)} kernels, {len(cache)} entries")
            for k, b in listing:
                print(f"{k.gpu} | cuDNN {_format_cudnn(k.cudnn_version)} | {k.dtype} | {k.math}"
                      f" | {k.op} | {k.shape.key()} | batches {','.join(map(str, b))}")
        return 0
    math_mode, dtype = _math(args.math), _dtype(args.dtype)
    if not (args.net or args.layers or args.prototxt):
        raise CliError("one of --net, --layers or --prototxt is required (the layer shapes)")
    layers, label, _ = _load_layers(args, None)
    if args.command == "import":
        if not os.path.isfile(args.table):
            raise CliError(f"table: cannot read {args.table!r}: no such file")
        try:
            rows = read_table(args.table)
        except TableError as e:
            raise CliError(f"table: {e}") from None
        with _open_cache(args.cache) as cache:
            gpu, ver = _device_key_args(args, None)
            try:
                n = cache.import_table(rows, layers, gpu=gpu, cudnn_version=ver, dtype=dtype,
                                       math=math_mode, repeats=_positive(args.repeats, "--repeats"))
            except ValueError as e:
                raise CliError(f"table: {e}") from None
            print(f"imported {n} entries ({len(rows)} rows) into {cache.path} as {gpu}, "
                  f"cuDNN {_format_cudnn(ver)}, {dtype}, math {math_mode}", file=sys.stderr)
        return 0
    with _open_cache(args.cache) as cache:
        gpu, ver = _device_key_args(args, cache)
        rows = cache.export_rows(layers, gpu=gpu, cudnn_version=ver, dtype=dtype, math=math_mode)
        if not rows:
            raise CliError(f"no cached measurements for the layers of {label} ({gpu}, cuDNN "
                           f"{_format_cudnn(ver)}, {dtype}, math {math_mode}) in {cache.path}")
    if args.csv:
        write_table(args.csv, rows)
        print(f"wrote {len(rows)} rows to {args.csv}", file=sys.stderr)
    else:
        sys.stdout.write(format_table(rows))
    return 0


# ---------------------------------------------------------------------------------------------
# parser and entry point
# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="μ-cuDNN: micro-batched cuDNN convolutions "
                "(benchmark, plan with DP or ILP, cache).")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    s = sub.add_parser("info", help="GPU, driver, CUDA, cuDNN and the compiled core")
    s.add_argument("--json", action="store_true", help="print a JSON object")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("bench", help="benchmark convolution kernels into the cache (GPU)")
    _add_layer_source(s, default_net=False)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--policy", help="micro-batch sizes: undivided, powerOfTwo (default), all")
    g.add_argument("--sizes", metavar="LIST", help="explicit micro-batch sizes, e.g. 1,2,4,256")
    s.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " +
                   ",".join(OPS))
    s.add_argument("--repeats", type=int, default=3, help="Find calls per size (median)")
    s.add_argument("--math", default="default", help="default, tensor_op, fma, ...")
    s.add_argument("--workspace-cap", metavar="SIZE", help="largest workspace offered to cuDNN")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache (default $UCUDNN_CACHE or "
                   "~/.cache/ucudnn/bench.sqlite)")
    s.add_argument("--csv", metavar="OUT", help="also write the measurements as a table")
    s.add_argument("--force", action="store_true", help="measure again what is cached")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("plan", help="plan micro-batches for a network (DP per layer or ILP)")
    _add_layer_source(s, default_net=True)
    s.add_argument("--table", metavar="CSV", action="append",
                   help="benchmark table(s) to plan from (repeatable)")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache to plan from / fill")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--policy", default="powerOfTwo", help="undivided, powerOfTwo (default), all")
    g.add_argument("--sizes", metavar="LIST", help="explicit micro-batch sizes, e.g. 1,2,4,256")
    s.add_argument("--limit", default="64MiB", metavar="SIZE",
                   help="workspace per kernel (default 64MiB); ILP: default budget = limit x kernels")
    s.add_argument("--budget", metavar="SIZE", help="total workspace for the ILP (implies ilp)")
    s.add_argument("--optimizer", choices=("dp", "ilp"), help="dp (default) or ilp")
    s.add_argument("--math", default="default", help="math mode of the cached measurements")
    s.add_argument("--dtype", default="float32", help="dtype of the cached measurements")
    s.add_argument("--gpu", help="GPU name of the cached measurements (without a GPU)")
    s.add_argument("--cudnn-version", type=int, help="cuDNN version of the cached measurements")
    s.add_argument("--json", action="store_true", help="print a JSON document")
    s.add_argument("--strict", action="store_true",
                   help="fail when the data lacks micro-batch sizes the policy names")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("cache", help="list, import or export the benchmark cache")
    csub = s.add_subparsers(dest="command", metavar="ACTION", parser_class=_Parser)
    csub.required = True
    c = csub.add_parser("list", help="list cached kernels")
    c.add_argument("--cache", metavar="PATH")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_cache)
    for name, helptext in (("import", "store a benchmark table"),
                           ("export", "write cached measurements as a table")):
        c = csub.add_parser(name, help=helptext)
        if name == "import":
            c.add_argument("table", metavar="CSV", help="benchmark table to import")
            c.add_argument("--repeats", type=int, default=1,
                           help="Find calls behind each row (default 1)")
        else:
            c.add_argument("--csv", "-o", metavar="OUT", help="output file (default stdout)")
        _add_layer_source(c, default_net=False)
        c.add_argument("--cache", metavar="PATH")
        c.add_argument("--gpu", help="GPU name (default: the visible GPU)")
        c.add_argument("--cudnn-version", type=int, help="e.g. 91400 (default: the visible one)")
        c.add_argument("--dtype", default="float32")
        c.add_argument("--math", default="default")
        c.set_defaults(func=cmd_cache)

    s = sub.add_parser("prototxt", help="write a variant of a Caffe prototxt with ucudnn_param")
    s.add_argument("input", help="the prototxt to start from")
    s.add_argument("-o", "--output", required=True, help="the variant to write")
    s.add_argument("--policy", help="undivided, powerOfTwo, all")
    s.add_argument("--optimizer", help="dp or ilp (default ilp when --budget is given)")
    s.add_argument("--limit", metavar="SIZE", help="per-kernel workspace limit, e.g. 64MiB")
    s.add_argument("--budget", metavar="SIZE", help="total workspace of the net (ILP)")
    s.add_argument("--sizes", metavar="LIST", help="explicit micro-batch sizes, e.g. 32,64")
    s.add_argument("--math", help="default, tensor_op, fma")
    s.add_argument("--repeats", type=int, help="cudnnFind repetitions per size")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache path for Caffe to use")
    s.add_argument("--layers", metavar="LIST", help="set it on these layers instead of the net")
    s.add_argument("--caffe-proto", metavar="PATH", help="the patched caffe.proto")
    s.set_defaults(func=cmd_prototxt)

    s = sub.add_parser("reproduce", help="the paper's experiment grid with the patched Caffe "
                       "(predicted from the shipped H200 data without a GPU)")
    s.add_argument("--out", metavar="DIR", default="reproduce-out",
                   help="results folder (reproduce.json, points.csv, layers.csv, logs/); a run "
                   "with the same folder resumes (default: reproduce-out)")
    s.add_argument("--nets", default="alexnet,resnet18,cifar10",
                   help="comma-separated prototxt/NAME.prototxt (default alexnet,resnet18,cifar10)")
    s.add_argument("--limits", default="8MiB,64MiB,512MiB", help="per-kernel workspace limits")
    s.add_argument("--policies", default="undivided,powerOfTwo,all", help="DP policies")
    s.add_argument("--ilp-policy", default="powerOfTwo",
                   help="micro-batch policy of the ILP points (default powerOfTwo)")
    s.add_argument("--no-ilp", action="store_true", help="leave out the ILP points")
    s.add_argument("--no-unlimited", action="store_true", help="leave out unlimited workspace")
    s.add_argument("--no-stock", action="store_true", help="leave out stock Caffe")
    s.add_argument("--iterations", type=int, default=20, help="caffe time iterations (20)")
    s.add_argument("--repeats", type=int, default=3,
                   help="Caffe processes per point, run in rounds; the point's time is their "
                   "median (3)")
    s.add_argument("--gpu", type=int, default=0, help="GPU id for caffe time (0)")
    s.add_argument("--timeout", type=float, default=900, help="seconds per point (900)")
    s.add_argument("--caffe", metavar="EXE", help="the patched caffe binary (default $UCUDNN_CAFFE "
                   "or third_party/caffe/build/tools/caffe)")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache for Caffe (default: the "
                   "core's, $UCUDNN_CACHE or ~/.cache/ucudnn/bench.sqlite)")
    s.add_argument("--retry-failed", action="store_true", help="run failed points again")
    s.add_argument("--predict", action="store_true",
                   help="plan from the shipped H200 data instead of running Caffe")
    s.add_argument("--no-pytorch", action="store_true", help="skip the PyTorch comparison")
    s.set_defaults(func=cmd_reproduce)

    s = sub.add_parser("config", help="compile and link flags for C/C++ hosts of the C API")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--cflags", action="store_true", help="-I flags (ucudnn.h, cuDNN, Python)")
    g.add_argument("--libs", action="store_true", help="link flags (cuDNN, CUDA runtime, Python)")
    g.add_argument("--include", action="store_true", help="the folder holding ucudnn.h")
    s.set_defaults(func=cmd_config)
    return p


def cmd_prototxt(args) -> int:
    from ..caffe import proto as cp
    try:
        pb2 = cp.load_caffe_pb2(args.caffe_proto)
        net = cp.read_net(pb2, args.input)
        if args.repeats is not None and args.repeats < 1:
            raise CliError(f"--repeats: must be >= 1, got {args.repeats}")
        budget = _size(args.budget, "--budget")
        optimizer = args.optimizer or ("ilp" if budget is not None else None)
        cp.set_ucudnn_param(net, policy=args.policy, optimizer=optimizer,
                            limit=_size(args.limit, "--limit"), budget=budget,
                            sizes=_sizes(args.sizes), math=args.math, repeats=args.repeats,
                            cache_path=args.cache,
                            layers=args.layers.split(",") if args.layers else None)
        cp.write_net(net, args.output)
    except cp.CaffeProtoError as e:
        raise CliError(str(e)) from None
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_reproduce(args) -> int:
    from ..experiments import reproduce as rp
    if args.iterations < 1:
        raise CliError(f"--iterations: must be >= 1, got {args.iterations}")
    if args.repeats < 1:
        raise CliError(f"--repeats: must be >= 1, got {args.repeats}")
    caffe = args.caffe or os.environ.get("UCUDNN_CAFFE") or str(
        rp.REPO / "third_party" / "caffe" / "build" / "tools" / "caffe")
    predict = args.predict
    if not predict:
        info, reason = _gpu_status()
        if args.caffe and not os.access(args.caffe, os.X_OK):
            raise CliError(f"--caffe: {args.caffe!r} is not an executable")
        if args.caffe:
            _need_gpu("reproduce --caffe")
        if info is None or not os.access(caffe, os.X_OK):
            why = reason if info is None else f"no Caffe binary at {caffe}"
            _note(f"no GPU run possible ({why}): predicting every point from the shipped "
                  "H200 benchmark data instead (planner estimates, not measurements)")
            predict = True
    opts = rp.Options(
        out=Path(args.out), nets=_list(args.nets),
        limits=[_size(x, "--limits") for x in _list(args.limits)],
        policies=[_policy(p) for p in _list(args.policies)], ilp=not args.no_ilp,
        ilp_policy=_policy(args.ilp_policy), unlimited=not args.no_unlimited,
        stock=not args.no_stock, iterations=args.iterations, repeats=args.repeats, gpu=args.gpu,
        timeout=args.timeout, caffe=None if predict else caffe, cache_path=args.cache,
        retry_failed=args.retry_failed, predict=predict, pytorch=not args.no_pytorch,
        argv=sys.argv[2:] if len(sys.argv) > 2 else [])
    try:
        doc = rp.run(opts, say=lambda m: print(m, flush=True))
    except rp.ReproduceError as e:
        raise CliError(str(e)) from None
    print(rp.format_summary(doc))
    failed = [k for k, r in doc["points"].items() if r.get("status") == "failed"]
    if failed:
        print(f"{len(failed)} point(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _list(text: str) -> List[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def cmd_config(args) -> int:
    from .. import config
    try:
        out = (config.get_include() if args.include else
               " ".join(config.cflags() if args.cflags else config.libs()))
    except FileNotFoundError as e:
        raise CliError(f"config: {e}") from None
    print(out)
    return 0


_FIELDS = {"workspace_budget": "--budget", "workspace_limit": "--limit", "policy": "--policy",
           "optimizer": "--optimizer", "micro_batch_sizes": "--sizes", "batch": "--batch",
           "phase": "--phase"}


def _message(e: BaseException) -> str:
    """The error text with library field names replaced by the options that set them."""
    from ..measure.cache import CacheError
    from ..plan.dp import PlanError
    from ..plan.network import LayerError
    from ..caffe.prototxt import PrototxtError
    msg = str(e)
    head, sep, rest = msg.partition(":")
    if sep and head in _FIELDS:
        msg = _FIELDS[head] + sep + rest
    if isinstance(e, LayerError) and not msg.startswith("--"):
        msg = "--layers: " + msg
    elif isinstance(e, PrototxtError) and not msg.startswith("--"):
        msg = "--prototxt: " + msg
    elif isinstance(e, CacheError) and not msg.startswith("--"):
        msg = "--cache: " + msg
    elif isinstance(e, PlanError) and not msg.startswith("--"):
        msg = "plan: " + msg
    return msg


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``ucudnn`` and ``python -m ucudnn``; returns the exit status."""
    from ..measure.cache import CacheError
    from ..plan.dp import PlanError
    from ..plan.network import LayerError
    from ..caffe.prototxt import PrototxtError
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, TableError, LayerError, PlanError, CacheError, PrototxtError,
            ValueError) as e:
        print(f"{PROG}: error: {_message(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:         # e.g. `ucudnn plan | head`
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 1
    except OSError as e:
        name = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"{PROG}: error: {name}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
