"""``ucudnn plan``: plan micro-batches for a network (DP per kernel or the network ILP).

Settings come from the command line (Note [Settings options] in :mod:`ucudnn.cli.options`),
else from the ``--prototxt`` file's ``ucudnn_param`` (a layer's fields over the net-wide ones,
as Caffe merges them), else the defaults (Note [Default settings] in
:mod:`ucudnn.plan.settings`). Benchmark data: :func:`ucudnn.measure.sources.gather_net`; the
plan: :func:`ucudnn.plan.network.plan_network`, as Caffe's net is planned.

Note [plan --json]
    A JSON object with the keys
    ``ucudnn_version``; ``network`` (net name or file); ``source`` {``kind``: table | cache |
    benchmark | shipped, ``detail``, ``gpu``, ``cudnn_version``, ``dtype``, ``math``,
    ``complete``}; ``batch``; ``policy``; ``sizes`` (explicit list or null); ``optimizer``
    (dp | ilp | shared); ``limit_bytes``; ``budget_bytes`` (ILP and shared, else null);
    ``baseline_limit_bytes``
    (workspace per kernel of the undivided baseline); ``deterministic`` (true where every
    layer was planned from deterministic choices only, false where none was, null for mixed:
    Note [Deterministic plans] in ucudnn/plan/dp.py); ``kernels``: a list, one per kernel
    instance, of {``kernel``, ``layer``, ``op``, ``instance``, ``groups`` (Caffe's group count:
    calls of this plan per pass), ``plan`` (Plan.describe(),
    numeric algorithms), ``micro_batches``, ``chunks`` [{``batch``, ``algo``, ``algo_name``
    (cuDNN's name), ``math``, ``time_ms``, ``ws_bytes``}], ``time_ms``, ``ws_bytes``,
    ``undivided_plan``, ``undivided_time_ms``, ``undivided_ws_bytes``, ``speedup``} (times and
    workspaces of one call);
    ``totals`` {``kernels``, ``undivided_time_ms``, ``time_ms``, ``speedup``, ``ws_bytes``,
    ``undivided_ws_bytes``, ``held_bytes`` (what the network holds: its own workspace and the
    shared arena's), ``workspace_bytes``, ``arena_bytes``}; ``solver`` {``name`` (dp | cbc | enumerate), ``seconds``, ``status``,
    ``variables``}; ``ilp`` (null for dp) {``budget_bytes``, ``baseline_limit_bytes``,
    ``expected_speedup`` (vs. undivided at the same total memory), ``arena_bytes`` (shared,
    else null)}; ``notes`` (list of text).
    Times are predicted (sums of benchmarked micro-batch times). Speedups that are undefined
    (zero time) are null; with per-layer limits from a prototxt ``limit_bytes`` and
    ``baseline_limit_bytes`` are null.
    The document is strict JSON (RFC 8259, what ``json.loads`` of every language reads): a
    number that is not finite (an infinite time or speedup) is written as null, never as
    JavaScript's bare ``Infinity`` or ``NaN``; finite numbers are written as ``json.dumps``
    writes them. Names (layers, files, the GPU) are JSON strings, their control characters
    escaped by ``json.dumps``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from typing import Dict, List, Optional, Tuple

from ..measure.sources import gather_net
from ..plan.network import plan_network
from ..plan.table import TableError
from ..vocab import DTYPE, choice_name, format_size
from . import common as c
from . import options

HELP = ("plan micro-batches for a network (DP per kernel, ILP over the network, or one shared "
        "arena)")


def add_parser(sub) -> None:
    s = sub.add_parser("plan", help=HELP, description=HELP + ". Times are predicted from "
                       "benchmarks: a plan's time is the sum of its micro-batches' benchmarked "
                       "times. Options not given come from the --prototxt file's ucudnn_param, "
                       "else the defaults, which are Caffe's (8 MiB per cuDNN call).")
    c.add_layer_source(s, default_net=True)
    s.add_argument("--table", metavar="CSV", action="append",
                   help="benchmark table(s) to plan from, layers by name (repeatable; "
                   "default: the cache, this GPU or the shipped data)")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache to plan from / fill "
                   "(default: $UCUDNN_CACHE or ~/.cache/ucudnn/bench.sqlite)")
    options.add_settings_options(s, deterministic=True)
    options.add_time_limit_option(s)
    s.add_argument("--dtype", default="float32", help="data type of the benchmarks: "
                   "float32, float64, float16, bfloat16")
    s.add_argument("--gpu", help="GPU name of the benchmarks, e.g. 'NVIDIA H200' (default: "
                   "the visible GPU, else any in the cache or the shipped data)")
    s.add_argument("--cudnn-version", type=int, metavar="V", help="cuDNN version of the "
                   "benchmarks, e.g. 91400 (default: as for --gpu)")
    s.add_argument("--json", action="store_true", help="print a JSON document (Note [plan "
                   "--json] in ucudnn/cli/plan.py)")
    s.add_argument("--strict", action="store_true",
                   help="fail when the data lacks micro-batch sizes the policy names")
    s.set_defaults(func=run)


def _settings(args, layers, given) -> Tuple[Dict[str, object], List[str]]:
    """({layer: PlanSettings}, notes): the prototxt's ucudnn_param of each layer (else the
    defaults) with the command line's fields over it."""
    dtype = options._choice(DTYPE, args.dtype, "--dtype")
    pnet = getattr(args, "prototxt_net", None)
    from_file = {name: s for name, s in (pnet.ucudnn.items() if pnet is not None else ())
                 if s is not None}
    out = {l.name: options.apply(from_file.get(l.name), dict(given, dtype=dtype))
           for l in layers}
    notes = []
    if from_file:
        taken = [f for f in ("policy", "limit", "budget", "optimizer", "math") if f not in given
                 and not (f == "policy" and "sizes" in given)]
        notes.append(f"{args.prototxt}: ucudnn_param of {len(from_file)} of {len(layers)} "
                     f"convolution layers used for {', '.join(taken) or 'nothing'} (the command "
                     "line overrides it); layers without one planned with the defaults")
    return out, notes


def run(args) -> int:
    given = options.settings_given(args)
    c.cudnn_version(args.cudnn_version)
    time_limit = options.time_limit(args.ilp_time_limit)
    texts = {path: c.text_file(path, "--table") for path in args.table or ()}
    layers, label, _ = c.load_layers(args, "alexnet")
    off = _without_cudnn(args)
    if not layers:
        what = "no Convolution layer that reaches cuDNN" if off else "no Convolution layer"
        c.note(f"{label}: {what} in phase {args.phase}: nothing to plan")
        if args.json:
            print(strict_json(dict({"ucudnn_version": c.version(), "network": label,
                                    "kernels": [], "notes": [f"{what}: nothing to plan"]},
                                   **off)))
        else:
            _print_without_cudnn(off)
        return 0
    options.check_sizes(given, [l.n for l in layers])
    settings, notes = _settings(args, layers, given)
    try:
        got = gather_net(layers, settings, tables=args.table, texts=texts,
                         cache_path=args.cache, gpu=args.gpu,
                         cudnn_version=args.cudnn_version, strict=args.strict, progress=c.say)
    except TableError as e:
        raise c.CliError(f"--table: {e}") from None
    t0 = time.perf_counter()
    plan = plan_network(layers, got.benches, settings, strict=args.strict,
                        ilp_time_limit=time_limit, progress=c.say)
    solve_s = time.perf_counter() - t0
    notes += got.notes
    for n in notes + plan.notes:
        c.note(n)
    plan.notes[:0] = notes
    sizes = sorted({s.sizes for s in settings.values()} - {None})
    doc = plan_json(plan, label, got.source, layers, solve_s,
                     list(sizes[0]) if len(sizes) == 1 else None)
    doc.update(off)
    if args.json:
        print(strict_json(doc))
    else:
        print_plan(doc, plan)
        _print_without_cudnn(off)
    return 0


def _without_cudnn(args) -> dict:
    """``{"without_cudnn": [{layer, reason}]}`` for the --prototxt's convolutions that Caffe
    runs without cuDNN; {} where there are none (Note [plan --json])."""
    pnet = getattr(args, "prototxt_net", None)
    off = pnet.off_cudnn if pnet is not None else {}
    return {"without_cudnn": [{"layer": k, "reason": v} for k, v in off.items()]} if off else {}


def _print_without_cudnn(off: dict) -> None:
    rows = off.get("without_cudnn", [])
    if rows:
        c.out(f"runs without cuDNN (Caffe's im2col layer; not planned): {len(rows)} "
              "convolution layer(s)")
        names = [c.clean(r["layer"]) for r in rows]
        width = max(map(len, names))
        for name, r in zip(names, rows):
            c.out(f"  {name.ljust(width)}  {r['reason']}")


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------

def _finite(x):
    """``x`` with every float that is not finite replaced by None (Note [plan --json])."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def strict_json(doc) -> str:
    """The text of ``doc`` as ``plan --json`` prints it (Note [plan --json])."""
    return json.dumps(_finite(doc), indent=2, allow_nan=False)


def _speedup(base: Optional[float], t: float) -> Optional[float]:
    return base / t if base is not None and t > 0 else None


def _legend(plan) -> str:
    example = None
    for k in plan.kernels:
        for ch, n in k.plan.runs():
            if example is None or (n > 1 and example[1] == 1):
                example = ((ch.batch, ch, k.op), n)
    if example is None:
        return ""
    (b, ch, op), n = example
    name = choice_name(op, ch.algo, 0, ch.engine)
    count = {1: "one", 2: "two", 3: "three", 4: "four", 8: "eight"}.get(n, str(n))
    return (f"legend: {b}x{n}:{name} = {count} micro-batch{'es' if n > 1 else ''} of {b} "
            f"sample{'s' if b > 1 else ''}, {'each ' if n > 1 else ''}run with cuDNN's {name} "
            "algorithm; times are predicted convolution time (sums of benchmarked "
            "micro-batch times), not measured; undivided = the fastest single algorithm "
            "within the same workspace")


def _chunk_json(op, ch) -> dict:
    """A chunk's fields and its choice's name; ``engine`` only for a graph engine config."""
    d = dataclasses.asdict(ch)
    if not d["engine"]:
        del d["engine"]
    return dict(d, algo_name=choice_name(op, ch.algo, 0, ch.engine))


def plan_json(plan, label, source, layers, solve_s, sizes) -> dict:
    """The document of Note [plan --json] for ``plan`` of ``layers`` (``ucudnn.torch.plan``
    makes the same)."""
    kernels = []
    for k in plan.kernels:
        chunks = [_chunk_json(k.op, ch) for ch in k.plan.chunks]
        b = k.baseline
        kernels.append({
            "kernel": k.name, "layer": k.layer, "op": k.op, "instance": k.instance,
            "groups": k.groups, "optimizer": k.optimizer,
            "plan": k.plan.describe(), "micro_batches": k.plan.micro_batches,
            "chunks": chunks, "time_ms": k.plan.time_ms, "ws_bytes": k.plan.ws_bytes,
            "undivided_plan": b.describe() if b else None,
            "undivided_time_ms": b.time_ms if b else None,
            "undivided_ws_bytes": b.ws_bytes if b else None,
            "speedup": _speedup(b.time_ms if b else None, k.plan.time_ms),
            "slot": dataclasses.asdict(k.slot) if k.slot else None,
        })
    batches = sorted({l.n for l in layers})
    return {
        "ucudnn_version": c.version(), "network": label, "source": source.as_dict(),
        "batch": batches[0] if len(batches) == 1 else batches,
        "policy": plan.policy, "sizes": sizes, "optimizer": plan.optimizer,
        "limit_bytes": plan.limit, "budget_bytes": plan.budget,
        "baseline_limit_bytes": plan.baseline_limit,
        "deterministic": plan.deterministic,
        "kernels": kernels,
        "totals": {"kernels": len(plan.kernels), "undivided_time_ms": plan.baseline_time_ms,
                   "time_ms": plan.time_ms, "speedup": plan.speedup,
                   "ws_bytes": plan.ws_bytes, "held_bytes": plan.held_bytes,
                   "workspace_bytes": plan.workspace_bytes, "arena_bytes": plan.arena_bytes,
                   "undivided_ws_bytes": (None if plan.baseline_time_ms is None else
                                          sum(k.groups * k.baseline.ws_bytes
                                              for k in plan.kernels))},
        "solver": ({"name": "cbc" if plan.ilp.n_variables else "enumerate",
                    "seconds": plan.ilp.solve_seconds, "status": plan.ilp.status,
                    "variables": plan.ilp.n_variables} if plan.ilp is not None else
                   {"name": "enumerate" if plan.optimizer == "shared" else "dp",
                    "seconds": solve_s, "status": "Optimal", "variables": None}),
        "ilp": ({"budget_bytes": plan.budget, "baseline_limit_bytes": plan.baseline_limit,
                 "expected_speedup": plan.speedup, "arena_bytes": plan.arena_bytes}
                if plan.netwide else None),
        "notes": list(plan.notes),
    }


def _groups(plan):
    """Consecutive instances of one kernel with equal plans, as (label, KernelPlan)."""
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
        base = f"{c.clean(k.layer)}/{k.op}"
        calls = len(inst) * k.groups
        times = f" x{calls}" if calls > 1 else ""
        if len(inst) == total[k.layer, k.op]:
            label = base + times
        else:
            label = base + (f"#{inst[0]}" if len(inst) == 1 else f"#{inst[0]}-{inst[-1]}") + times
        out.append((label, k))
    return out


def _bytes(n: Optional[int]) -> str:
    return "per layer" if n is None else f"{format_size(n)} ({n} B)"


def print_plan(doc, plan) -> None:
    """The text ``ucudnn plan`` prints for ``plan`` and its document ``doc``."""
    rows = [("kernel", "micro-batches", "time(ms)", "workspace", "undivided(ms)", "speedup")]
    for label, k in _groups(plan):
        base = k.baseline.time_ms if k.baseline else None
        s = _speedup(base, k.plan.time_ms)
        rows.append((label, k.plan.describe(k.op), f"{k.plan.time_ms:.3f}",
                     format_size(k.plan.ws_bytes), f"{base:.3f}" if base is not None else "-",
                     f"{s:.2f}x" if s is not None else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    limit = (f", budget {_bytes(plan.budget)}" if plan.netwide else
             f", limit {_bytes(plan.limit)} per kernel")
    c.out(f"network {doc['network']}, batch {doc['batch']}, policy {doc['policy']}"
          + (f" (sizes {','.join(map(str, doc['sizes']))})" if doc["sizes"] else "")
          + f"{limit}" + (", deterministic choices only" if doc.get("deterministic") else "")
          + f", data: {doc['source']['kind']} {doc['source']['detail']}")
    for r in rows:
        c.out("  ".join(x.ljust(w) if i < 2 else x.rjust(w)
                        for i, (x, w) in enumerate(zip(r, widths))).rstrip())
    legend = _legend(plan)
    if legend:
        c.out(legend)
    t = doc["totals"]
    c.out("(times and workspaces per cuDNN call; xN: N calls per iteration, for Caffe's groups "
          "and identical layers; totals count every call)")
    base_ws = format_size(plan.baseline_limit) if plan.baseline_limit is not None else \
        "the layer's limit"
    und = t["undivided_time_ms"]
    c.out(f"undivided total: {und:.3f} ms" if und is not None else
          "undivided total: - (no single algorithm fits some kernel)", end="")
    c.out(f" (fastest single algorithm within {base_ws} per kernel; predicted)")
    c.out(f"planned total:   {t['time_ms']:.3f} ms (predicted)")
    c.out(f"speedup:         {t['speedup']:.3f}x" if t["speedup"] is not None else
          "speedup:         -")
    if plan.arena_bytes is not None:
        c.out(f"shared arena:    {format_size(plan.arena_bytes)} ({plan.arena_bytes} B), reused "
              f"by every layer (kernels' workspace summed: {format_size(t['ws_bytes'])})")
    if plan.workspace_bytes or plan.arena_bytes is None:
        c.out(f"total workspace: {format_size(plan.workspace_bytes)} ({plan.workspace_bytes} B)"
              f" owned by {sum(1 for k in plan.kernels if k.optimizer != 'shared')} kernels "
              "(slots 256-byte aligned)")
    sv = doc["solver"]
    expected = doc["ilp"]["expected_speedup"] if doc["ilp"] else None
    if plan.netwide:
        c.out(f"budget:          {format_size(plan.budget)} ({plan.budget} B)")
        c.out(f"expected speedup vs undivided at the same total memory ({base_ws} per kernel): "
              + (f"{expected:.3f}x" if expected is not None else "-"))
    if plan.optimizer == "shared":
        c.out(f"optimizer:       shared (each layer's concurrent kernels divide the arena, "
              f"solved exactly), {sv['seconds']:.3f} s")
    elif plan.ilp is not None:
        c.out(f"optimizer:       ilp (CBC), status {sv['status']}"
              + ("" if plan.ilp.proven else " (not proven optimal)")
              + f", {sv['variables']} variables, solve {sv['seconds']:.3f} s")
    else:
        c.out(f"optimizer:       {plan.optimizer}, limit {_bytes(plan.limit)} per kernel, "
              f"{sv['seconds']:.3f} s")
