"""Plans for a whole network: per-layer limits (DP) or one total budget (ILP).

A network is a list of :class:`LayerSpec` (convolution layers as the prototxt states them);
each layer has up to three kernels (``fwd``, ``bwd_data``, ``bwd_filter``).

Note [Layers, groups and counts]
    The model is what Caffe (caffe_patch/0002) runs, so that offline predictions and cache keys
    are Caffe's:

    * ``c``, ``k`` are the layer's TOTAL input and output channels, as in the prototxt.
    * ``groups`` is Caffe's group count G: the layer runs each kernel G times per pass, one
      cuDNN call per group on C/G -> K/G channels (a strided view into the whole blob, see
      Note [Grouped layers] in :mod:`ucudnn.plan.conv`), all G calls with ONE plan, each call
      on its own workspace slot.
    * ``count`` is how many identical layers the net has (ResNet repeats shapes); each is a
      kernel of its own, with its own plan.

    So each (layer, op, repeat) is one :class:`KernelPlan`. The DP's ``limit`` applies to one
    group call (Caffe's ``workspace_limit`` is per slot); the ILP chooses one plan per kernel,
    weighed by ``groups`` in time and workspace; totals (``time_ms``, ``ws_bytes``, the
    baseline) count every group call. The ILP's default budget is ``limit`` x the number of
    group calls, as Caffe's ``PlanNetwork`` sums ``workspace_limit`` x groups.

Note [Shared arena]
    Caffe runs a net's layers one after another, so a convolution's workspace lies idle except
    while its own layer runs. The ``shared`` optimizer gives the whole ``budget`` to every
    layer as one arena that all layers reuse; only kernels that run AT THE SAME TIME need
    disjoint parts of it. In Caffe's cuDNN layer those are the kernels of one phase: the
    forward pass runs the G group calls of ``fwd`` on G streams at once; the backward pass runs
    the G calls of ``bwd_filter`` and the G calls of ``bwd_data`` on 2G streams at once (the
    bias gradient needs no workspace); the layer waits for all of them before the next layer.
    So each phase of each layer divides the budget among its concurrent calls (the same
    division as the ILP, per phase: :func:`~ucudnn.plan.ilp.solve_workspace_division`, exact
    by enumeration for these small problems), and the arena is the largest phase's total.
    Its time is never worse than the ILP's at the same budget: the ILP's choices for one
    phase fit the budget, so they are among the choices the phase's division considers.
    The default budget is ``limit`` x group calls, so settings compare at equal memory.
"""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .dp import (Plan, PlanError, candidate_sizes, desirable_set, normalise_policy,
                 plan_kernel, undivided_plan)
from .ilp import IlpResult, solve_workspace_division
from .table import OPS, KernelBench, read_text
from ..vocab import OPTIMIZERS, InputError

#: Kernels of one layer that Caffe runs at the same time (Note [Shared arena]).
PHASES = (("fwd",), ("bwd_filter", "bwd_data"))

__all__ = ["LayerSpec", "read_layers", "write_layers", "KernelPlan", "NetworkPlan",
           "plan_network", "LayerError"]


class LayerError(InputError):
    """A layer list is malformed; the message names the file, line, layer and field."""


LAYER_COLUMNS = ("name", "N", "C", "H", "W", "K", "R", "S", "pad", "stride",
                 "dilation", "groups", "count", "bwd_data")


@dataclass(frozen=True)
class LayerSpec:
    """One convolution layer: input N x C x H x W, K output channels, R x S filters.

    ``c``, ``k``: the layer's total channels (as in the prototxt); ``groups``: Caffe's group
    count (each group a separate cuDNN call on C/groups -> K/groups channels, one plan for all);
    ``count``: identical layers in the net, each with its own kernels and plans (Note [Layers,
    groups and counts]). ``bwd_data``: whether backward-data runs (not for the first layer)."""
    name: str
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: int = 0
    stride: int = 1
    dilation: int = 1
    groups: int = 1
    count: int = 1
    bwd_data: bool = True

    def __post_init__(self):
        for f in ("n", "c", "h", "w", "k", "r", "s", "stride", "dilation", "groups", "count"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise LayerError(f"layer {self.name!r}: field {f!r} must be a positive integer, got {v!r}")
        if self.c % self.groups or self.k % self.groups:
            raise LayerError(f"layer {self.name!r}: field 'groups': {self.groups} does not divide "
                             f"C={self.c} and K={self.k} (C and K are the layer's total channels)")
        if not isinstance(self.pad, int) or self.pad < 0:
            raise LayerError(f"layer {self.name!r}: field 'pad' must be >= 0, got {self.pad!r}")
        for dim, size, f in (("H", self.h, self.r), ("W", self.w, self.s)):
            if size + 2 * self.pad < self.dilation * (f - 1) + 1:
                raise LayerError(f"layer {self.name!r}: filter larger than padded input along {dim}")

    @property
    def ops(self) -> Tuple[str, ...]:
        return OPS if self.bwd_data else ("fwd", "bwd_filter")

    @property
    def out_hw(self) -> Tuple[int, int]:
        def o(x, f):
            return (x + 2 * self.pad - self.dilation * (f - 1) - 1) // self.stride + 1
        return o(self.h, self.r), o(self.w, self.s)


def read_layers(path: str | os.PathLike) -> List[LayerSpec]:
    """Read a layer list CSV.

    Columns ``name,N,C,H,W,K,R,S,pad,stride`` then, optional, ``dilation,groups,count,bwd_data``
    with the meaning of :class:`LayerSpec` (C, K total; groups Caffe's; count repeats; Note
    [Layers, groups and counts]). The header may be a comment line (``# name,N,...``) as in ``../shared/data``; columns named
    ``unused`` are ignored.
    """
    path = os.fspath(path)
    header: Optional[List[str]] = None
    layers: List[LayerSpec] = []
    text = read_text(path, LayerError, "a layer list")
    for lineno, rec in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        rec = [x.strip() for x in rec]
        if not rec or not "".join(rec):
            continue
        if rec[0].startswith("#"):
            if header is None and rec[0].lstrip("# ").strip() == "name":
                header = ["name"] + rec[1:]
            continue
        if header is None and rec[0] == "name":
            header = rec
            continue
        cols = header or list(LAYER_COLUMNS)
        if len(rec) > len(cols):
            raise LayerError(f"{path}:{lineno}: {len(rec)} fields, expected at most {len(cols)}")
        d = dict(zip(cols, rec))
        kw = {}
        where = f"{path}:{lineno}: layer {d.get('name', '?')!r}"
        for col, attr in (("N", "n"), ("C", "c"), ("H", "h"), ("W", "w"), ("K", "k"),
                          ("R", "r"), ("S", "s"), ("pad", "pad"), ("stride", "stride"),
                          ("dilation", "dilation"), ("groups", "groups"), ("count", "count")):
            if col in d and d[col] != "":
                try:
                    kw[attr] = int(d[col])
                except ValueError:
                    raise LayerError(f"{where}: field {col!r}: cannot parse {d[col]!r}") from None
            elif col in LAYER_COLUMNS[:10]:
                raise LayerError(f"{where}: field {col!r} is missing")
        if d.get("bwd_data", "") != "":
            if d["bwd_data"] not in ("0", "1"):
                raise LayerError(f"{where}: field 'bwd_data' must be 0 or 1, got {d['bwd_data']!r}")
            kw["bwd_data"] = d["bwd_data"] == "1"
        try:
            layers.append(LayerSpec(name=d["name"], **kw))
        except LayerError as e:
            raise LayerError(f"{path}:{lineno}: {e}") from None
    if not layers:
        raise LayerError(f"{path}: the layer list is empty")
    names = [l.name for l in layers]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise LayerError(f"{path}: duplicate layer name(s) {sorted(dup)}")
    return layers


def write_layers(path: str | os.PathLike, layers: Iterable[LayerSpec]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(LAYER_COLUMNS)
        for l in layers:
            w.writerow([l.name, l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride,
                        l.dilation, l.groups, l.count, int(l.bwd_data)])


@dataclass
class KernelPlan:
    """The plan of one kernel: ``instance`` (0..count-1) of layer ``layer``'s ``op``; it runs
    ``groups`` times per pass (one call per group, each on its own workspace slot)."""
    layer: str
    op: str
    instance: int
    plan: Plan
    baseline: Plan
    groups: int = 1

    @property
    def time_ms(self) -> float:
        """Predicted time of all its group calls."""
        return self.groups * self.plan.time_ms

    @property
    def ws_bytes(self) -> int:
        """Workspace of all its group calls (one slot each)."""
        return self.groups * self.plan.ws_bytes

    @property
    def name(self) -> str:
        return f"{self.layer}/{self.op}" + (f"#{self.instance}" if self.instance else "")


@dataclass
class NetworkPlan:
    kernels: List[KernelPlan]
    policy: str
    optimizer: str
    limit: Optional[int]
    budget: Optional[int]
    baseline_limit: int
    ilp: Optional[IlpResult] = None
    notes: List[str] = field(default_factory=list)
    #: ``shared``: bytes of the one arena every layer reuses (Note [Shared arena])
    arena_bytes: Optional[int] = None

    @property
    def time_ms(self) -> float:
        """Predicted time of one pass: every kernel, every group call."""
        return sum(k.groups * k.plan.time_ms for k in self.kernels)

    @property
    def baseline_time_ms(self) -> float:
        return sum(k.groups * k.baseline.time_ms for k in self.kernels)

    @property
    def speedup(self) -> float:
        return self.baseline_time_ms / self.time_ms if self.time_ms > 0 else float("nan")

    @property
    def ws_bytes(self) -> int:
        """Sum of the kernels' workspace: one slot per group call of every kernel."""
        return sum(k.groups * k.plan.ws_bytes for k in self.kernels)

    @property
    def held_bytes(self) -> int:
        """Workspace the network holds: the shared arena, else the sum of the kernels'."""
        return self.arena_bytes if self.arena_bytes is not None else self.ws_bytes

    @property
    def n_calls(self) -> int:
        """Group calls per pass (the ILP's default budget is ``limit`` x this)."""
        return sum(k.groups for k in self.kernels)


def plan_network(layers: Sequence[LayerSpec], benches: Mapping[Tuple[str, str], KernelBench], *,
                 policy: str = "powerOfTwo", limit: Optional[int] = None,
                 budget: Optional[int] = None, optimizer: str = "dp",
                 sizes: Optional[Sequence[int]] = None, strict: bool = True) -> NetworkPlan:
    """Plan every kernel of ``layers`` (Note [Layers, groups and counts]).

    ``benches[layer_name, op]``: the benchmark of the layer's kernel (one group's call).
    ``optimizer="dp"``: each kernel within ``limit`` bytes per group call. ``optimizer="ilp"``:
    one ``budget`` for all group calls (default ``limit`` x number of group calls), one plan per
    kernel for all its groups. ``optimizer="shared"``: one arena of ``budget`` bytes (same
    default) that every layer reuses (Note [Shared arena]). The baseline is the undivided plan
    at ``limit`` (ILP and shared: at ``budget`` / number of group calls, the same total
    memory).
    """
    policy = normalise_policy(policy)
    if optimizer not in OPTIMIZERS:
        raise PlanError(f"optimizer: unknown optimizer {optimizer!r} (expected "
                        f"{', '.join(OPTIMIZERS)})")
    instances = [(l, op, i) for l in layers for op in l.ops for i in range(l.count)]
    for l in layers:
        for op in l.ops:
            if (l.name, op) not in benches:
                raise PlanError(f"layer {l.name!r}: no benchmark for op {op!r}")
    n_calls = sum(l.groups for l, _, _ in instances)
    if optimizer == "dp":
        if limit is None:
            raise PlanError("workspace_limit: the DP optimizer needs a per-layer limit")
        baseline_limit = limit
    else:
        if budget is None:
            if limit is None:
                raise PlanError(f"workspace_budget: the {optimizer} optimizer needs a budget "
                                "(or a per-layer limit to multiply by the number of kernels)")
            budget = limit * n_calls
        baseline_limit = budget // n_calls if n_calls else budget
    for v, what in ((limit, "workspace_limit"), (budget, "workspace_budget")):
        if v is not None and v < 0:
            raise PlanError(f"{what}: must not be negative, got {v}")

    notes: List[str] = []
    cands = sizes
    if not strict:
        missing = sorted({b for l in layers for op in l.ops
                          for b in candidate_sizes(policy, l.n, sizes) if b not in benches[l.name, op]})
        if missing:
            notes.append(f"policy {policy}: sizes without measurements skipped "
                         f"({len(missing)} sizes, e.g. {missing[:5]})")

    kernels: List[KernelPlan] = []
    ilp = None
    arena = None
    baseline: Dict[Tuple[str, str], Plan] = {}

    def base(l, op):
        if (l.name, op) not in baseline:
            baseline[l.name, op] = undivided_plan(benches[l.name, op], l.n, baseline_limit,
                                                  name=f"layer {l.name!r} op {op} (undivided baseline)")
        return baseline[l.name, op]

    if optimizer == "dp":
        for l in layers:
            for op in l.ops:
                plan = plan_kernel(benches[l.name, op], l.n, policy, limit, cands,
                                   strict=strict, name=f"layer {l.name!r} op {op}")
                kernels += [KernelPlan(l.name, op, i, plan, base(l, op), l.groups)
                            for i in range(l.count)]
    elif optimizer == "shared":
        arena = 0
        planned = []
        for l in layers:
            chosen = {}
            for phase in PHASES:
                ops = [op for op in phase if op in l.ops]
                fronts = {op: desirable_set(benches[l.name, op], l.n, policy, cands,
                                            strict=strict, name=f"layer {l.name!r} op {op}")
                          for op in ops}
                try:
                    res = solve_workspace_division(fronts, budget,
                                                   weights={op: l.groups for op in ops})
                except PlanError as e:
                    raise PlanError(f"layer {l.name!r} ({' + '.join(ops)} run at once, "
                                    f"{l.groups} group call(s) each): {e}") from None
                chosen.update(res.choices)
                arena = max(arena, res.total_ws_bytes)
            planned.append((l, chosen))
        kernels = [KernelPlan(l.name, op, i, chosen[op], base(l, op), l.groups)
                   for l, chosen in planned for op in l.ops for i in range(l.count)]
    else:
        fronts = {}
        cache: Dict[Tuple[str, str], List[Plan]] = {}
        for l, op, i in instances:
            if (l.name, op) not in cache:
                cache[l.name, op] = desirable_set(benches[l.name, op], l.n, policy, cands,
                                                  strict=strict, name=f"layer {l.name!r} op {op}")
            fronts[l.name, op, i] = cache[l.name, op]
        # solved before the baseline is planned, so that a budget error is the one reported
        # one choice per kernel for all its groups, each group call paying time and workspace
        weights = {(l.name, op, i): l.groups for l, op, i in instances}
        ilp = solve_workspace_division(fronts, budget, weights=weights)
        kernels = [KernelPlan(l.name, op, i, ilp.choices[l.name, op, i], base(l, op), l.groups)
                   for l, op, i in instances]
    return NetworkPlan(kernels, policy, optimizer, limit, budget, baseline_limit, ilp, notes,
                       arena)
