"""The paper's experiment grid, run with the patched Caffe (``ucudnn reproduce``).

For every network and point of the grid -- per-layer workspace limits (8, 64, 512 MiB) x
policies (undivided, powerOfTwo, all), the ILP at a budget of limit x kernels, unlimited
workspace (the floor) and stock Caffe -- the runner writes a variant of the network's prototxt
(through the protobuf classes of the patched caffe.proto, :mod:`ucudnn.caffe.proto`), runs
``caffe time`` on it and keeps what the log says (:mod:`ucudnn.caffe.log`): the forward-backward
time per iteration (Caffe's CUDA-event timer), per-layer forward and backward times, the
core's plans with their predicted times, and the time spent benchmarking, planning and solving.

Note [Resuming]
    Results go to ``OUT/reproduce.json`` after every point, written atomically (a temporary
    file, then ``os.replace``). A later run with the same ``OUT`` skips the points already
    measured (``status == "ok"``) and runs the rest; ``--retry-failed`` runs failed points
    again. A point that fails (Caffe stopped, timed out, its log did not parse) is recorded
    with its error and the tail of its log; the grid goes on. The full log of every point is
    kept under ``OUT/logs/``.

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

Without a GPU (or without a built Caffe, in ``--predict`` mode) the runner plans every point
from the shipped H200 benchmark data instead and says so: the numbers are the planner's
predicted convolution times, not measurements.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from ..caffe.log import CaffeLogError, parse_caffe_time
from ..vocab import format_size, parse_size

# paths (prototxt/, scripts/, third_party/) are those of the checkout it runs in
REPO = Path(".")
NETS = ("alexnet", "resnet18", "cifar10")
POLICIES = ("undivided", "powerOfTwo", "all")
LIMITS = ("8MiB", "64MiB", "512MiB")
UNLIMITED = 1 << 40          # "unlimited": a per-kernel limit no plan reaches (1 TiB)
SCHEMA = 1


class ReproduceError(RuntimeError):
    """The runner cannot start (bad arguments, no Caffe, unreadable results)."""


@dataclasses.dataclass(frozen=True)
class Point:
    """One run of one network: ``setting`` is a policy, ``ilp``, ``unlimited`` or ``caffe``
    (stock Caffe, no ucudnn_param)."""
    net: str
    setting: str
    limit: Optional[int] = None

    @property
    def key(self) -> str:
        lim = "-" if self.limit in (None, UNLIMITED) else format_size(self.limit)
        return f"{self.net}/{self.setting}/{lim}"

    @property
    def policy(self) -> Optional[str]:
        if self.setting in POLICIES:
            return self.setting
        return {"unlimited": "undivided", "caffe": None}.get(self.setting)


def grid(nets: Sequence[str], limits: Sequence[int], policies: Sequence[str] = POLICIES, *,
         ilp: bool = True, unlimited: bool = True, stock: bool = True) -> List[Point]:
    """The points, in the order they run: per network the cheap settings first, so that
    an interrupted run has the baselines."""
    points: List[Point] = []
    for net in nets:
        if stock:
            points.append(Point(net, "caffe"))
        if unlimited:
            points.append(Point(net, "unlimited", UNLIMITED))
        for limit in limits:
            points += [Point(net, p, limit) for p in policies]
            if ilp:
                points.append(Point(net, "ilp", limit))
    return points


# ------------------------------------------------------------------------------- results file

def load_results(path: Path) -> dict:
    """The results document at ``path``, or a new empty one."""
    if not path.exists():
        return {"schema": SCHEMA, "meta": {}, "points": {}, "pytorch": {}}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReproduceError(f"{path}: cannot read the results to resume ({e}); move it away "
                             "to start afresh") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or "points" not in doc:
        raise ReproduceError(f"{path}: not a results file of this version (schema {SCHEMA})")
    doc.setdefault("pytorch", {})
    return doc


def save_results(path: Path, doc: dict) -> None:
    """Write ``doc`` atomically: a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def pending(points: Iterable[Point], doc: dict, retry_failed: bool = False,
            repeats: int = 1) -> List[Point]:
    """The points still to run (Note [Resuming]): never run, failed (with ``retry_failed``)
    or measured in fewer than ``repeats`` processes (Note [Repeats])."""
    done = doc.get("points", {})
    return [p for p in points if _runs_needed(done.get(p.key), retry_failed, repeats)]


def _starts_afresh(rec: Optional[dict], retry_failed: bool) -> bool:
    """The point is measured from scratch: never run, or failed and ``retry_failed``."""
    return rec is None or (retry_failed and rec.get("status") == "failed")


def _runs_needed(rec: Optional[dict], retry_failed: bool, repeats: int) -> int:
    if _starts_afresh(rec, retry_failed):
        return repeats
    if rec.get("status") == "ok":
        return max(0, repeats - len(measured_repeats(rec)))
    return 0


def measured_repeats(rec: dict) -> List[dict]:
    """The processes that measured an ``ok`` point (a record written before repeats existed
    is its own single process)."""
    if rec.get("status") != "ok":
        return []
    return rec.get("repeats") or [{f: rec.get(f) for f in REPEAT_FIELDS}]


# per Caffe process of a point (Note [Repeats]); the point's are medians over these
REPEAT_FIELDS = ("median_ms", "mean_ms", "forward_ms", "backward_ms", "conv_ms", "layers",
                 "iteration_ms", "wall_s", "log", "run", "command")


def merge_repeats(first: dict, repeats: List[dict]) -> dict:
    """The point record: ``first`` (plans, benchmarking) with times that are medians over
    ``repeats`` (Note [Repeats])."""
    def med(field):
        vals = [r[field] for r in repeats if r.get(field) is not None]
        return statistics.median(vals) if vals else None

    rec = dict(first, repeats=repeats)
    for f in ("median_ms", "mean_ms", "forward_ms", "backward_ms", "conv_ms"):
        rec[f] = med(f)
    medians = [r["median_ms"] for r in repeats]
    rec["min_ms"], rec["max_ms"] = min(medians), max(medians)
    layers = []
    for i, layer in enumerate(repeats[0].get("layers") or []):
        same = [r["layers"][i] for r in repeats
                if len(r.get("layers") or []) > i and r["layers"][i]["name"] == layer["name"]]
        layers.append({"name": layer["name"],
                       **{d: statistics.median(x[d] for x in same)
                          for d in ("forward", "backward") if d in layer}})
    rec["layers"] = layers
    for f in ("iteration_ms", "wall_s", "log", "command"):
        rec.pop(f, None)                 # per process: under repeats
    return rec


# ------------------------------------------------------------------------------ one Caffe run

def variant_prototxt(pb2, source: Path, point: Point, dest: Path, cache_path: Optional[str],
                     ilp_policy: str) -> List[str]:
    """Write ``source`` with the point's net-wide ``ucudnn_param`` to ``dest``; returns the
    names of its convolution layers."""
    from ..caffe.proto import read_net, set_ucudnn_param, write_net
    net = read_net(pb2, str(source))
    fill_once(net)
    net.ClearField("ucudnn_param")
    for layer in net.layer:
        layer.ClearField("ucudnn_param")
    if point.setting != "caffe":
        if point.setting == "ilp":
            set_ucudnn_param(net, policy=ilp_policy, optimizer="ilp", limit=point.limit)
        else:
            set_ucudnn_param(net, policy=point.policy, optimizer="dp", limit=point.limit)
        if cache_path:
            net.ucudnn_param.cache_path = cache_path
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_net(net, str(dest))
    return [layer.name for layer in net.layer if layer.type == "Convolution"]


def conv_ms(layers: Sequence[dict], conv_layers: Iterable[str]) -> Optional[float]:
    """Forward + backward time of the convolution layers (Caffe's per-layer timer; a
    layer's time includes its bias)."""
    convs = set(conv_layers)
    times = [t.get("forward", 0) + t.get("backward", 0) for t in layers if t["name"] in convs]
    return sum(times) if times else None


def fill_once(net) -> None:
    """Make every DummyData filler constant. DummyData draws a non-constant filler again on
    the CPU at every forward pass (about 200 ms for AlexNet's 256x3x227x227 gaussian input,
    measured on the GPU host, four times its convolutions): with constant fillers it fills
    once and ``caffe time`` measures the network. Convolution times do not depend on the
    values."""
    for layer in net.layer:
        if layer.type == "DummyData":
            for f in layer.dummy_data_param.data_filler:
                if f.type != "constant":
                    value = f.std if f.type == "gaussian" and f.std else 1.0
                    f.Clear()
                    f.type, f.value = "constant", value


def run_caffe_time(caffe: str, model: Path, iterations: int, gpu: int, log_path: Path,
                   timeout: float, env: Optional[Dict[str, str]] = None) -> dict:
    """Run ``caffe time`` and parse its log; a record with ``status`` ok or failed."""
    cmd = [caffe, "time", "-model", str(model), "-iterations", str(iterations), "-gpu", str(gpu)]
    e = dict(os.environ)
    # Caffe's embedded interpreter imports the same ucudnn (and PuLP) as this process
    e["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1])]
                                      + [p for p in sys.path if p])
    e.update({"GLOG_logtostderr": "1", "UCUDNN_LOG": "INFO"})
    e.update(env or {})
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=e, timeout=timeout)
        text, rc = res.stdout, res.returncode
    except subprocess.TimeoutExpired as ex:
        out = ex.stdout or ""
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        rc = None
    wall = time.perf_counter() - t0
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(text, encoding="utf-8")
    rec = {"command": " ".join(shlex.quote(c) for c in cmd), "wall_s": round(wall, 3),
           "log": log_path.name}
    if rc != 0:
        why = "timed out after %.0f s" % timeout if rc is None else f"exit status {rc}"
        return dict(rec, status="failed", error=f"caffe time: {why}", log_tail=text[-3000:])
    try:
        t = parse_caffe_time(text)
    except CaffeLogError as ex:
        return dict(rec, status="failed", error=str(ex), log_tail=text[-3000:])
    return dict(rec, status="ok", source="caffe time", **timing_record(t))


def timing_record(t) -> dict:
    """The JSON form of a :class:`~ucudnn.caffe.log.CaffeTime`."""
    return {
        "iterations": t.iterations, "iteration_ms": t.iteration_ms,
        "median_ms": t.median_ms, "mean_ms": t.forward_backward_ms,
        "forward_ms": t.forward_ms, "backward_ms": t.backward_ms,
        # a list: the layers' order (the JSON is written with sorted keys)
        "layers": [dict(name=n, **v) for n, v in t.layers.items()],
        "kernels": {k: dataclasses.asdict(v) for k, v in t.kernels.items()},
        "predicted_conv_ms": t.predicted_conv_ms(),
        "workspace_bytes": sum(k.ws_bytes * k.groups for k in t.kernels.values()) or None,
        "bench_s": t.bench_s, "plan_s": t.plan_s, "ilp_solve_s": t.ilp_solve_s,
        "ilp_budget_bytes": t.ilp_budget_bytes, "replans": t.replans,
    }


# --------------------------------------------------------------------------- predicted mode

def predict_point(point: Point, ilp_policy: str) -> dict:
    """Plan ``point`` from the shipped H200 data (no GPU): predicted convolution times."""
    from importlib import resources

    from ..plan.network import plan_network, read_layers
    from ..plan.table import group_by_kernel, parse_table
    base = resources.files("ucudnn") / "data" / "h200"
    bench = base / f"{point.net}_bench.csv"
    if point.setting == "caffe":
        return {"status": "skipped", "error": "stock Caffe has no ucudnn plan to predict"}
    if not bench.is_file():
        return {"status": "skipped",
                "error": f"no shipped benchmark data for {point.net} (ucudnn/data/h200)"}
    with resources.as_file(base / f"{point.net}_layers.csv") as p:
        layers = read_layers(p)
    benches = group_by_kernel(parse_table(bench.read_text(encoding="utf-8"), source=str(bench)))
    t0 = time.perf_counter()
    if point.setting == "ilp":
        plan = plan_network(layers, benches, policy=ilp_policy, limit=point.limit,
                            optimizer="ilp", strict=False)
    else:
        plan = plan_network(layers, benches, policy=point.policy, limit=point.limit,
                            optimizer="dp", strict=False)
    solve = time.perf_counter() - t0
    kernels = {k.name: {"layer": k.layer, "op": k.op, "plan": k.plan.describe(),
                        "predicted_ms": k.plan.time_ms, "ws_bytes": k.plan.ws_bytes}
               for k in plan.kernels}
    return {"status": "predicted", "source": "predicted from ucudnn/data/h200 (no GPU run)",
            "predicted_conv_ms": plan.time_ms, "workspace_bytes": plan.ws_bytes,
            "kernels": kernels, "plan_s": solve, "notes": plan.notes,
            "ilp_budget_bytes": plan.budget if point.setting == "ilp" else None}


# --------------------------------------------------------------------------------- metadata

def _git(*args) -> Optional[str]:
    try:
        r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                           timeout=20)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def metadata(argv: Sequence[str], caffe: Optional[str], mode: str) -> dict:
    meta = {"command": " ".join(shlex.quote(a) for a in ["ucudnn", "reproduce", *argv]),
            "mode": mode, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "python": platform.python_version(),
            "ucudnn_commit": _git("rev-parse", "HEAD"),
            "ucudnn_dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}
    try:
        from ..measure.bench import device_info
        meta["device"] = device_info()
    except Exception as e:       # noqa: BLE001 - no GPU: recorded, not fatal
        meta["device"] = {"error": str(e)}
    if caffe:
        meta["caffe"] = caffe
        stamp = Path(caffe).resolve().parents[2] / "src" / ".ucudnn-patches"
        meta["caffe_commit"] = "99bd99795dcdf0b1d3086a8d67ab1782a8a08383"
        if stamp.is_file():
            meta["caffe_patches"] = stamp.read_text(encoding="utf-8").splitlines()
    return meta


# ------------------------------------------------------------------------------------ runner

@dataclasses.dataclass
class Options:
    out: Path
    nets: Sequence[str] = NETS
    limits: Sequence[int] = tuple(parse_size(s) for s in LIMITS)
    policies: Sequence[str] = POLICIES
    ilp: bool = True
    ilp_policy: str = "powerOfTwo"
    unlimited: bool = True
    stock: bool = True
    iterations: int = 20
    gpu: int = 0
    timeout: float = 900.0
    caffe: Optional[str] = None
    prototxt_dir: Path = Path("prototxt")
    cache_path: Optional[str] = None
    retry_failed: bool = False
    predict: bool = False
    pytorch: bool = True
    repeats: int = 3
    argv: Sequence[str] = ()


def summary_line(point: Point, rec: dict, doc: dict) -> str:
    if rec.get("status") == "ok":
        sp = speedup(doc, rec) if point.setting != "undivided" else None
        return f"{rec['median_ms']:.2f} ms{_spread(rec)}" + (
            f" ({sp:.2f}x vs undivided)" if sp else "")
    if rec.get("status") == "predicted":
        return f"{rec['predicted_conv_ms']:.2f} ms convolutions (predicted)"
    return f"{rec.get('status')}: {rec.get('error')}"


def run(opts: Options, say: Callable[[str], None] = print) -> dict:
    """Run (or resume) the grid; returns the results document."""
    for net in opts.nets:
        if not (opts.prototxt_dir / f"{net}.prototxt").is_file():
            raise ReproduceError(f"--nets: no prototxt/{net}.prototxt")
    mode = "predict" if opts.predict else "caffe"
    if mode == "caffe" and not (opts.caffe and os.access(opts.caffe, os.X_OK)):
        raise ReproduceError(f"--caffe: no Caffe binary at {opts.caffe!r} (scripts/build_caffe.sh "
                             "builds one; --predict plans from the shipped data instead)")
    path = opts.out / "reproduce.json"
    doc = load_results(path)
    if doc["points"] and doc["meta"].get("mode") not in (None, mode):
        raise ReproduceError(f"{path} holds {doc['meta'].get('mode')} results; use another "
                             "--out for a run in mode " + mode)
    # a grid resumed over several sessions: every invocation's machine and commit are kept,
    # and each point says which run measured it
    doc["meta"] = metadata(opts.argv, opts.caffe, mode)
    doc.setdefault("runs", []).append(doc["meta"])
    points = grid(opts.nets, opts.limits, opts.policies, ilp=opts.ilp,
                  unlimited=opts.unlimited, stock=opts.stock)
    repeats = 1 if mode == "predict" else opts.repeats
    todo = pending(points, doc, opts.retry_failed, repeats)
    runs = sum(_runs_needed(doc["points"].get(p.key), opts.retry_failed, repeats) for p in todo)
    say(f"ucudnn reproduce: {len(points)} points, {len(points) - len(todo)} complete in {path}, "
        f"{len(todo)} to run" + (f" ({runs} Caffe processes, {repeats} per point)"
                                 if mode == "caffe" else " (predicted, no GPU run)"))
    if mode == "caffe" and opts.pytorch:
        run_pytorch(opts, doc, say)
        save_results(path, doc)
    pb2 = None
    if mode == "caffe" and todo:
        from ..caffe.proto import load_caffe_pb2
        pb2 = load_caffe_pb2()
    done = 0
    for rnd in range(1, repeats + 1):         # Note [Repeats]: rounds over the points
        for p in todo:
            rec = doc["points"].get(p.key)
            fresh = rnd == 1 and _starts_afresh(rec, opts.retry_failed)
            if not fresh and not (rec and rec.get("status") == "ok"
                                  and len(measured_repeats(rec)) < rnd):
                continue
            t0 = time.perf_counter()
            new = run_point(opts, pb2, p, doc, None if fresh else rec)
            doc["points"][p.key] = new
            save_results(path, doc)
            write_csv(opts.out, doc)
            done += 1
            n = len(new.get("repeats") or [])
            say(f"[{done}/{runs}] {p.key}" + (f" #{n}" if repeats > 1 and n else "")
                + f": {summary_line(p, new, doc)} ({time.perf_counter() - t0:.1f} s)")
    write_csv(opts.out, doc)
    return doc


def run_point(opts: Options, pb2, p: Point, doc: dict, rec: Optional[dict]) -> dict:
    """Measure ``p`` in one more Caffe process and return its record: a new one, or ``rec``
    with this process added to its repeats (Note [Repeats])."""
    run_index = len(doc["runs"]) - 1
    if opts.predict:
        new = predict_point(p, opts.ilp_policy)
    else:
        prior = measured_repeats(rec) if rec else []
        name = p.key.replace("/", "_")
        stem = name + (f".{len(prior) + 1}" if prior else "")
        model = opts.out / "prototxt" / (name + ".prototxt")
        try:
            convs = variant_prototxt(pb2, opts.prototxt_dir / f"{p.net}.prototxt", p, model,
                                     opts.cache_path, opts.ilp_policy)
            new = run_caffe_time(opts.caffe, model, opts.iterations, opts.gpu,
                                 opts.out / "logs" / (stem + ".log"), opts.timeout)
        except Exception as e:    # noqa: BLE001 - one point's failure is recorded
            new = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        if new.get("status") == "ok":
            new["run"], new["conv_layers"] = run_index, convs
            for r in prior + [new]:
                if r.get("conv_ms") is None:
                    r["conv_ms"] = conv_ms(r.get("layers") or [], convs)
            this = {f: new.get(f) for f in REPEAT_FIELDS}
            new = merge_repeats(rec if prior else new, prior + [this])
        elif prior:
            # a later process failed: the point is failed, its measured processes kept
            new = dict(rec, status="failed", error=f"repeat {len(prior) + 1}: {new['error']}",
                       log_tail=new.get("log_tail"))
    new.update({"net": p.net, "setting": p.setting, "limit_bytes": p.limit,
                "policy": p.policy if p.setting != "ilp" else opts.ilp_policy,
                "optimizer": "ilp" if p.setting == "ilp" else "dp"})
    new.setdefault("run", run_index)
    return new


def run_pytorch(opts: Options, doc: dict, say: Callable[[str], None]) -> None:
    """The same networks in PyTorch with cudnn.benchmark (scripts/time_pytorch.py)."""
    script = REPO / "scripts" / "time_pytorch.py"
    if not script.is_file():
        doc["pytorch"] = {n: {"status": "failed", "error": f"no {script} (run from the checkout)"}
                          for n in opts.nets}
        return
    for net in opts.nets:
        if doc["pytorch"].get(net, {}).get("status") == "ok" and not opts.retry_failed:
            continue
        out = opts.out / "logs" / f"pytorch_{net}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(script), "--net", net, "--iterations",
               str(opts.iterations), "--json", str(out)]
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=opts.timeout)
            if r.returncode != 0:
                rec = {"status": "failed", "error": r.stdout[-2000:]}
            else:
                got = json.loads(out.read_text(encoding="utf-8"))
                rec = dict(got["nets"][net], status="ok", meta=got["meta"])
        except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
            rec = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        rec["command"] = " ".join(shlex.quote(c) for c in cmd)
        doc["pytorch"][net] = rec
        say(f"pytorch {net}: " + (f"{rec['median_ms']:.2f} ms" if rec["status"] == "ok"
                                  else f"failed: {rec['error'][-300:]}"))


POINT_COLUMNS = ("net", "setting", "policy", "optimizer", "limit_bytes", "status", "median_ms",
                 "min_ms", "max_ms", "processes", "mean_ms", "forward_ms", "backward_ms",
                 "speedup_vs_undivided", "conv_ms", "conv_speedup_vs_undivided", "vs_pytorch",
                 "predicted_conv_ms", "workspace_bytes", "bench_s", "plan_s", "ilp_solve_s")


def _spread(rec: dict) -> str:
    """`` [min-max, n processes]`` of a point measured more than once (Note [Repeats])."""
    n = len(measured_repeats(rec))
    return f" [{rec['min_ms']:.2f}-{rec['max_ms']:.2f}, {n} runs]" if n > 1 else ""


def speedup(doc: dict, rec: dict, field: str = "median_ms") -> Optional[float]:
    """``field`` of undivided at the same limit over this point's: the measured median
    forward-backward time, the measured convolution layers (``conv_ms``), or
    (``predicted_conv_ms``) the predicted convolution time."""
    status = {"median_ms": "ok", "conv_ms": "ok", "predicted_conv_ms": "predicted"}[field]
    if rec.get("status") != status or rec.get("limit_bytes") is None:
        return None
    base = doc["points"].get(Point(rec["net"], "undivided", rec["limit_bytes"]).key, {})
    if base.get("status") != status or not rec.get(field):
        return None
    return base[field] / rec[field]


def write_csv(out: Path, doc: dict) -> None:
    """``points.csv`` (one row per point) and ``layers.csv`` (per layer, measured points)."""
    import csv
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "points.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(POINT_COLUMNS)
        for key in sorted(doc["points"]):
            rec = doc["points"][key]
            rec = dict(rec, speedup_vs_undivided=speedup(doc, rec),
                       conv_speedup_vs_undivided=speedup(doc, rec, "conv_ms"),
                       vs_pytorch=vs_pytorch(doc, rec),
                       processes=len(measured_repeats(rec)) or None)
            w.writerow(["" if rec.get(c) is None else rec.get(c) for c in POINT_COLUMNS])
    with open(out / "layers.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(("net", "setting", "limit_bytes", "layer", "forward_ms", "backward_ms"))
        for key in sorted(doc["points"]):
            rec = doc["points"][key]
            for t in rec.get("layers") or []:
                w.writerow((rec["net"], rec["setting"], rec.get("limit_bytes") or "", t["name"],
                            t.get("forward", ""), t.get("backward", "")))


def format_summary(doc: dict) -> str:
    """A table of the points: median forward-backward time and speedup over undivided
    (measured), or predicted convolution time (predict mode)."""
    rows = []
    for key in sorted(doc["points"], key=lambda k: (doc["points"][k]["net"],
                                                    point_order(doc["points"][k]))):
        rec = doc["points"][key]
        lim = format_size(rec["limit_bytes"]) if rec.get("limit_bytes") is not None else "-"
        if rec.get("limit_bytes") == UNLIMITED:
            lim = "unlimited"
        if rec.get("status") == "ok":
            sp, csp = speedup(doc, rec), speedup(doc, rec, "conv_ms")
            val = (f"{rec['median_ms']:10.2f} ms" + (f"  {sp:5.2f}x" if sp else " " * 7)
                   + (f"  conv {rec['conv_ms']:7.2f} ms" if rec.get("conv_ms") else "")
                   + (f" {csp:5.2f}x" if csp else "") + _spread(rec))
        elif rec.get("status") == "predicted":
            sp = speedup(doc, rec, "predicted_conv_ms")
            val = f"{rec['predicted_conv_ms']:10.2f} ms conv (predicted)" + (
                f"  {sp:5.2f}x" if sp else "")
        else:
            val = f"{rec.get('status')}: {str(rec.get('error'))[:80]}"
        rows.append(f"{rec['net']:<9} {rec['setting']:<11} {lim:>9}  {val}")
    for net, rec in sorted(doc.get("pytorch", {}).items()):
        if rec.get("status") == "ok":
            best = min((r for r in doc["points"].values()
                        if r.get("net") == net and r.get("status") == "ok"
                        and r.get("setting") != "unlimited"),
                       key=lambda r: r["median_ms"], default=None)
            vs = (f"; best Caffe point {best['setting']}/{format_size(best['limit_bytes'])}: "
                  f"{vs_pytorch(doc, best):.2f}x PyTorch's time"
                  if best and best.get("limit_bytes") else "")
            rows.append(f"{net:<9} {'pytorch':<11} {'-':>9}  {rec['median_ms']:10.2f} ms "
                        f"(cudnn.benchmark){vs}")
    return "\n".join(rows)


def vs_pytorch(doc: dict, rec: dict) -> Optional[float]:
    """This point's median over PyTorch's (same network, batch and precision): below 1,
    Caffe with ucudnn is faster."""
    torch = doc.get("pytorch", {}).get(rec.get("net"), {})
    if rec.get("status") != "ok" or torch.get("status") != "ok":
        return None
    return rec["median_ms"] / torch["median_ms"]


SETTINGS = ("caffe", "unlimited", *POLICIES, "ilp")


def point_order(rec: dict) -> tuple:
    """Sort key of a point within its network: stock Caffe and unlimited first, then by
    limit and setting (tables and figures)."""
    lim = rec.get("limit_bytes") or 0
    first = lim == UNLIMITED or rec["setting"] == "caffe"
    return (0 if first else 1, lim,
            SETTINGS.index(rec["setting"]) if rec["setting"] in SETTINGS else len(SETTINGS))
