"""DeepBench's 3x3 and 5x5 training convolutions (the paper's DeepBench figure): the layer list,
the runner's JSON and its summary.

The layer list is package data, ``ucudnn/data/deepbench/conv_train.csv`` (where it comes from and
under which license: the README beside it). ``scripts/bench_deepbench.py`` measures it on a GPU
and writes a JSON document (Note [DeepBench results]); :func:`summary` and
:func:`ucudnn.experiments.plots.deepbench_speedups` read that document only.

Note [DeepBench results]
    ``{"schema": "ucudnn.deepbench", "version": 1, "meta": {...}, "complete": bool,
    "kernels": [record, ...]}``, one record per (distinct kernel, op, limit, policy):
    ``layer`` (the first CSV row of that kernel), ``same_as`` (all CSV rows with that kernel,
    ``layer`` included), ``filter`` (``"3x3"`` / ``"5x5"``), ``application``, ``op``,
    ``limit`` (bytes, per kernel), ``policy``, ``predicted_ms`` (the DP's sum of benchmarked
    micro-batch times), ``measured_ms`` (median of the CUDA-event runs of the whole plan through
    the core), ``times_ms`` (every run), ``workspace`` (bytes the plan uses), ``plan`` (``128x2:
    algo1``) and ``chunks`` (per run of equal micro-batches: ``batch``, ``count``, ``algo``,
    ``algo_name``, ``math``, ``time_ms``, ``ws_bytes``), ``benchmark_s``. A plan the DP cannot
    make (no algorithm fits) is recorded with ``error`` and null times. ``complete`` is false
    when the runner stopped at ``--max-seconds``.

    Speedup is the measured undivided time over the measured time of the policy, at the same
    limit, from the same run (what the paper plots); ``predicted`` speedups use the DP's times.
"""
from __future__ import annotations

import csv
import json
import math
import os
import time
from dataclasses import dataclass
from importlib import resources
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..measure.records import plan_fields
from ..plan.conv import ConvShape
from ..vocab import OPS, InputError, format_size

__all__ = ["DeepBenchLayer", "read_layers", "unique_layers", "select_layers",
           "kernel_record", "new_document", "load_results", "speedups", "summary",
           "format_summary", "Deadline", "CSV_COLUMNS", "SCHEMA", "LIMITS_MIB"]

SCHEMA = "ucudnn.deepbench"
CSV_COLUMNS = ("name", "index", "application", "N", "N_original", "C", "H", "W", "K", "R", "S",
               "pad_h", "pad_w", "stride_h", "stride_w")
#: The paper's per-kernel workspace limits for this figure.
LIMITS_MIB = (128, 256, 512)


class DeepBenchError(InputError):
    """The layer list or a results document is malformed."""


@dataclass(frozen=True)
class DeepBenchLayer:
    """One row of ``conv_train.csv``: input N x C x H x W, K filters of R x S (height x width),
    padding and stride per dimension, DeepBench's own batch ``n_original``."""
    name: str
    index: int
    application: str
    n: int
    n_original: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad_h: int
    pad_w: int
    stride_h: int
    stride_w: int

    @property
    def shape(self) -> ConvShape:
        """The cuDNN kernel (batch not included, as in :class:`ConvShape`)."""
        return ConvShape(c=self.c, h=self.h, w=self.w, k=self.k, r=self.r, s=self.s,
                         pad_h=self.pad_h, pad_w=self.pad_w, stride_h=self.stride_h,
                         stride_w=self.stride_w)

    @property
    def filter(self) -> str:
        return f"{self.r}x{self.s}"

    @property
    def kernel_key(self) -> Tuple[int, ...]:
        """What makes two rows the same kernel at the same batch."""
        return (self.n, self.c, self.h, self.w, self.k, self.r, self.s, self.pad_h, self.pad_w,
                self.stride_h, self.stride_w)

    def describe(self) -> str:
        return (f"{self.c}x{self.h}x{self.w} -> {self.k}, {self.filter}, pad "
                f"{self.pad_h}/{self.pad_w}, stride {self.stride_h}/{self.stride_w}")


def _default_csv():
    return resources.files("ucudnn") / "data" / "deepbench" / "conv_train.csv"


def read_layers(path=None) -> List[DeepBenchLayer]:
    """The layer list (default: the shipped ``conv_train.csv``); ``#`` lines are comments, the
    first other line is the header (:data:`CSV_COLUMNS`, in any order)."""
    if path is None:
        with resources.as_file(_default_csv()) as p:
            return read_layers(p)
    path = os.fspath(path)
    header: Optional[List[str]] = None
    layers: List[DeepBenchLayer] = []
    with open(path, newline="") as f:
        for lineno, rec in enumerate(csv.reader(f), start=1):
            rec = [x.strip() for x in rec]
            if not rec or not "".join(rec) or rec[0].startswith("#"):
                continue
            if header is None:
                missing = [c for c in CSV_COLUMNS if c not in rec]
                if missing:
                    raise DeepBenchError(f"{path}:{lineno}: header lacks column(s) {missing}")
                header = rec
                continue
            if len(rec) != len(header):
                raise DeepBenchError(f"{path}:{lineno}: {len(rec)} fields, expected {len(header)}")
            d = dict(zip(header, rec))
            kw = {}
            for col in CSV_COLUMNS[3:] + ("index",):
                try:
                    kw[col.lower()] = int(d[col])
                except ValueError:
                    raise DeepBenchError(f"{path}:{lineno}: layer {d['name']!r}: field {col!r}: "
                                         f"cannot parse {d[col]!r}") from None
            layer = DeepBenchLayer(name=d["name"], application=d["application"] or "unspecified",
                                   **kw)
            try:
                layer.shape
            except ValueError as e:
                raise DeepBenchError(f"{path}:{lineno}: layer {layer.name!r}: {e}") from None
            if layer.n < 1 or layer.n_original < 1:
                raise DeepBenchError(f"{path}:{lineno}: layer {layer.name!r}: batch must be >= 1")
            layers.append(layer)
    if not layers:
        raise DeepBenchError(f"{path}: the layer list is empty")
    names = [l.name for l in layers]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DeepBenchError(f"{path}: duplicate layer name(s) {dup}")
    return layers


def unique_layers(layers: Sequence[DeepBenchLayer]) -> List[Tuple[DeepBenchLayer, List[str]]]:
    """Distinct kernels in list order: (first row, names of every row with that kernel)."""
    groups: Dict[tuple, Tuple[DeepBenchLayer, List[str]]] = {}
    for l in layers:
        groups.setdefault(l.kernel_key, (l, []))[1].append(l.name)
    return list(groups.values())


def select_layers(layers: Sequence[DeepBenchLayer], names: Optional[Iterable[str]] = None,
                  filters: Optional[Iterable[str]] = None) -> List[DeepBenchLayer]:
    """Rows by name (``db_17``, or the index ``17``) and/or filter (``3x3``), in list order;
    an unknown name is an error."""
    out = list(layers)
    if names:
        wanted = []
        by = {l.name: l for l in layers}
        by.update({str(l.index): l for l in layers})
        for n in names:
            for part in str(n).split(","):
                part = part.strip()
                if not part:
                    continue
                if part not in by:
                    raise DeepBenchError(f"--layers: unknown layer {part!r} "
                                         f"(known: {', '.join(l.name for l in layers)})")
                wanted.append(by[part].name)
        out = [l for l in out if l.name in set(wanted)]
    if filters:
        fs = set(filters)
        bad = fs - {"3x3", "5x5"}
        if bad:
            raise DeepBenchError(f"--filters: expected 3x3 and/or 5x5, got {sorted(bad)}")
        out = [l for l in out if l.filter in fs]
    return out


def _median(xs: Sequence[float]) -> float:
    ys = sorted(xs)
    m = len(ys) // 2
    return ys[m] if len(ys) % 2 else (ys[m - 1] + ys[m]) / 2


def kernel_record(layer: DeepBenchLayer, same_as: Sequence[str], op: str, limit: int, policy: str,
                  plan=None, times_ms: Optional[Sequence[float]] = None, workspace: int = 0,
                  benchmark_s: float = 0.0, error: Optional[str] = None) -> dict:
    """One record of Note [DeepBench results]."""
    rec = {"layer": layer.name, "same_as": list(same_as), "filter": layer.filter,
           "application": layer.application, "shape": layer.describe(), "op": op,
           "limit": int(limit), "policy": policy, "benchmark_s": round(benchmark_s, 3)}
    if error is not None or plan is None:
        rec.update(error=error or "no plan", predicted_ms=None, measured_ms=None, times_ms=[],
                   workspace=None, plan=None, chunks=[])
        return rec
    times = [float(t) for t in (times_ms or [])]
    rec.update(predicted_ms=plan.time_ms, measured_ms=_median(times) if times else None,
               times_ms=times, workspace=int(workspace), plan=plan.describe(),
               chunks=plan_fields(op, plan))
    return rec


def new_document(meta: Mapping) -> dict:
    return {"schema": SCHEMA, "version": 1, "meta": dict(meta), "complete": False, "kernels": []}


def load_results(path_or_doc) -> dict:
    """A results document (path or already loaded), checked for its schema."""
    doc = path_or_doc
    if not isinstance(doc, Mapping):
        with open(os.fspath(path_or_doc)) as f:
            doc = json.load(f)
    if doc.get("schema") != SCHEMA or "kernels" not in doc:
        raise DeepBenchError(f"not a {SCHEMA} document (schema {doc.get('schema')!r})")
    return doc


def _records(results) -> List[dict]:
    if isinstance(results, Mapping):
        return list(load_results(results)["kernels"])
    return list(results)


def speedups(results, policy: str = "powerOfTwo", basis: str = "measured"
             ) -> Dict[Tuple[str, str, int], float]:
    """``{(layer, op, limit): undivided / policy}`` from ``basis`` (``measured`` or
    ``predicted``) times, for every point where both plans exist. Where the policy's plan is
    the undivided one (same chunks, same algorithm) the speedup is 1 by definition: the two
    measurements time the same cuDNN call, and their ratio is noise (it made a third of the
    unchanged kernels count as gains on the H200)."""
    key = f"{basis}_ms"
    t: Dict[tuple, tuple] = {}
    for r in _records(results):
        if r.get(key) is not None and r["policy"] in ("undivided", policy):
            t[r["layer"], r["op"], int(r["limit"]), r["policy"]] = (float(r[key]), r.get("plan"))
    out = {}
    for (layer, op, limit, pol), (v, plan) in t.items():
        base = t.get((layer, op, limit, "undivided"))
        if pol == policy and base is not None and v > 0:
            same = plan is not None and plan == base[1]
            out[layer, op, limit] = 1.0 if same else base[0] / v
    return out


def layer_speedups(results, policy: str = "powerOfTwo", basis: str = "measured"
                   ) -> Dict[Tuple[str, str, int], float]:
    """``{(layer, "all", limit): speedup}`` of a whole training step of the layer: its three
    ops' undivided times summed over the policy's (1 where no op's plan changed), as the paper
    reports a layer."""
    key = f"{basis}_ms"
    t: Dict[tuple, List] = {}
    for r in _records(results):
        if r.get(key) is not None and r["policy"] in ("undivided", policy):
            e = t.setdefault((r["layer"], int(r["limit"]), r["policy"]), [0.0, []])
            e[0] += float(r[key])
            e[1].append((r["op"], r.get("plan")))
    out = {}
    for (layer, limit, pol), (v, plans) in t.items():
        base = t.get((layer, limit, "undivided"))
        if pol == policy and base is not None and v > 0 and len(plans) == len(base[1]):
            same = sorted(plans) == sorted(base[1]) and all(p is not None for _, p in plans)
            out[layer, "all", limit] = 1.0 if same else base[0] / v
    return out


def summary(results, policy: str = "powerOfTwo", basis: str = "measured",
            by_filter: bool = False, per_layer: bool = False) -> List[dict]:
    """Per op and limit (and filter, with ``by_filter``): ``n`` kernels, ``max`` and geometric
    mean (``geomean``) of the speedups, ``gain_share`` (share of kernels whose plan changed and
    ran faster), ``min``. Ops in :data:`OPS` order, limits ascending. ``per_layer``: one row
    per limit (op ``all``) over whole layers (:func:`layer_speedups`)."""
    recs = _records(results)
    filt = {r["layer"]: r.get("filter", "") for r in recs}
    groups: Dict[tuple, List[float]] = {}
    found = (layer_speedups if per_layer else speedups)(recs, policy, basis)
    for (layer, op, limit), s in found.items():
        k = (op, limit, filt[layer]) if by_filter else (op, limit)
        groups.setdefault(k, []).append(s)
    rows = []
    order = {op: i for i, op in enumerate(OPS + ("all",))}
    for k in sorted(groups, key=lambda k: (order.get(k[0], 99),) + k[1:]):
        v = groups[k]
        row = {"op": k[0], "limit": k[1], "policy": policy, "basis": basis, "n": len(v),
               "max": max(v), "min": min(v),
               "geomean": math.exp(sum(math.log(x) for x in v) / len(v)),
               "gain_share": sum(1 for x in v if x > 1.0) / len(v)}
        if by_filter:
            row["filter"] = k[2]
        rows.append(row)
    return rows


def format_summary(rows: Sequence[dict]) -> str:
    """A Markdown table of :func:`summary` rows."""
    has_f = any("filter" in r for r in rows)
    head = "| op | limit |" + (" filter |" if has_f else "") + \
        " policy | kernels | max | geomean | gain | min |"
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    for r in rows:
        lines.append(f"| {r['op']} | {format_size(r['limit'])} |" +
                     (f" {r.get('filter', '')} |" if has_f else "") +
                     f" {r['policy']} ({r['basis']}) | {r['n']} | {r['max']:.2f}x |"
                     f" {r['geomean']:.2f}x | {100 * r['gain_share']:.0f} % | {r['min']:.2f}x |")
    return "\n".join(lines)


class Deadline:
    """``--max-seconds``: ``expired()`` once ``seconds`` have passed since creation (never with
    ``None``); ``clock`` is injectable for tests."""

    def __init__(self, seconds: Optional[float], clock=time.monotonic):
        self.clock = clock
        self.start = clock()
        self.seconds = seconds

    def elapsed(self) -> float:
        return self.clock() - self.start

    def expired(self) -> bool:
        return self.seconds is not None and self.elapsed() >= self.seconds
