"""The results document of ``ucudnn reproduce`` (``OUT/reproduce.json``): reading (schema 2,
and schema 1 of the committed H200 grid), writing atomically, resuming, repeats, and the
derived numbers tables and figures share.

Note [Results schema]
    ``{"schema": 2, "meta": {...}, "runs": [meta, ...], "points": {key: point},
    "pytorch": {net: ...}}``. ``meta`` is the latest invocation's (mode, date, host, commit,
    device, Caffe, ``options``: the :class:`~ucudnn.experiments.reproduce.Options` it ran with,
    ``command``: the command line when its caller gave one); ``runs`` every invocation's, and
    each point names the run that measured it.

    A point (key ``net/setting/limit``, :class:`~ucudnn.experiments.grid.Point`): ``net``,
    ``setting``, ``policy``, ``optimizer``, ``bn_engine`` (``caffe`` or ``cudnn``, Note
    [BatchNorm engines]; absent before 0004: ``caffe``), ``engines`` (the families of
    convolution choices: ``legacy``, ``graph`` or ``both``; absent before them: ``legacy``), ``limit_bytes`` (``unlimited`` points:
    vocab.UNLIMITED; schema 1 stored 1 << 40, read as unlimited too), ``status`` (``ok``,
    ``failed``, ``predicted``, ``skipped``), ``error``/``log_tail`` when failed; measured:
    ``median_ms`` (over whole iterations where ``timing`` says ``whole iterations``, Note
    [Whole iterations] of caffe_patch/0006, else over the per-layer timer's iterations:
    ``per layer``), ``per_layer_median_ms``, ``mean_ms`` (the per-layer timer's),
    ``forward_ms``, ``backward_ms``, ``conv_ms``, ``type_ms``
    (per kind of layer, :func:`type_ms`), ``peak_gpu_memory_bytes`` (the most GPU memory
    any of its processes held, Note [Measured memory]) and ``layers``
    (medians over ``repeats``, Note [Repeats]), ``min_ms``/``max_ms``; from the first
    process's plan records (Note [Plan records]): ``kernels`` (``layer/op`` ->
    :class:`~ucudnn.caffe.records.KernelPlan` fields: ``instances``, ``batch``, ``plan``,
    ``chunks``, ``predicted_ms``, ``ws_bytes``, ``bench_s``, ``plan_s``, ``sizes_benchmarked``,
    ``sizes_cached`` ...), ``predicted_conv_ms``, ``workspace_bytes``, ``bench_s``, ``plan_s``,
    ``ilp_solve_s``, ``ilp_budget_bytes``, ``replans``, ``records`` (the file under logs/).

    Schema 1 (written until 2026-12, from log lines): kernels carry ``groups`` instead of
    ``instances`` and no ``chunks``; :func:`load_results` adds ``instances`` and the next save
    writes schema 2. Nothing else differs for the readers here.

Note [Resuming]
    Results go to ``OUT/reproduce.json`` after every point, written atomically (a temporary
    file, then ``os.replace``). A later run with the same ``OUT`` skips the points already
    measured (``status == "ok"``) and runs the rest; ``retry_failed`` runs failed points
    again. A point that fails (Caffe stopped, timed out, its log or records did not parse) is
    recorded with its error and the tail of its log; the grid goes on.

Note [Repeats]
    Each point is measured in ``repeats`` separate Caffe processes, in rounds: every point
    once, then every point again, so that a drift of the machine spreads over all points
    instead of biasing the last ones. On the GPU host the iterations of one process agree
    within about 1 %, but two processes of the same prototxt differed by up to 15 %
    (ResNet-18's BatchNorm and Scale layers; plans and algorithms were identical), so one
    process per point is not enough to compare settings. A point keeps every process's
    timing under ``repeats``; its ``median_ms``, ``forward_ms``, ``backward_ms``,
    ``conv_ms`` and per-layer times are medians over them, ``min_ms``/``max_ms`` the spread.
    The plans, benchmarking and planning times are the first process's (later ones find the
    benchmarks in the cache). Resuming with a larger ``repeats`` adds processes to points
    already measured.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..plan.table import write_text
from ..vocab import InputError, format_size
from .grid import Point, bn_engine, engines_of, layout_of

SCHEMA = 2
#: Schemas :func:`load_results` reads.
READS = (1, 2)


class ReproduceError(InputError):
    """The runner cannot start (bad arguments, no Caffe, unreadable results)."""


def new_results() -> dict:
    return {"schema": SCHEMA, "meta": {}, "runs": [], "points": {}, "pytorch": {}}


def load_results(path: Path) -> dict:
    """The results document at ``path`` (schema 1 upgraded in memory, Note [Results schema]),
    or a new empty one."""
    path = Path(path)
    if not path.exists():
        return new_results()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReproduceError(f"{path}: cannot read the results to resume ({e}); move it away "
                             "to start afresh") from None
    return upgrade(doc, str(path))


def upgrade(doc: dict, source: str = "results") -> dict:
    """``doc`` as schema 2 (a schema-1 document is changed in place)."""
    if not isinstance(doc, dict) or doc.get("schema") not in READS or "points" not in doc:
        raise ReproduceError(f"{source}: not a results file of this version (schema "
                             f"{', '.join(map(str, READS))})")
    if doc["schema"] == 1:
        for rec in doc["points"].values():
            for k in (rec.get("kernels") or {}).values():
                k.setdefault("instances", k.get("groups", 1))
        doc["schema"] = SCHEMA
    doc.setdefault("pytorch", {})
    doc.setdefault("meta", {})
    doc.setdefault("runs", [])
    return doc


def save_results(path: Path, doc: dict) -> None:
    """Write ``doc`` atomically: a reader sees the old file or the new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n", fsync=True)


def pending(points: Iterable[Point], doc: dict, retry_failed: bool = False,
            repeats: int = 1) -> List[Point]:
    """The points still to run (Note [Resuming]): never run, failed (with ``retry_failed``)
    or measured in fewer than ``repeats`` processes (Note [Repeats])."""
    done = doc.get("points", {})
    return [p for p in points if runs_needed(done.get(p.key), retry_failed, repeats)]


def starts_afresh(rec: Optional[dict], retry_failed: bool) -> bool:
    """The point is measured from scratch: never run, or failed and ``retry_failed``."""
    return rec is None or (retry_failed and rec.get("status") == "failed")


def runs_needed(rec: Optional[dict], retry_failed: bool, repeats: int) -> int:
    if starts_afresh(rec, retry_failed):
        return repeats
    if rec.get("status") == "ok":
        return max(0, repeats - len(measured_repeats(rec)))
    return 0


# per Caffe process of a point (Note [Repeats]); the point's are medians over these
REPEAT_FIELDS = ("median_ms", "per_layer_median_ms", "timing", "mean_ms", "forward_ms",
                 "backward_ms", "conv_ms", "layers", "peak_gpu_memory_bytes",
                 "iteration_ms", "whole_iteration_ms", "wall_s", "log", "records", "run",
                 "command")


def measured_repeats(rec: dict) -> List[dict]:
    """The processes that measured an ``ok`` point (a record written before repeats existed
    is its own single process)."""
    if rec.get("status") != "ok":
        return []
    return rec.get("repeats") or [{f: rec.get(f) for f in REPEAT_FIELDS}]


def merge_repeats(first: dict, repeats: List[dict]) -> dict:
    """The point record: ``first`` (plans, benchmarking) with times that are medians over
    ``repeats`` (Note [Repeats])."""
    def med(field):
        vals = [r[field] for r in repeats if r.get(field) is not None]
        return statistics.median(vals) if vals else None

    rec = dict(first, repeats=repeats)
    for f in ("median_ms", "per_layer_median_ms", "mean_ms", "forward_ms", "backward_ms",
              "conv_ms"):
        rec[f] = med(f)
    timings = {r.get("timing") or "per layer" for r in repeats}
    rec["timing"] = timings.pop() if len(timings) == 1 else "mixed"
    medians = [r["median_ms"] for r in repeats]
    rec["min_ms"], rec["max_ms"] = min(medians), max(medians)
    peaks = [r["peak_gpu_memory_bytes"] for r in repeats if r.get("peak_gpu_memory_bytes")]
    rec["peak_gpu_memory_bytes"] = max(peaks) if peaks else None   # the most any process held
    layers = []
    for i, layer in enumerate(repeats[0].get("layers") or []):
        same = [r["layers"][i] for r in repeats
                if len(r.get("layers") or []) > i and r["layers"][i]["name"] == layer["name"]]
        layers.append({"name": layer["name"],
                       **{d: statistics.median(x[d] for x in same)
                          for d in ("forward", "backward") if d in layer}})
    rec["layers"] = layers
    for f in ("iteration_ms", "whole_iteration_ms", "wall_s", "log", "records", "command"):
        rec.pop(f, None)                 # per process: under repeats
    return rec


def conv_ms(layers: Sequence[dict], conv_layers: Iterable[str]) -> Optional[float]:
    """Forward + backward time of the convolution layers (Caffe's per-layer timer; a
    layer's time includes its bias)."""
    convs = set(conv_layers)
    times = [t.get("forward", 0) + t.get("backward", 0) for t in layers if t["name"] in convs]
    return sum(times) if times else None


#: Layer types that :func:`type_ms` reports on their own; every other type is ``other``.
TYPE_GROUPS = {"Convolution": "convolution", "BatchNorm": "batchnorm", "Scale": "scale",
               "ReLU": "relu"}


def type_ms(layers: Sequence[dict], types: Dict[str, str]) -> Dict[str, float]:
    """Forward + backward time per kind of layer (:data:`TYPE_GROUPS`, else ``other``), from
    Caffe's per-layer timer; ``types``: layer name -> Caffe type (layers Caffe inserted, the
    Split layers, are not in the prototxt: ``other``)."""
    out = {g: 0.0 for g in (*TYPE_GROUPS.values(), "other")}
    for t in layers:
        group = TYPE_GROUPS.get(types.get(t["name"], ""), "other")
        out[group] += t.get("forward", 0) + t.get("backward", 0)
    return out


def point_conv_ms(rec: dict) -> Optional[float]:
    """A point's measured convolution-layer time; for results written before ``conv_ms``
    existed, summed from its per-layer times over the layers it planned kernels for."""
    if rec.get("conv_ms") is not None:
        return rec["conv_ms"]
    return conv_ms(rec.get("layers") or [], rec.get("conv_layers")
                   or {k.split("/")[0] for k in rec.get("kernels") or {}})


def speedup(doc: dict, rec: dict, field: str = "median_ms") -> Optional[float]:
    """``field`` of undivided at the same limit over this point's: the measured median
    forward-backward time, the measured convolution layers (``conv_ms``), or
    (``predicted_conv_ms``) the predicted convolution time."""
    status = {"median_ms": "ok", "conv_ms": "ok", "predicted_conv_ms": "predicted"}[field]
    if rec.get("status") != status or rec.get("limit_bytes") is None:
        return None
    base = doc["points"].get(Point(rec["net"], "undivided", rec["limit_bytes"],
                                   bn_engine(rec), engines_of(rec), layout_of(rec)).key, {})
    if base.get("status") != status or not rec.get(field):
        return None
    return base[field] / rec[field]


def vs_pytorch(doc: dict, rec: dict, mode: Optional[str] = None) -> Optional[float]:
    """This point's median over PyTorch's (same network, batch and precision): below 1,
    Caffe with ucudnn is faster. ``mode`` None: PyTorch's fastest mode (``vs_pytorch_best``;
    a document from before the modes has eager NCHW only); else that mode's median."""
    torch = doc.get("pytorch", {}).get(rec.get("net"), {})
    if rec.get("status") != "ok" or torch.get("status") != "ok":
        return None
    if mode is None:
        return rec["median_ms"] / torch["median_ms"]
    got = (torch.get("modes") or {}).get(mode, {})
    return rec["median_ms"] / got["median_ms"] if got.get("median_ms") else None


def pytorch_fields(doc: dict, net: str) -> dict:
    """PyTorch's side of a point's row: its fastest mode, that mode's median and the peak GPU
    memory of that mode's process (NVML, whole process, as Caffe's)."""
    torch = doc.get("pytorch", {}).get(net, {})
    if torch.get("status") != "ok":
        return {"pytorch_mode": None, "pytorch_ms": None, "pytorch_peak_gpu_memory_bytes": None}
    return {"pytorch_mode": torch.get("pytorch_mode", "eager"),
            "pytorch_ms": torch.get("pytorch_ms", torch.get("median_ms")),
            "pytorch_peak_gpu_memory_bytes": torch.get("peak_gpu_memory_bytes")}


def stock_workspace(doc: dict, net: str, bn: str) -> Tuple[Optional[int], str]:
    """(stock Caffe's workspace in bytes, how it was measured) from peak GPU memory (Note
    [Shared arena at stock memory]); (None, why not)."""
    pts = doc["points"]
    stock = pts.get(Point(net, "caffe", bn=bn).key, {})
    refs = sorted((r for r in pts.values() if r.get("net") == net and bn_engine(r) == bn
                   and r.get("setting") == "undivided" and r.get("status") == "ok"
                   and r.get("peak_gpu_memory_bytes") and r.get("workspace_bytes") is not None),
                  key=lambda r: r["limit_bytes"])
    if not stock.get("peak_gpu_memory_bytes") or not refs:
        return None, (f"needs the measured peak GPU memory of {net}'s stock point and of an "
                      "undivided point (NVML: nvidia-ml-py)")
    ref = refs[0]
    base = ref["peak_gpu_memory_bytes"] - ref["workspace_bytes"]
    ws = stock["peak_gpu_memory_bytes"] - base
    how = (f"stock peak {stock['peak_gpu_memory_bytes']} B - (undivided "
           f"{format_size(ref['limit_bytes'])} peak {ref['peak_gpu_memory_bytes']} B - its "
           f"workspace {ref['workspace_bytes']} B)")
    if ws <= 0:
        return None, f"stock Caffe's workspace measured as {ws} B <= 0: {how}"
    return ws, how
