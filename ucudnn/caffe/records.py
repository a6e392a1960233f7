"""Reading the plan records the core writes inside Caffe (``$UCUDNN_RECORDS``).

The writer is :mod:`ucudnn.measure.records` (the runtime Caffe calls through the C API); this
module reads and validates what it wrote and sums it up per kernel, for ``ucudnn reproduce``
and the GPU tests. Caffe's own ``caffe time`` output is read by :mod:`ucudnn.caffe.log`.

Note [Plan records]
    A records file holds one JSON object per line (JSON Lines, UTF-8), appended by every
    process and thread that plans (Note [Appending records] in ucudnn/measure/records.py).
    Every record has the envelope::

        schema    "ucudnn.plan-record"            (records.SCHEMA)
        version   1                               (records.VERSION; other versions refused)
        kind      "bench" | "kernel" | "ilp"
        pid       writing process; thread: its native thread id
        time      seconds since the epoch (float) when the record was written

    A kernel is identified within its process by ``kernel_id`` (``id()`` of the core's Kernel:
    records of one live kernel agree; a destroyed kernel's id may be reused by a later one), and
    described by::

        device      CUDA device index the kernel was created on (null where unknown)
        layer, op   Caffe's layer name; "fwd" | "bwd_data" | "bwd_filter"
        instances   runs of the kernel per pass, each on its own workspace (Caffe's group
                    count; 1 for ungrouped layers)
        batch       the mini-batch the plan covers
        shape       the ConvShape's fields (c, h, w, k, r, s, pad_*, stride_*, dil_*, groups,
                    x_strides, y_strides); per group where Caffe runs groups separately
        dtype, math "float32"..., "default" | "tensor_op" | ... | "fma"
        policy, optimizer, limit_bytes, micro_batch_sizes   the kernel's ucudnn_param

    ``kind: "bench"`` -- one per benchmark of a kernel (before its first plan)::

        sizes               candidate micro-batch sizes (pruned search: the sizes it measured)
        sizes_benchmarked   of them timed now; sizes_cached: read from the benchmark cache
        bench_s             seconds for both; repeats, cache_path, exclude_winograd
        search              "exhaustive" | "pruned" (Note [Pruned search at run time]);
                            search_rounds: the pruned search's rounds (null: exhaustive)
        benchmark_seconds   where the core's benchmark spent bench_s: {setup (buffers and
                            workspace), warmup_find, find, retime (Note [Re-timing near the
                            front] in cython/ucudnn/_core.pyx)}; zeros when all was cached

    ``kind: "kernel"`` -- one per plan a kernel is given; the last of a kernel is the plan it
    runs::

        stage           "dp": the DP's plan within limit_bytes; "ilp_initial": the
                        smallest-workspace plan a kernel prepared for the ILP runs until the
                        net is planned; "ilp": the ILP's choice; "replan": planned again
                        (a failed workspace allocation, a reshape within the ILP's share)
        plan_limit_bytes  the limit this plan was made within
        plan            runs of equal micro-batches: [{batch, count, algo, algo_name (cuDNN's
                        name, vocab.algo_name), math (cudnnMathType_t), time_ms and ws_bytes
                        of ONE micro-batch}]
        plan_text       Plan.describe(), as the C API and Caffe's log line print it
        predicted_ms    the plan's time for the mini-batch, one instance
        ws_bytes        workspace of one instance as cuDNN resolved it
        undivided       the undivided baseline within the same limit: {predicted_ms, ws_bytes,
                        plan} or null when no algorithm fits
        plan_s          seconds spent planning (stages dp, ilp_initial, replan)
        sizes, sizes_benchmarked, sizes_cached, bench_s, desirable   (dp, ilp_initial: the
                        benchmark that preceded the plan; desirable: size of the desirable set)
        budget_bytes    (stage ilp) the net's budget

    ``kind: "ilp"`` -- one per ILP solve, written before its kernels' ``ilp`` records::

        budget_bytes, kernels, instances   the budget and what shares it
        predicted_ms, ws_bytes             totals over all instances
        undivided_ms                       undivided at budget/instances per instance (null:
                                           some kernel has no algorithm within that)
        undivided_limit_bytes, solve_s     and the solver's seconds
        members         [{kernel_id, layer, op, instances, ws_bytes}]

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
             "ilp": ("pid", "budget_bytes", "solve_s", "members")}


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
                   sizes_cached=rec.get("sizes_cached"), optimizer=rec.get("optimizer"))


@dataclass
class PlanSummary:
    """What the records of one net say: per ``layer/op`` the plan it ran, and the totals."""
    kernels: Dict[str, KernelPlan] = field(default_factory=dict)
    ilp_solve_s: Optional[float] = None       # summed over solves
    ilp_budget_bytes: Optional[int] = None    # the last solve's
    ilp_ws_bytes: Optional[int] = None
    replans: int = 0

    @property
    def bench_s(self) -> float:
        return sum(k.bench_s or 0.0 for k in self.kernels.values())

    @property
    def plan_s(self) -> float:
        return sum(k.plan_s or 0.0 for k in self.kernels.values())

    def predicted_conv_ms(self) -> Optional[float]:
        """Predicted time of one pass's convolutions (every instance)."""
        if not self.kernels:
            return None
        return sum((k.predicted_ms or 0.0) * k.instances for k in self.kernels.values())

    def workspace_bytes(self) -> Optional[int]:  # None: no kernel (stock Caffe)
        """Workspace the net holds: each DP/ILP kernel's own (every instance), plus the shared
        arena -- the largest set of kernels that run at once in one layer (Note [Shared arena]
        in ucudnn/plan/network.py; slots rounded up to 256 B as Caffe carves them)."""
        from ..plan.network import PHASES
        if not self.kernels:
            return None
        own = sum(k.ws_bytes * k.instances for k in self.kernels.values()
                  if k.optimizer != "shared")
        phases: Dict[tuple, int] = {}
        for k in self.kernels.values():
            if k.optimizer == "shared":
                phase = next(i for i, p in enumerate(PHASES) if k.op in p)
                slot = -(-k.ws_bytes // 256) * 256
                phases[k.layer, phase] = phases.get((k.layer, phase), 0) + slot * k.instances
        return own + max(phases.values(), default=0)


def kernel_plans(records: Iterable[dict]) -> List[KernelPlan]:
    """Every ``kernel`` record, in order (``caffe train`` plans its train and test nets' kernels
    separately; a kernel planned again appears again)."""
    return [KernelPlan.from_record(r) for r in records if r["kind"] == "kernel"]


def summarize(records: Iterable[dict]) -> PlanSummary:
    """Per ``layer/op``: the last plan, the benchmark and planning times of its first plan
    (the benchmark it was planned from) and how often it was planned again; the ILP's solve
    time summed, its budget and workspace the last solve's. Meant for one net in one process
    (``caffe time``): kernels of several nets with the same layer names overwrite each other;
    use :func:`kernel_plans` there."""
    s = PlanSummary()
    first: Dict[str, KernelPlan] = {}
    for r in records:
        if r["kind"] == "ilp":
            s.ilp_solve_s = (s.ilp_solve_s or 0.0) + float(r["solve_s"])
            s.ilp_budget_bytes = int(r["budget_bytes"])
            s.ilp_ws_bytes = r.get("ws_bytes")
        elif r["kind"] == "kernel":
            key = f"{r['layer']}/{r['op']}"
            k = KernelPlan.from_record(r)
            if r["stage"] in ("dp", "ilp_initial"):
                first[key] = k
            elif r["stage"] == "replan":
                s.replans += 1
            prior = s.kernels.get(key)
            k.replans = (prior.replans if prior else 0) + (r["stage"] == "replan")
            s.kernels[key] = k
    for key, k in s.kernels.items():
        f = first.get(key)
        if f is not None and k is not f:
            k.bench_s, k.plan_s, k.sizes = f.bench_s, f.plan_s, f.sizes
            k.sizes_benchmarked, k.sizes_cached = f.sizes_benchmarked, f.sizes_cached
    return s
