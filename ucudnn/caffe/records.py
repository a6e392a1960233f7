"""Reading the plan records the core writes inside Caffe (``$UCUDNN_RECORDS``).

The writer is :mod:`ucudnn.measure.records` (the runtime Caffe calls through the C API); this
module reads and validates what it wrote and sums it up per kernel, for ``ucudnn reproduce``
and the GPU tests. Caffe's own ``caffe time`` output is read by :mod:`ucudnn.caffe.log`.

Note [Plan records]
    A records file holds one JSON object per line (JSON Lines, UTF-8), appended by every
    process and thread that plans (Note [Appending records] in ucudnn/measure/records.py).
    Every record has the envelope::

        schema    "ucudnn.plan-record"            (records.SCHEMA)
        version   2                               (records.VERSION; other versions refused)
        kind      "bench" | "kernel" | "net"
        pid       writing process; thread: its native thread id
        time      seconds since the epoch (float) when the record was written

    A kernel is identified within its process by ``kernel_id`` (``id()`` of the core's Kernel:
    records of one live kernel agree; a destroyed kernel's id may be reused by a later one), and
    described by::

        device      CUDA device index the kernel was created on (null where unknown)
        layer, op   the layer's name; "fwd" | "bwd_data" | "bwd_filter"
        instances   runs of the kernel per pass, each on its own workspace (Caffe's group
                    count; 1 for ungrouped layers)
        batch       the mini-batch the plan covers
        shape       the ConvShape's fields (c, h, w, k, r, s, pad_*, stride_*, dil_*, groups,
                    x_strides, y_strides); per group where Caffe runs groups separately; a
                    3-D shape's also d, t, pad_d, stride_d, dil_d and five strides each
                    (Note [N-D geometry] in ucudnn/plan/conv.py: version 2 still, since a
                    2-D record is as it was and readers take the shape as an open object)
        dtype, math "float32"..., "default" | "tensor_op" | ... | "fma"
        policy, optimizer, limit_bytes, micro_batch_sizes   the kernel's settings

    ``kind: "bench"`` -- one per benchmark of a kernel (before its first plan)::

        sizes               candidate micro-batch sizes (pruned search: the sizes it measured)
        sizes_benchmarked   of them timed now; sizes_cached: read from the benchmark cache
        bench_s             seconds for both; repeats, cache_path, exclude_winograd,
                            deterministic (Note [Deterministic plans] in ucudnn/plan/dp.py;
                            absent from records written before it)
        search              "exhaustive" | "pruned" (Note [Pruned search at run time]);
                            search_rounds: the pruned search's rounds (null: exhaustive)
        benchmark_seconds   where the core's benchmark spent bench_s, in parts that do not
                            overlap: {setup (buffers and workspace), warmup_find, find, retime
                            (Note [Re-timing near the front] in cython/ucudnn/_timing.pyx),
                            graph_heuristics, graph_build, graph_time, graph_check (Note [Graph
                            results checked])}; zeros when all was cached

    ``kind: "kernel"`` -- one per plan a kernel is given; the last of a kernel is the plan it
    runs::

        stage           the optimizer that made the plan: "dp" (within plan_limit_bytes),
                        "ilp" (the net's ILP), "shared" (a pass of the shared arena); or
                        "replan" (one kernel planned again within a new limit)
        plan_limit_bytes  the workspace per call the plan was made within
        plan            runs of equal micro-batches: [{batch, count, algo, algo_name (cuDNN's
                        name, vocab.algo_name), math (cudnnMathType_t), time_ms and ws_bytes
                        of ONE micro-batch}]
        plan_text       Plan.describe(), as the C API and Caffe's log line print it
        predicted_ms    the plan's time for the mini-batch, one instance
        ws_bytes        workspace of one instance as cuDNN resolved it
        undivided       the undivided baseline within the kernel's limit (DP) or the budget
                        per call (ILP, shared): {predicted_ms, ws_bytes, plan}, or null when no
                        algorithm fits
        slot            where the host puts its workspace: {arena, offset, stride, bytes}
                        (Note [One network planner] in ucudnn/plan/network.py); absent for a
                        kernel planned alone
        plan_s          seconds spent planning (the net's, for a net's kernels)
        optimizer, and the kernel's benchmark fields: sizes, sizes_benchmarked,
                        sizes_cached, bench_s, search, search_rounds, benchmark_seconds

    ``kind: "net"`` -- one per net planned (ucudnn_net_plan), after its kernels' records::

        net             the host's name of the net
        kernels, calls  its kernels, and their group calls per pass
        predicted_ms    all of them; undivided_ms: their undivided baselines (null: some
                        kernel has none)
        workspace_bytes the net's own workspace; arena_bytes: the shared arena's (null:
                        none)
        budget_bytes    the ILP's or shared arena's budget (null: DP only); solve_s: the
                        ILP's solve (null: none); plan_s; cap_bytes (the cap after a failed
                        allocation, else null)
        members         [{kernel_id, layer, op, instances, optimizer, ws_bytes}]

    Times are null rather than NaN (JSON has none). Readers must ignore fields they do not
    know; a new field keeps the version, a changed meaning raises it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union

from ..measure.records import ENV, KINDS, SCHEMA, STAGES, VERSION

__all__ = ["ENV", "SCHEMA", "VERSION", "KINDS", "STAGES", "RecordError", "read_records",
           "parse_records", "KernelPlan", "PlanSummary", "summarize", "kernel_plans"]


class RecordError(ValueError):
    """A records file that is not one this version writes (the message names file and line)."""


def parse_records(text: str, source: str = "records") -> List[dict]:
    """Every record of ``text`` (JSON Lines), validated; blank lines are skipped."""
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{i}"
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise RecordError(f"{where}: not a JSON object ({e}); a cut line means a writer "
                              "was killed mid-write") from None
        if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
            raise RecordError(f"{where}: not a ucudnn plan record (schema "
                              f"{rec.get('schema') if isinstance(rec, dict) else None!r}, "
                              f"expected {SCHEMA!r})")
        if rec.get("version") != VERSION:
            raise RecordError(f"{where}: plan record version {rec.get('version')!r}; this "
                              f"ucudnn reads version {VERSION}")
        if rec.get("kind") not in KINDS:
            raise RecordError(f"{where}: unknown record kind {rec.get('kind')!r} (expected "
                              f"one of {', '.join(KINDS)})")
        missing = [f for f in _REQUIRED[rec["kind"]] if f not in rec]
        if missing:
            raise RecordError(f"{where}: {rec['kind']} record without field(s) "
                              + ", ".join(missing))
        out.append(rec)
    return out


_KERNEL = ("pid", "kernel_id", "layer", "op", "instances", "batch")
_REQUIRED = {"bench": _KERNEL + ("sizes_benchmarked", "sizes_cached", "bench_s"),
             "kernel": _KERNEL + ("stage", "plan", "plan_text", "predicted_ms", "ws_bytes"),
             "net": ("pid", "workspace_bytes", "arena_bytes", "budget_bytes", "solve_s",
                     "members")}


def read_records(path: Union[str, Path]) -> List[dict]:
    """The records of the file at ``path``; a missing file has none."""
    p = Path(path)
    if not p.exists():
        return []
    return parse_records(p.read_text(encoding="utf-8"), source=str(p))


@dataclass
class KernelPlan:
    """The plan a kernel ran (its last ``kernel`` record) and how it was obtained."""
    layer: str
    op: str
    instances: int
    batch: int
    plan: str                       # Plan.describe()
    chunks: List[dict]              # the record's "plan"
    predicted_ms: Optional[float]
    ws_bytes: int
    stage: str
    device: Optional[int] = None
    undivided_ms: Optional[float] = None
    bench_s: Optional[float] = None
    plan_s: Optional[float] = None
    sizes: Optional[int] = None
    sizes_benchmarked: Optional[int] = None
    sizes_cached: Optional[int] = None
    replans: int = 0
    optimizer: Optional[str] = None     # "dp" | "ilp" | "shared"

    @classmethod
    def from_record(cls, rec: dict) -> "KernelPlan":
        und = rec.get("undivided") or {}
        return cls(layer=rec["layer"], op=rec["op"], instances=int(rec["instances"]),
                   batch=int(rec["batch"]), plan=rec["plan_text"], chunks=rec["plan"],
                   predicted_ms=rec["predicted_ms"], ws_bytes=int(rec["ws_bytes"]),
                   stage=rec["stage"], device=rec.get("device"),
                   undivided_ms=und.get("predicted_ms"), bench_s=rec.get("bench_s"),
                   plan_s=rec.get("plan_s"), sizes=rec.get("sizes"),
                   sizes_benchmarked=rec.get("sizes_benchmarked"),
                   sizes_cached=rec.get("sizes_cached"),
                   optimizer=rec.get("optimizer") or rec["stage"])


@dataclass
class PlanSummary:
    """What the records of one net say: per ``layer/op`` the plan it ran, and the totals of
    the last net planned (its own workspace plus the shared arena)."""
    kernels: Dict[str, KernelPlan] = field(default_factory=dict)
    ilp_solve_s: Optional[float] = None       # summed over the nets planned
    ilp_budget_bytes: Optional[int] = None    # the last net's budget (ILP or shared)
    held_bytes: Optional[int] = None          # the last net's workspace and arena
    replans: int = 0

    @property
    def bench_s(self) -> float:
        return sum(k.bench_s or 0.0 for k in self.kernels.values())

    @property
    def plan_s(self) -> float:
        return max((k.plan_s or 0.0 for k in self.kernels.values()), default=0.0)

    def predicted_conv_ms(self) -> Optional[float]:
        """Predicted time of one pass's convolutions (every instance)."""
        if not self.kernels:
            return None
        return sum((k.predicted_ms or 0.0) * k.instances for k in self.kernels.values())

    def workspace_bytes(self) -> Optional[int]:  # None: no kernel (stock Caffe)
        """Workspace the net holds: what its ``net`` record says (its own workspace and the
        shared arena), else the sum of its kernels' (kernels planned alone)."""
        if not self.kernels:
            return None
        if self.held_bytes is not None:
            return self.held_bytes
        return sum(k.ws_bytes * k.instances for k in self.kernels.values())


def kernel_plans(records: Iterable[dict]) -> List[KernelPlan]:
    """Every ``kernel`` record, in order (``caffe train`` plans its train and test nets' kernels
    separately; a kernel planned again appears again)."""
    return [KernelPlan.from_record(r) for r in records if r["kind"] == "kernel"]


def summarize(records: Iterable[dict]) -> PlanSummary:
    """Per ``layer/op``: the last plan, with its benchmark and planning times, and how often
    it was planned again; the net's totals from its last ``net`` record (solve times summed).
    Meant for one net in one process (``caffe time``): kernels of several nets with the same
    layer names overwrite each other; use :func:`kernel_plans` there."""
    s = PlanSummary()
    for r in records:
        if r["kind"] == "net":
            if r["solve_s"] is not None:
                s.ilp_solve_s = (s.ilp_solve_s or 0.0) + float(r["solve_s"])
            s.ilp_budget_bytes = r["budget_bytes"]
            s.held_bytes = int(r["workspace_bytes"]) + int(r["arena_bytes"] or 0)
        elif r["kind"] == "kernel":
            key = f"{r['layer']}/{r['op']}"
            k = KernelPlan.from_record(r)
            prior = s.kernels.get(key)
            if r["stage"] == "replan":
                s.replans += 1
                if prior is not None:       # a replan keeps the benchmark it was planned from
                    k.bench_s, k.sizes = prior.bench_s, prior.sizes
                    k.sizes_benchmarked, k.sizes_cached = (prior.sizes_benchmarked,
                                                           prior.sizes_cached)
            k.replans = (prior.replans if prior else 0) + (r["stage"] == "replan")
            s.kernels[key] = k
    return s
