"""``ucudnn plan``: plan micro-batches for a network (DP per kernel or the network ILP).

Settings come from the command line, else from the ``--prototxt`` file's ``ucudnn_param``
(a layer's fields over the net-wide ones, as Caffe merges them), else the defaults below.
Benchmark data: :func:`ucudnn.measure.sources.gather`.

Note [plan --json]
    A JSON object with the keys
    ``ucudnn_version``; ``network`` (net name or file); ``source`` {``kind``: table | cache |
    benchmark | shipped, ``detail``, ``gpu``, ``cudnn_version``, ``dtype``, ``math``,
    ``complete``}; ``batch``; ``policy``; ``sizes`` (explicit list or null); ``optimizer``
    (dp | ilp | shared); ``limit_bytes``; ``budget_bytes`` (ILP and shared, else null);
    ``baseline_limit_bytes``
    (workspace per kernel of the undivided baseline); ``kernels``: a list, one per kernel
    instance, of {``kernel``, ``layer``, ``op``, ``instance``, ``groups`` (Caffe's group count:
    calls of this plan per pass), ``plan`` (Plan.describe(),
    numeric algorithms), ``micro_batches``, ``chunks`` [{``batch``, ``algo``, ``algo_name``
    (cuDNN's name), ``math``, ``time_ms``, ``ws_bytes``}], ``time_ms``, ``ws_bytes``,
    ``undivided_plan``, ``undivided_time_ms``, ``undivided_ws_bytes``, ``speedup``} (times and
    workspaces of one call);
    ``totals`` {``kernels``, ``undivided_time_ms``, ``time_ms``, ``speedup``, ``ws_bytes``,
    ``undivided_ws_bytes``, ``held_bytes`` (what the network holds: the shared arena, else
    ``ws_bytes``)}; ``solver`` {``name`` (dp | cbc | enumerate), ``seconds``, ``status``,
    ``variables``}; ``ilp`` (null for dp) {``budget_bytes``, ``baseline_limit_bytes``,
    ``expected_speedup`` (vs. undivided at the same total memory), ``arena_bytes`` (shared,
    else null)}; ``notes`` (list of text).
    Times are predicted (sums of benchmarked micro-batch times). Speedups that are undefined
    (zero time) are null; with per-layer limits from a prototxt ``limit_bytes`` and
    ``baseline_limit_bytes`` are null.
"""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Dict, List, Optional, Tuple

from ..vocab import DTYPES, MATH_MODES, OPTIMIZERS, POLICIES, algo_name, format_size
from . import common as c

HELP = ("plan micro-batches for a network (DP per kernel, ILP over the network, or one shared "
        "arena)")
#: Optimizers that take one budget for the whole network.
NETWIDE = ("ilp", "shared")
DEFAULTS = {"policy": "powerOfTwo", "limit": "64MiB", "optimizer": "dp", "math": "default"}


def add_parser(sub) -> None:
    s = sub.add_parser("plan", help=HELP, description=HELP + ". Times are predicted from "
                       "benchmarks: a plan's time is the sum of its micro-batches' benchmarked "
                       "times. Options not given come from the --prototxt file's ucudnn_param, "
                       "else the defaults shown.")
    c.add_layer_source(s, default_net=True)
    s.add_argument("--table", metavar="CSV", action="append",
                   help="benchmark table(s) to plan from, layers by name (repeatable; "
                   "default: the cache, this GPU or the shipped data)")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache to plan from / fill "
                   "(default: $UCUDNN_CACHE or ~/.cache/ucudnn/bench.sqlite)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--policy", help=f"micro-batch policy: {', '.join(POLICIES)} "
                   f"(default: {DEFAULTS['policy']})")
    g.add_argument("--sizes", metavar="LIST", help="explicit micro-batch sizes, e.g. 1,2,4,256 "
                   "(default: those of --policy)")
    s.add_argument("--limit", metavar="SIZE", help="workspace per kernel; 64M = 64MiB, sizes "
                   f"are powers of 1024 (default: {DEFAULTS['limit']}; ILP: budget = limit x "
                   "kernels)")
    s.add_argument("--budget", metavar="SIZE", help="total workspace for the ILP or the shared "
                   "arena (implies --optimizer ilp unless shared is asked; default: limit x "
                   "kernels)")
    s.add_argument("--optimizer", choices=OPTIMIZERS, help="dp: each kernel within --limit; "
                   "ilp: all kernels divide --budget; shared: every layer reuses one arena of "
                   "--budget, divided among the kernels that run at the same time (default: dp, "
                   "ilp with --budget)")
    s.add_argument("--math", help=f"math mode of the benchmarks: {', '.join(MATH_MODES)} "
                   f"(default: {DEFAULTS['math']})")
    s.add_argument("--dtype", default="float32", help="data type of the benchmarks: "
                   + ", ".join(DTYPES))
    s.add_argument("--gpu", help="GPU name of the benchmarks, e.g. 'NVIDIA H200' (default: "
                   "the visible GPU, else any in the cache or the shipped data)")
    s.add_argument("--cudnn-version", type=int, metavar="V", help="cuDNN version of the "
                   "benchmarks, e.g. 91400 (default: as for --gpu)")
    s.add_argument("--json", action="store_true", help="print a JSON document (Note [plan "
                   "--json] in ucudnn/cli/plan.py)")
    s.add_argument("--strict", action="store_true",
                   help="fail when the data lacks micro-batch sizes the policy names")
    s.set_defaults(func=run)


# ---------------------------------------------------------------------------------------------
# settings: command line, then the prototxt's ucudnn_param, then the defaults
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Settings:
    policy: str
    sizes: Optional[Tuple[int, ...]]
    limit: int
    math: str
    exclude_winograd: bool = False


def _settings(args, layers) -> Tuple[Dict[str, Settings], str, Optional[int], List[str]]:
    """({layer: Settings}, optimizer, budget, notes): the command line, else the layer's
    ucudnn_param in the --prototxt file (merged over the net's as Caffe does), else DEFAULTS."""
    pnet = getattr(args, "prototxt_net", None)
    net_s = pnet.net_ucudnn if pnet is not None else None
    file_s = {name: s for name, s in (pnet.ucudnn.items() if pnet is not None else ())
              if s is not None}
    policy = c.policy(args.policy) if args.policy else None
    sizes = tuple(c.sizes(args.sizes)) if args.sizes else None
    limit = c.size(args.limit, "--limit", echo=False)       # echoed in the header
    math_mode = c.math(args.math) if args.math else None
    budget = c.size(args.budget, "--budget", echo=False)
    default_limit = c.size(DEFAULTS["limit"], "--limit", echo=False)
    out = {}
    for l in layers:
        s = file_s.get(l.name)
        out[l.name] = Settings(
            policy=policy or (s.policy if s else DEFAULTS["policy"]),
            sizes=sizes if sizes else (None if policy or not s or not s.micro_batch_sizes
                                       else tuple(sorted(s.micro_batch_sizes))),
            limit=limit if limit is not None else (s.workspace_limit if s else default_limit),
            math=math_mode or (s.math if s else DEFAULTS["math"]),
            exclude_winograd=bool(s and s.exclude_winograd))
    optimizer = args.optimizer
    if optimizer is None and file_s:
        asked = {s.optimizer for s in file_s.values()}
        if len(asked) > 1:
            raise c.CliError(f"--prototxt: {args.prototxt}: its layers ask for optimizers "
                             f"{' and '.join(sorted(asked))}; pass --optimizer")
        optimizer = asked.pop()
    if budget is None and optimizer in NETWIDE:
        totals = {s.total_workspace for s in ([net_s] if net_s else []) + list(file_s.values())
                  if s.total_workspace > 0}
        if len(totals) > 1:
            raise c.CliError(f"--prototxt: {args.prototxt}: its layers set different "
                             f"total_workspace values {sorted(totals)}; pass --budget")
        budget = totals.pop() if totals else None
    optimizer = optimizer or ("ilp" if budget is not None else DEFAULTS["optimizer"])
    if optimizer == "dp" and budget is not None:
        raise c.CliError("--budget: only the ilp and shared optimizers take a total budget "
                         "(use --optimizer ilp or shared, or --limit for dp)")
    notes = []
    if file_s:
        taken = [what for what, given in (("policy", policy or sizes), ("limit", limit),
                                          ("math", math_mode), ("optimizer", args.optimizer))
                 if given is None]
        notes.append(f"{args.prototxt}: ucudnn_param of {len(file_s)} of {len(layers)} "
                     f"convolution layers used for {', '.join(taken) or 'nothing'} (the command "
                     "line overrides it); layers without one planned with the defaults")
    return out, optimizer, budget, notes


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------

def _calls(layers) -> int:
    """cuDNN calls per pass: every op of every identical layer, once per group."""
    return sum(l.count * l.groups * len(l.ops) for l in layers)


def _check_budget(layers, benches, policy, sizes, strict, budget, limit) -> None:
    """Name the budget when it is below the least total workspace of any plan.

    plan_network computes the undivided baseline at budget / kernels first, whose error
    ("no plan within ...") would hide the cause.
    """
    from ..plan.dp import PlanError, desirable_set, undivided_plan
    n_kernels = _calls(layers)
    if budget is None:
        budget, field = limit * n_kernels, "--limit"
    else:
        field = "--budget"
    need = sum(l.count * l.groups * desirable_set(benches[l.name, op], l.n, policy, sizes, strict=strict,
                                       name=f"layer {l.name!r} op {op}")[0].ws_bytes
               for l in layers for op in l.ops if (l.name, op) in benches)
    what = (f"{format_size(budget)} ({budget} B)" if field == "--budget" else
            f"{format_size(limit)} x {n_kernels} kernel calls = {format_size(budget)}")
    if budget < need:
        raise c.CliError(f"{field}: {what} is below the smallest total workspace of any plan, "
                         f"{format_size(need)} ({need} B)")
    per = budget // n_kernels
    for l in layers:
        for op in l.ops:
            try:
                undivided_plan(benches[l.name, op], l.n, per)
            except (PlanError, KeyError):
                raise c.CliError(f"{field}: {what} leaves {format_size(per)} per kernel, where "
                                 f"the undivided baseline of layer {l.name!r} op {op} has no "
                                 "algorithm; the speedup cannot be stated (raise the budget)"
                                 ) from None


def _plan(args, layers, settings, optimizer, budget):
    """(NetworkPlan, source, notes, solve seconds): one gather and plan per group of layers
    with equal settings (one group unless the prototxt sets them per layer)."""
    from ..measure.cache import DEFAULT_WORKSPACE_CAP
    from ..measure.sources import gather
    from ..plan.dp import WINOGRAD_ALGOS, PlanError, without_algorithms
    from ..plan.network import NetworkPlan, plan_network
    from ..plan.table import TableError
    groups: Dict[Settings, list] = {}
    for l in layers:
        groups.setdefault(settings[l.name], []).append(l)
    if optimizer in NETWIDE and len({(s.policy, s.sizes, s.math) for s in groups}) > 1:
        raise c.CliError(f"--prototxt: {args.prototxt}: its layers set different policies, "
                         f"sizes or math modes, which one {optimizer} budget cannot plan; pass "
                         "--policy/--sizes/--math to plan them alike, or --optimizer dp")
    if optimizer in NETWIDE:
        one = next(iter(groups))
        groups = {one: list(layers)}
    plans, sources, notes, solve_s = [], [], [], 0.0
    for s, group in groups.items():
        # measurements must have been offered the workspace a plan may use
        need = budget if optimizer in NETWIDE and budget is not None else s.limit * (
            _calls(group) if optimizer in NETWIDE else 1)
        try:
            got = gather(group, policy=s.policy, sizes=s.sizes, tables=args.table,
                         cache_path=args.cache, gpu=args.gpu, cudnn_version=args.cudnn_version,
                         math=s.math, dtype=args.dtype,
                         workspace_cap=min(need, DEFAULT_WORKSPACE_CAP), strict=args.strict,
                         progress=c.say)
        except TableError as e:
            raise c.CliError(f"--table: {e}") from None
        if s.exclude_winograd:
            got.benches = {(name, op): without_algorithms(b, WINOGRAD_ALGOS[op])
                           for (name, op), b in got.benches.items()}
        sources.append(got.source)
        notes += [n for n in got.notes if n not in notes]
        t0 = time.perf_counter()
        try:
            plans.append(plan_network(group, got.benches, policy=s.policy, limit=s.limit,
                                      budget=budget, optimizer=optimizer,
                                      sizes=list(s.sizes) if s.sizes else None,
                                      strict=args.strict))
        except PlanError:
            if optimizer == "ilp":
                _check_budget(group, got.benches, s.policy, s.sizes, args.strict, budget,
                              s.limit)
            raise
        solve_s += time.perf_counter() - t0
    if len(plans) == 1:
        return plans[0], sources[0], notes, solve_s
    order = {l.name: i for i, l in enumerate(layers)}
    kernels = sorted((k for p in plans for k in p.kernels), key=lambda k: order[k.layer])
    policies = sorted({p.policy for p in plans})
    merged = NetworkPlan(kernels, policies[0] if len(policies) == 1 else "per layer",
                         optimizer, None, None, None, None,
                         [n for p in plans for n in p.notes])
    kinds = sorted({s.kind for s in sources})
    src = dataclasses.replace(sources[0], kind=kinds[0] if len(kinds) == 1 else "mixed",
                              detail="; ".join(dict.fromkeys(s.detail for s in sources)))
    notes.append("settings differ by layer (ucudnn_param of the prototxt): "
                 f"{len(groups)} groups planned separately")
    return merged, src, notes, solve_s


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------

def _speedup(base: float, t: float) -> Optional[float]:
    return base / t if t > 0 else None


def _legend(plan) -> str:
    example = None
    for k in plan.kernels:
        for ch, n in k.plan.runs():
            if example is None or (n > 1 and example[1] == 1):
                example = ((ch.batch, ch.algo, k.op), n)
    if example is None:
        return ""
    (b, a, op), n = example
    name = algo_name(op, a)
    count = {1: "one", 2: "two", 3: "three", 4: "four", 8: "eight"}.get(n, str(n))
    return (f"legend: {b}x{n}:{name} = {count} micro-batch{'es' if n > 1 else ''} of {b} "
            f"sample{'s' if b > 1 else ''}, {'each ' if n > 1 else ''}run with cuDNN's {name} "
            "algorithm; times are predicted convolution time (sums of benchmarked "
            "micro-batch times), not measured; undivided = the fastest single algorithm "
            "within the same workspace")


def _plan_json(plan, args, label, source, layers, solve_s, sizes) -> dict:
    kernels = []
    for k in plan.kernels:
        chunks = [dict(dataclasses.asdict(ch), algo_name=algo_name(k.op, ch.algo))
                  for ch in k.plan.chunks]
        kernels.append({
            "kernel": k.name, "layer": k.layer, "op": k.op, "instance": k.instance,
            "groups": getattr(k, "groups", 1),
            "plan": k.plan.describe(), "micro_batches": k.plan.micro_batches,
            "chunks": chunks, "time_ms": k.plan.time_ms, "ws_bytes": k.plan.ws_bytes,
            "undivided_plan": k.baseline.describe(), "undivided_time_ms": k.baseline.time_ms,
            "undivided_ws_bytes": k.baseline.ws_bytes,
            "speedup": _speedup(k.baseline.time_ms, k.plan.time_ms),
        })
    batches = sorted({l.n for l in layers})
    return {
        "ucudnn_version": c.version(), "network": label, "source": source.as_dict(),
        "batch": batches[0] if len(batches) == 1 else batches,
        "policy": plan.policy, "sizes": sizes, "optimizer": plan.optimizer,
        "limit_bytes": plan.limit, "budget_bytes": plan.budget,
        "baseline_limit_bytes": plan.baseline_limit,
        "kernels": kernels,
        "totals": {"kernels": len(plan.kernels), "undivided_time_ms": plan.baseline_time_ms,
                   "time_ms": plan.time_ms,
                   "speedup": _speedup(plan.baseline_time_ms, plan.time_ms),
                   "ws_bytes": plan.ws_bytes, "held_bytes": plan.held_bytes,
                   "undivided_ws_bytes": sum(getattr(k, "groups", 1) * k.baseline.ws_bytes
                                             for k in plan.kernels)},
        "solver": ({"name": "cbc" if plan.ilp.n_variables else "enumerate",
                    "seconds": plan.ilp.solve_seconds, "status": plan.ilp.status,
                    "variables": plan.ilp.n_variables} if plan.ilp is not None else
                   {"name": "enumerate" if plan.optimizer == "shared" else "dp",
                    "seconds": solve_s, "status": "Optimal", "variables": None}),
        "ilp": ({"budget_bytes": plan.budget, "baseline_limit_bytes": plan.baseline_limit,
                 "expected_speedup": _speedup(plan.baseline_time_ms, plan.time_ms),
                 "arena_bytes": plan.arena_bytes}
                if plan.optimizer in NETWIDE else None),
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
        base = f"{k.layer}/{k.op}"
        calls = len(inst) * getattr(k, "groups", 1)
        times = f" x{calls}" if calls > 1 else ""
        if len(inst) == total[k.layer, k.op]:
            label = base + times
        else:
            label = base + (f"#{inst[0]}" if len(inst) == 1 else f"#{inst[0]}-{inst[-1]}") + times
        out.append((label, k))
    return out


def _bytes(n: Optional[int]) -> str:
    return "per layer" if n is None else f"{format_size(n)} ({n} B)"


def _print(doc, plan) -> None:
    rows = [("kernel", "micro-batches", "time(ms)", "workspace", "undivided(ms)", "speedup")]
    for label, k in _groups(plan):
        s = _speedup(k.baseline.time_ms, k.plan.time_ms)
        rows.append((label, k.plan.describe(k.op), f"{k.plan.time_ms:.3f}",
                     format_size(k.plan.ws_bytes), f"{k.baseline.time_ms:.3f}",
                     f"{s:.2f}x" if s is not None else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    limit = (f", budget {_bytes(plan.budget)}" if plan.optimizer in NETWIDE else
             f", limit {_bytes(plan.limit)} per kernel")
    print(f"network {doc['network']}, batch {doc['batch']}, policy {doc['policy']}"
          + (f" (sizes {','.join(map(str, doc['sizes']))})" if doc["sizes"] else "")
          + f"{limit}, data: {doc['source']['kind']} {doc['source']['detail']}")
    for r in rows:
        print("  ".join(x.ljust(w) if i < 2 else x.rjust(w)
                        for i, (x, w) in enumerate(zip(r, widths))).rstrip())
    legend = _legend(plan)
    if legend:
        print(legend)
    t = doc["totals"]
    print("(times and workspaces per cuDNN call; xN: N calls per iteration, for Caffe's groups "
          "and identical layers; totals count every call)")
    base_ws = format_size(plan.baseline_limit) if plan.baseline_limit is not None else \
        "the layer's limit"
    print(f"undivided total: {t['undivided_time_ms']:.3f} ms "
          f"(fastest single algorithm within {base_ws} per kernel; predicted)")
    print(f"planned total:   {t['time_ms']:.3f} ms (predicted)")
    print(f"speedup:         {t['speedup']:.3f}x" if t["speedup"] is not None else "speedup: -")
    if plan.arena_bytes is not None:
        print(f"shared arena:    {format_size(plan.arena_bytes)} ({plan.arena_bytes} B), reused "
              f"by every layer (kernels' workspace summed: {format_size(t['ws_bytes'])})")
    else:
        print(f"total workspace: {format_size(t['ws_bytes'])} ({t['ws_bytes']} B) over "
              f"{t['kernels']} kernels")
    sv = doc["solver"]
    if plan.optimizer == "shared":
        print(f"budget:          {format_size(plan.budget)} ({plan.budget} B)")
        print(f"expected speedup vs undivided at the same total memory "
              f"({base_ws} per kernel): {doc['ilp']['expected_speedup']:.3f}x")
        print(f"optimizer:       shared (each layer's concurrent kernels divide the arena, "
              f"solved exactly), {sv['seconds']:.3f} s")
    elif plan.ilp is not None:
        print(f"budget:          {format_size(plan.budget)} ({plan.budget} B)")
        print(f"expected speedup vs undivided at the same total memory "
              f"({base_ws} per kernel): {doc['ilp']['expected_speedup']:.3f}x")
        print(f"optimizer:       ilp (CBC), status {sv['status']}, {sv['variables']} variables, "
              f"solve {sv['seconds']:.3f} s")
    else:
        print(f"optimizer:       dp, limit {_bytes(plan.limit)} per kernel, "
              f"{sv['seconds']:.3f} s")


def run(args) -> int:
    c.dtype(args.dtype)
    if args.table:
        for path in args.table:
            c.text_file(path, "--table")
    layers, label, _ = c.load_layers(args, "alexnet")
    settings, optimizer, budget, notes = _settings(args, layers)
    plan, source, data_notes, solve_s = _plan(args, layers, settings, optimizer, budget)
    notes += data_notes
    for n in notes + plan.notes:
        c.note(n)
    plan.notes[:0] = notes
    sizes = sorted({s.sizes for s in settings.values()} - {None})
    doc = _plan_json(plan, args, label, source, layers, solve_s,
                     list(sizes[0]) if len(sizes) == 1 else None)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print(doc, plan)
    return 0
