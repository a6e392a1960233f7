"""The one network planner: a net's kernels plus their settings -> every kernel's plan and where
its workspace lies.

:func:`plan_network` is what every caller plans a net with: ``ucudnn plan`` (from tables, the
cache or the shipped data), the predicted grid of ``ucudnn reproduce``, and the runtime that
Caffe's net reaches through the C API (``ucudnn_net_plan``), which benchmarks the live kernels
and resolves the plans made here.

Note [One network planner]
    A net is a list of :class:`~ucudnn.plan.layers.LayerSpec` with one
    :class:`~ucudnn.plan.settings.PlanSettings` per layer (Caffe: the layer's ucudnn_param over
    the net's). The layers fall into three groups by their optimizer:

    * ``dp``: each kernel alone, the fastest plan within its layer's ``limit`` per call
      (Note [DP with a workspace limit] in :mod:`ucudnn.plan.dp`); each owns its workspace.
    * ``ilp``: the group's kernels divide one budget (Note [Workspace budget] in
      :mod:`ucudnn.plan.settings`): one plan per kernel from its desirable set, each group
      call paying time and workspace (:mod:`ucudnn.plan.ilp`); each owns its share.
    * ``shared``: one arena of the group's budget, reused by every layer (Note [Shared arena]).

    The undivided baseline of a kernel is the fastest single algorithm within its layer's limit
    (DP) or within the group's budget per call (ILP, shared: the same total memory). Where the
    group's layers set explicit budgets they must agree. The workspace layout
    (:func:`layout`) says where each kernel's workspace lies: owned kernels one after another
    in the net's own workspace, shared ones in the arena; every slot starts 256-byte aligned
    (cuDNN's kernels fail on a misaligned workspace, and its sizes can be odd).

    ``cap`` plans within that many bytes in all (owned workspace and arena): what a host asks
    for after an allocation failed. Every group then gets its calls' share of the cap.

    A layer whose settings are ``deterministic`` is planned, baseline included, from its
    deterministic choices only, whatever its optimizer (Note [Deterministic plans] in
    :mod:`ucudnn.plan.dp`); a kernel with none is a :class:`PlanError` naming the layer, op
    and shape.

Note [Shared arena]
    Caffe runs a net's layers one after another, so a convolution's workspace lies idle except
    while its own layer runs. The ``shared`` optimizer gives the whole budget to every layer as
    one arena that all layers reuse; only kernels that run AT THE SAME TIME need disjoint parts
    of it. Which those are is how Caffe's cuDNN layer runs a layer (:func:`passes`):
    - a one-group layer runs its forward, backward-filter and backward-data calls one after
      another on the default stream, so each has the whole arena;
    - a layer of G > 1 groups runs the G calls of ``fwd`` on G streams at once, and in the
      backward the G calls of ``bwd_filter`` and the G calls of ``bwd_data`` on 2G streams at
      once (the bias gradient needs no workspace); the layer waits for all of them before the
      next layer.
    So each pass of each layer divides the budget, less the slots' alignment, among its
    concurrent calls (the ILP's division per pass, exact by enumeration for these small
    problems), and the arena is the largest pass's total. Its time is never worse than the
    ILP's at a budget smaller by the alignment (under 256 B a call): the ILP's choices for one
    pass fit that budget, so they are among the choices the pass's division considers. The
    slots of a layer's passes overlap (the passes never run at once). Every net of a process on
    one device may share one arena (Caffe runs them from one thread).

    Measured in Caffe on the H200 (results/h200/conv-streams/): the two-stream backward of a
    one-group layer gained nothing over running its calls one after another (ResNet-50 at 128
    33.91 against 33.32 ms, ResNet-18 at 256 24.13 against 23.68 ms, at the same plans), and
    cost half of the arena to each call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .dp import (Plan, desirable_set, determinism_problem, deterministic_only, plan_kernel,
                 undivided_plan)
from .ilp import DEFAULT_TIME_LIMIT, IlpResult, solve_workspace_division
from .layers import LayerSpec
from .settings import PlanSettings
from .table import KernelBench
from ..vocab import NETWIDE_OPTIMIZERS, OPTIMIZERS, PlanError, format_size

__all__ = ["passes", "ALIGN", "align", "Slot", "KernelPlan", "NetworkPlan", "plan_network",
           "layout"]

#: The passes of a layer of one group, and of several: kernels that Caffe runs at the same
#: time (Note [Shared arena]).
ONE_GROUP_PASSES = (("fwd",), ("bwd_filter",), ("bwd_data",))
GROUPED_PASSES = (("fwd",), ("bwd_filter", "bwd_data"))
#: Alignment of every workspace slot, bytes.
ALIGN = 256
#: The order of a layer's slots in owned workspace.
SLOT_ORDER = ("fwd", "bwd_filter", "bwd_data")

Benches = Mapping[Tuple[str, str], KernelBench]
Settings = Union[PlanSettings, Mapping[str, PlanSettings]]


def passes(groups: int) -> Tuple[Tuple[str, ...], ...]:
    """The passes of a layer of ``groups`` groups: tuples of the ops whose calls Caffe runs at
    the same time (Note [Shared arena])."""
    return ONE_GROUP_PASSES if groups == 1 else GROUPED_PASSES


def align(n: int) -> int:
    """``n`` rounded up to the slot alignment."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Slot:
    """Where the workspace of a kernel's group calls lies: group g at ``offset + g * stride``
    of the net's own workspace, or of the arena (``arena``), ``bytes`` each."""
    arena: bool
    offset: int
    stride: int
    bytes: int


@dataclass
class KernelPlan:
    """The plan of one kernel: ``instance`` (0..count-1) of layer ``layer``'s ``op``; it runs
    ``groups`` times per pass (one call per group). ``limit``: the workspace per call it was
    planned within; ``baseline``: the undivided plan there (None: no single algorithm fits)."""
    layer: str
    op: str
    instance: int
    plan: Plan
    baseline: Optional[Plan]
    groups: int = 1
    optimizer: str = "dp"
    limit: int = 0
    slot: Optional[Slot] = None

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
    """Every kernel's plan (in net order), the settings they were planned with (by layer), and
    the workspace: ``workspace_bytes`` owned by the net, ``arena_bytes`` of the shared arena
    (None without shared layers). ``ilp``: the ILP group's solve; ``budget``: the budget of the
    ILP or shared group (None without one)."""
    kernels: List[KernelPlan]
    settings: Dict[str, PlanSettings]
    workspace_bytes: int = 0
    arena_bytes: Optional[int] = None
    ilp: Optional[IlpResult] = None
    budget: Optional[int] = None
    notes: List[str] = field(default_factory=list)

    def _common(self, attr: str, mixed):
        values = {getattr(s, attr) for s in self.settings.values()}
        return values.pop() if len(values) == 1 else mixed

    @property
    def policy(self) -> str:
        return self._common("policy", "per layer")

    @property
    def optimizer(self) -> str:
        return self._common("optimizer", "mixed")

    @property
    def limit(self) -> Optional[int]:
        return self._common("limit", None)

    @property
    def deterministic(self) -> Optional[bool]:
        """Whether the layers were planned from deterministic choices only (None: some
        were)."""
        return self._common("deterministic", None)

    @property
    def netwide(self) -> bool:
        """Every kernel planned by the ILP, or every kernel in the shared arena."""
        return self.optimizer in NETWIDE_OPTIMIZERS

    @property
    def baseline_limit(self) -> Optional[int]:
        """Workspace per call of the undivided baseline where all kernels share one: the
        limit (DP), the budget per call (ILP, shared); None for mixed settings."""
        if self.netwide:
            return self.budget // self.n_calls if self.n_calls else self.budget
        return self.limit if self.optimizer == "dp" else None

    @property
    def time_ms(self) -> float:
        """Predicted time of one pass: every kernel, every group call."""
        return sum(k.time_ms for k in self.kernels)

    @property
    def baseline_time_ms(self) -> Optional[float]:
        if any(k.baseline is None for k in self.kernels):
            return None
        return sum(k.groups * k.baseline.time_ms for k in self.kernels)

    @property
    def speedup(self) -> Optional[float]:
        base = self.baseline_time_ms
        return base / self.time_ms if base is not None and self.time_ms > 0 else None

    @property
    def ws_bytes(self) -> int:
        """Sum of the kernels' workspace: one slot per group call of every kernel."""
        return sum(k.ws_bytes for k in self.kernels)

    @property
    def held_bytes(self) -> int:
        """Workspace the network holds: its own and the arena's."""
        return self.workspace_bytes + (self.arena_bytes or 0)

    @property
    def n_calls(self) -> int:
        """Group calls per pass."""
        return sum(k.groups for k in self.kernels)


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------

def _per_layer(layers: Sequence[LayerSpec], settings: Settings) -> Dict[str, PlanSettings]:
    if isinstance(settings, PlanSettings):
        return {l.name: settings for l in layers}
    missing = [l.name for l in layers if l.name not in settings]
    if missing:
        raise PlanError(f"layer {missing[0]!r}: no settings given")
    return {l.name: settings[l.name] for l in layers}


def _group_budget(layers: Sequence[LayerSpec], per: Mapping[str, PlanSettings],
                  what: str) -> int:
    """The one budget of a group's layers (Note [Workspace budget]): the explicit one they
    agree on, else the sum of their limit x calls."""
    explicit = {}
    for l in layers:
        if per[l.name].budget is not None:
            explicit.setdefault(per[l.name].budget, l.name)
    if len(explicit) > 1:
        (b1, l1), (b2, l2) = sorted(explicit.items())[:2]
        raise PlanError(f"layer {l2!r}: field 'total_workspace' {b2} differs from layer "
                        f"{l1!r}'s {b1} (one {what} budget per net)")
    if explicit:
        return next(iter(explicit))
    return sum(per[l.name].limit * l.calls for l in layers)


def _derived(layers: Sequence[LayerSpec], per: Mapping[str, PlanSettings], budget: int,
             e: PlanError) -> PlanError:
    """``e`` about a budget the layers did not set (Note [Workspace budget]) restated as
    their limit x calls, which is what was given."""
    if any(per[l.name].budget is not None for l in layers):
        return e
    limits = {per[l.name].limit for l in layers}
    calls = sum(l.calls for l in layers)
    head = (f"{format_size(limits.pop())} x {calls} kernel calls" if len(limits) == 1 else
            f"the layers' limits x their {calls} kernel calls")
    msg = str(e)
    prefix = "workspace_budget: "
    if msg.startswith(prefix):
        rest = msg[len(prefix):].split(" is below", 1)
        msg = f"workspace_limit: {head} = {format_size(budget)} is below" + (
            rest[1] if len(rest) == 2 else "")
    return PlanError(msg)


def _deterministic_benches(layers: Sequence[LayerSpec], benches: Benches,
                           per: Mapping[str, PlanSettings]) -> Benches:
    """``benches`` with the kernels of deterministic layers left their deterministic choices
    (Note [Deterministic plans] in :mod:`ucudnn.plan.dp`); PlanError naming the first kernel
    left with none."""
    if not any(per[l.name].deterministic for l in layers):
        return benches
    out = dict(benches)
    for l in layers:
        if not per[l.name].deterministic:
            continue
        for op in l.ops:
            problem = determinism_problem(benches[l.name, op])
            if problem is not None:
                raise PlanError(f"layer {l.name!r} op {op} (N={l.n} {l.describe()}): {problem}")
            out[l.name, op] = deterministic_only(benches[l.name, op])
    return out


def plan_network(layers: Sequence[LayerSpec], benches: Benches, settings: Settings, *,
                 strict: Union[bool, Callable[[str, str], bool]] = True,
                 cap: Optional[int] = None,
                 ilp_time_limit: Optional[float] = DEFAULT_TIME_LIMIT,
                 progress: Optional[Callable[[str], None]] = None) -> NetworkPlan:
    """Plan every kernel of ``layers`` (Note [One network planner], Note [Layers, groups and
    counts] in :mod:`ucudnn.plan.layers`).

    ``benches[layer_name, op]``: the benchmark of the layer's kernel (one group's call).
    ``settings``: one :class:`PlanSettings` for all layers, or one per layer name.
    ``strict``: every candidate size must be measured; a callable ``strict(layer, op)`` says
    it per kernel (False: plan over the sizes measured, e.g. a pruned search's); with False
    the sizes skipped are noted. ``cap``: plan within that many bytes in all.
    ``ilp_time_limit``: seconds the ILP's solver may search (None: no limit), then the best plan
    so far, noted (Note [ILP time limit] in :mod:`ucudnn.plan.ilp`); ``progress(text)`` hears
    how the solver is doing."""
    per = _per_layer(layers, settings)
    for l in layers:
        for op in l.ops:
            if (l.name, op) not in benches:
                raise PlanError(f"layer {l.name!r}: no benchmark for op {op!r}")
    benches = _deterministic_benches(layers, benches, per)
    is_strict = strict if callable(strict) else (lambda layer, op, s=bool(strict): s)
    if cap is not None and cap < 0:
        raise PlanError(f"cap: must not be negative, got {cap}")

    notes: List[str] = []
    missing = sorted({b for l in layers for op in l.ops if not is_strict(l.name, op)
                      for b in per[l.name].candidate_sizes(l.n, f"layer {l.name!r}")
                      if b not in benches[l.name, op]})
    if missing and not callable(strict):
        notes.append(f"sizes without measurements skipped ({len(missing)} sizes, e.g. "
                     f"{missing[:5]})")

    groups = {o: [l for l in layers if per[l.name].optimizer == o] for o in OPTIMIZERS}
    total_calls = sum(l.calls for l in layers)

    def capped(calls: int, value: int, slack: int) -> int:
        """``value`` within the share of the cap of ``calls`` kernel calls (one DP kernel's,
        a group's), less ``slack`` (their slots' alignment)."""
        if cap is None:
            return value
        return min(value, max(0, cap * calls // total_calls - slack))

    plans: Dict[Tuple[str, str, int], KernelPlan] = {}

    def name(l, op):
        return f"layer {l.name!r} op {op}"

    def base(l, op, limit):
        try:
            return undivided_plan(benches[l.name, op], l.n, limit,
                                  name=f"{name(l, op)} (undivided baseline)")
        except PlanError:
            return None

    for l in groups["dp"]:
        s = per[l.name]
        limit = capped(1, s.limit, ALIGN)
        for op in l.ops:
            plan = plan_kernel(benches[l.name, op], l.n, s.policy, limit, s.sizes,
                               strict=is_strict(l.name, op), name=name(l, op))
            b = base(l, op, limit)
            for i in range(l.count):
                plans[l.name, op, i] = KernelPlan(l.name, op, i, plan, b, l.groups, "dp", limit)

    def fronts_of(group):
        fronts = {}
        for l in group:
            s = per[l.name]
            for op in l.ops:
                fronts[l.name, op] = desirable_set(benches[l.name, op], l.n, s.policy, s.sizes,
                                                   strict=is_strict(l.name, op),
                                                   name=name(l, op))
        return fronts

    ilp = budget = None
    if groups["ilp"]:
        group = groups["ilp"]
        calls = sum(l.calls for l in group)
        budget = capped(calls, _group_budget(group, per, "ILP"), ALIGN * calls)
        fronts = fronts_of(group)
        keys = [(l, op, i) for l in group for op in l.ops for i in range(l.count)]
        try:
            ilp = solve_workspace_division(
                {(l.name, op, i): fronts[l.name, op] for l, op, i in keys}, budget,
                weights={(l.name, op, i): l.groups for l, op, i in keys},
                time_limit=ilp_time_limit, progress=progress)
        except PlanError as e:
            raise _derived(group, per, budget, e) from None
        if ilp.note:
            notes.append(ilp.note)
        per_call = budget // calls if calls else budget
        for l, op, i in keys:
            chosen = ilp.choices[l.name, op, i]
            plans[l.name, op, i] = KernelPlan(l.name, op, i, chosen, base(l, op, per_call),
                                              l.groups, "ilp", chosen.ws_bytes)

    arena = None
    if groups["shared"]:
        group = groups["shared"]
        calls = sum(l.calls for l in group)
        shared_budget = capped(calls, _group_budget(group, per, "shared-arena"), 0)
        budget = shared_budget if budget is None else budget
        fronts = fronts_of(group)
        per_call = shared_budget // calls if calls else shared_budget
        arena = 0
        for l in group:
            chosen = {}
            for pass_ in passes(l.groups):
                ops = [op for op in pass_ if op in l.ops]
                within = max(0, shared_budget - ALIGN * len(ops) * l.groups)
                try:
                    res = solve_workspace_division({op: fronts[l.name, op] for op in ops},
                                                   within, weights={op: l.groups for op in ops},
                                                   time_limit=ilp_time_limit)
                except PlanError as e:
                    raise PlanError(f"layer {l.name!r} ({' + '.join(ops)} run at once, "
                                    f"{l.groups} group call(s) each): {e}") from None
                if res.note:
                    notes.append(f"layer {l.name!r} ({' + '.join(ops)}): {res.note}")
                chosen.update(res.choices)
                arena = max(arena, sum(align(res.choices[op].ws_bytes) * l.groups
                                       for op in ops))
            for op in l.ops:
                for i in range(l.count):
                    plans[l.name, op, i] = KernelPlan(l.name, op, i, chosen[op],
                                                      base(l, op, per_call), l.groups, "shared",
                                                      chosen[op].ws_bytes)

    kernels = [plans[l.name, op, i] for l in layers for op in l.ops for i in range(l.count)]
    net = NetworkPlan(kernels, per, arena_bytes=arena, ilp=ilp, budget=budget, notes=notes)
    net.workspace_bytes = layout(net)
    return net


def layout(net: NetworkPlan) -> int:
    """Give every kernel of ``net`` its :class:`Slot` (Note [One network planner], Note
    [Shared arena]); returns the bytes of the net's own workspace. Owned slots follow each
    other, per layer forward, backward-filter, backward-data, each group's slot aligned;
    shared kernels lie in the arena, each pass of a layer (:func:`passes`) from the arena's
    start and its kernels one after another (a grouped layer's backward-data after its
    backward-filter)."""
    offset = 0
    by_layer: Dict[Tuple[str, int], Dict[str, KernelPlan]] = {}
    for k in net.kernels:
        by_layer.setdefault((k.layer, k.instance), {})[k.op] = k
    for kernels in by_layer.values():
        pass_end: Dict[Tuple[str, ...], int] = {}      # where a pass's next slot starts
        for op in SLOT_ORDER:
            k = kernels.get(op)
            if k is None:
                continue
            stride = align(k.plan.ws_bytes)
            if k.optimizer == "shared":
                pass_ = next(p for p in passes(k.groups) if op in p)
                start = pass_end.get(pass_, 0)
                k.slot = Slot(True, start, stride, k.plan.ws_bytes)
                pass_end[pass_] = start + stride * k.groups
            else:
                k.slot = Slot(False, offset, stride, k.plan.ws_bytes)
                offset += stride * k.groups
    return offset
