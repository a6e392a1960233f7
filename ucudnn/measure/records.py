"""Plan records: the writer, and the schema constants its reader shares.

Measuring for a plan (:mod:`ucudnn.measure.for_plan`) and planning live kernels
(:mod:`ucudnn.measure.live`, what a host such as Caffe calls through the C API) append one JSON
object per line to ``$UCUDNN_RECORDS`` for every benchmark, every plan a kernel is given and
every net planned. The fields, and how to read them, are in Note [Plan records] in
:mod:`ucudnn.caffe.records` (the reader and validator; this module must not import it: measure
never imports caffe).

Note [Appending records]
    Several processes (``caffe train -gpu 0,1`` runs one solver thread per GPU in one process;
    ``ucudnn reproduce`` runs Caffe processes one after another, and a user may run several at
    once on one file) append to one file. Every record is written by one ``os.write`` of the
    whole line, newline included, on a descriptor opened with ``O_APPEND`` for that record:
    the kernel moves the offset to the end of the file and writes the buffer as one step, so
    two writers' lines never interleave or overwrite each other on a local file system (Linux
    takes the inode's lock for the whole write of a regular file; ``PIPE_BUF`` is about pipes
    and does not bound this). NFS does not honour ``O_APPEND`` atomically: keep the file on a
    local disk. A write that stops short (disk full) is completed with a warning; such a line
    may then interleave. A record that cannot be written is logged as a warning and planning
    goes on: the plan is the host's job, the record a report (``ucudnn reproduce`` notices a
    point without records).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, is_dataclass
from typing import Any, Dict, Optional

from ..vocab import choice_name
from .planner_state import planner_state

#: The value of every record's ``schema`` field.
SCHEMA = "ucudnn.plan-record"
#: The value of every record's ``version`` field; a reader refuses other versions.
VERSION = 2
#: Where records go: a path; unset or empty: no records.
ENV = "UCUDNN_RECORDS"
#: ``kind`` values: a benchmark, a plan given to a kernel, a net planned.
KINDS = ("bench", "kernel", "net")
#: ``stage`` of a ``kernel`` record: the plan of its net's optimizer (dp, ilp, shared), or a
#: single kernel's plan again within a new limit.
STAGES = ("dp", "ilp", "shared", "replan")

log = logging.getLogger("ucudnn")


def records_path() -> Optional[str]:
    """``$UCUDNN_RECORDS``, read at every record (a host may set it late)."""
    return os.environ.get(ENV) or None


def append_record(record: Dict[str, Any], path: Optional[str] = None) -> bool:
    """Append ``record`` (with the envelope: schema, version, pid, thread, time) as one line
    to ``path`` (default ``$UCUDNN_RECORDS``); see Note [Appending records]. False when there
    is nowhere to write or the write failed (logged)."""
    path = path or records_path()
    if not path:
        return False
    full = {"schema": SCHEMA, "version": VERSION, "kind": record.get("kind"),
            "pid": os.getpid(), "thread": threading.get_native_id(), "time": time.time()}
    full.update(record)
    data = (json.dumps(full, separators=(",", ":"), default=_jsonable, allow_nan=False)
            + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            n = os.write(fd, data)
            if n != len(data):
                log.warning("%s: short write of a plan record (%d of %d bytes)", path, n,
                            len(data))
                while n < len(data):
                    n += os.write(fd, data[n:])
        finally:
            os.close(fd)
    except OSError as e:
        log.warning("%s: cannot write a plan record: %s", path, e)
        return False
    return True


def _jsonable(o):
    if is_dataclass(o):
        return asdict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable in a plan record: {o!r}")


def _num(x: float) -> Optional[float]:
    """JSON has no NaN or infinity: None for them."""
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)


def plan_fields(op: str, plan) -> list:
    """A plan's runs of equal chunks, largest first as planned: batch, count, algo, its cuDNN
    name, math, time_ms and ws_bytes of one chunk; a graph engine config also its ``engine``
    (Note [Choices] in ucudnn/vocab.py), named by it."""
    return [{"batch": c.batch, "count": k, "algo": c.algo,
             "algo_name": choice_name(op, c.algo, 0, c.engine), "math": c.math,
             "time_ms": _num(c.time_ms), "ws_bytes": int(c.ws_bytes),
             **({"engine": c.engine} if c.engine else {})}
            for c, k in plan.runs()]


def kernel_fields(kern) -> Dict[str, Any]:
    """What identifies a kernel: the process-unique ``kernel_id`` (``id`` of the object, so
    records of one live kernel agree), device, layer, op, instances (Caffe's group count:
    runs per pass, each on its own workspace), mini-batch, shape, dtype and math. An NCHW
    shape is written without its layout (the default; Note [NHWC kernels] in
    ucudnn/plan/conv.py), a 2-D one without the depth fields (Note [N-D geometry] there)."""
    shape = kern.shape
    fields = shape.fields() if hasattr(shape, "fields") else (
        asdict(shape) if is_dataclass(shape) else shape)
    if isinstance(fields, dict) and fields.get("layout") == "NCHW":
        fields = {k: v for k, v in fields.items() if k != "layout"}
    return {"kernel_id": id(kern), "device": _int_or_none(getattr(kern, "device", None)),
            "layer": kern.name, "op": kern.op, "instances": int(getattr(kern, "instances", 1)
                                                                 or 1),
            "batch": int(kern.n), "shape": fields, "dtype": kern.dtype, "math": kern.math}


def _int_or_none(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def settings_fields(kern) -> Dict[str, Any]:
    """The kernel's settings (its planner state's PlanSettings, or None before it was
    measured)."""
    s = planner_state(kern).settings
    if s is None:
        return {"policy": None, "optimizer": None, "limit_bytes": None,
                "micro_batch_sizes": None}
    return {"policy": s.policy, "optimizer": s.optimizer, "limit_bytes": s.limit,
            "micro_batch_sizes": list(s.sizes) if s.sizes else None,
            **({"engines": s.engines} if s.engines != "legacy" else {})}


def net_record(name: str, plan, kernels, plan_s: float, cap: Optional[int]) -> Dict[str, Any]:
    """The ``net`` record of one planned net: ``plan`` (a NetworkPlan) over the live
    ``kernels`` (by ``(layer, op)``), planned in ``plan_s`` seconds within ``cap`` bytes."""
    return {"kind": "net", "net": name, "kernels": len(plan.kernels),
            "calls": plan.n_calls, "predicted_ms": _num(plan.time_ms),
            "undivided_ms": _num(plan.baseline_time_ms),
            "workspace_bytes": int(plan.workspace_bytes),
            "arena_bytes": None if plan.arena_bytes is None else int(plan.arena_bytes),
            "budget_bytes": None if plan.budget is None else int(plan.budget),
            "solve_s": plan.ilp.solve_seconds if plan.ilp is not None else None,
            "plan_s": plan_s, "cap_bytes": cap,
            "members": [{"kernel_id": id(kernels[k.layer, k.op]), "layer": k.layer, "op": k.op,
                         "instances": k.groups, "optimizer": k.optimizer,
                         "ws_bytes": int(kernels[k.layer, k.op].workspace_size)}
                        for k in plan.kernels]}


def plan_record(kern, stage: str, plan, limit: int, undivided=None,
                **extra) -> Dict[str, Any]:
    """A ``kernel`` record: ``kern`` given ``plan`` at ``stage`` within ``limit`` bytes."""
    rec = {"kind": "kernel", "stage": stage, **kernel_fields(kern), **settings_fields(kern),
           "plan_limit_bytes": int(limit), "plan": plan_fields(kern.op, plan),
           "plan_text": plan.describe(), "predicted_ms": _num(plan.time_ms),
           "ws_bytes": int(kern.workspace_size),
           "undivided": None if undivided is None else {
               "predicted_ms": _num(undivided.time_ms), "ws_bytes": int(undivided.ws_bytes),
               "plan": plan_fields(kern.op, undivided)}}
    rec.update(extra)
    return rec
