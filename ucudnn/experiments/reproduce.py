"""The paper's experiment grid, run with the patched Caffe (``ucudnn reproduce``): the runner.

For every network and point of the grid (:mod:`.grid`) -- per-layer workspace limits (8, 64,
512 MiB) x policies (undivided, powerOfTwo, all), the ILP at a budget of limit x kernels,
unlimited workspace (the floor) and stock Caffe -- the runner writes a variant of the network's
prototxt, runs ``caffe time`` on it (:mod:`.caffe_run`) and keeps Caffe's timing (its log) and
what ucudnn planned (the core's plan records, Note [Plan records] in ucudnn/caffe/records.py)
in the results document (:mod:`.results`, Note [Results schema], Note [Resuming], Note
[Repeats]); :mod:`.summary` writes the CSVs and the table. Without a GPU (or a built Caffe) it
plans every point from the shipped H200 data instead (:mod:`.predict`) and says so.

Paths are explicit (:class:`Options`) and never the working directory's: the networks come
from ``prototxt_dir`` (default :func:`ucudnn.paths.nets_dir`), PyTorch's timer from
``pytorch_script`` (default the checkout's ``scripts/time_pytorch.py``), git metadata from the
checkout holding the package (Note [Checkout and installed package] in ucudnn/paths.py).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .. import __version__
from ..caffe.proto import load_caffe_pb2, read_net
from ..files import write_text
from ..measure import shipped
from ..measure.bench import device_info
from ..paths import CHECKOUT, caffe_patches, local_root, nets_dir
from ..plan.table import read_text
from ..vocab import CAFFE_COMMIT, parse_size
from .caffe_run import run_caffe_time, variant_prototxt
from .grid import LIMITS, NETS, NETWIDE, POLICIES, STOCK_SETTINGS, Point, grid, parse_net
from .predict import PREDICTED, predict_point
from .results import (REPEAT_FIELDS, ReproduceError, conv_ms, load_results, measured_repeats,
                      merge_repeats, pending, runs_needed, save_results, starts_afresh,
                      stock_workspace, type_ms)
from .summary import format_summary, summary_line, write_csv

__all__ = ["Options", "run", "run_point", "run_pytorch", "pytorch_record", "merge_pytorch",
           "read_pytorch_json", "metadata", "git", "has_batchnorm", "has_cudnn_batchnorm",
           "with_stock_budget"]

def default_pytorch_script() -> Path:
    """``scripts/time_pytorch.py`` under :func:`ucudnn.paths.local_root`."""
    return local_root() / "scripts" / "time_pytorch.py"


@dataclasses.dataclass
class Options:
    """What one ``ucudnn reproduce`` invocation runs; recorded in the results (``meta.options``).

    ``prototxt_dir``/``pytorch_script``: None for the defaults (:func:`ucudnn.paths.nets_dir`,
    :func:`default_pytorch_script`). ``argv``: the command line as its caller wants it recorded
    (``meta.command``), or None; the runner never reads ``sys.argv``."""
    out: Path
    nets: Sequence[str] = NETS
    limits: Sequence[int] = tuple(parse_size(s) for s in LIMITS)
    policies: Sequence[str] = POLICIES
    ilp: bool = True
    ilp_policy: str = "powerOfTwo"
    unlimited: bool = True
    stock: bool = True
    shared: bool = True
    iterations: int = 20
    gpu: int = 0
    timeout: float = 900.0
    caffe: Optional[str] = None
    prototxt_dir: Optional[Path] = None
    cache_path: Optional[str] = None
    retry_failed: bool = False
    predict: bool = False
    pytorch: bool = True
    pytorch_script: Optional[Path] = None
    pytorch_profile: bool = True        # a torch.profiler process per mode: time by kind
    repeats: int = 3
    bn_engines: Sequence[str] = ("caffe", "fused")
    engines: Sequence[str] = ("legacy",)
    share_diffs: bool = False           # every point's net with share_diffs (caffe_patch/0007)
    fusions: Optional[Sequence[str]] = None  # the fusions on in every point's net, the rest
                                             # off; None: the net's own (Caffe's defaults)
    layouts: Sequence[str] = ("NCHW",)  # ucudnn's points once per layout (Point.layout)
    im2col: bool = False                # a point per net with im2col convolutions
    force_backward: bool = False        # every point's net with force_backward
    argv: Optional[Sequence[str]] = None

    @property
    def nets_dir(self) -> Path:
        return Path(self.prototxt_dir) if self.prototxt_dir is not None else nets_dir()

    def to_json(self) -> Dict[str, Any]:
        """The options as JSON values (paths as strings, sequences as lists)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Path):
                v = str(v)
            elif isinstance(v, (list, tuple)):
                v = list(v)
            out[f.name] = v
        out["prototxt_dir"] = str(self.nets_dir)
        return out


# --------------------------------------------------------------------------------- metadata

def git(*args) -> Optional[str]:
    """``git ARGS`` in the checkout holding this module: its output, or None (no checkout, no
    git, an error)."""
    if CHECKOUT is None:
        return None
    try:
        r = subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True,
                           timeout=20)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


#: names the tree's commit where it has no git: a copy on a node without the checkout's .git
COMMIT_ENV = "UCUDNN_COMMIT"


def source_commit() -> Optional[str]:
    """The commit of the ucudnn tree that runs: ``git rev-parse HEAD`` of the checkout, else
    ``$UCUDNN_COMMIT`` (a copy of the tree without its ``.git``, as a GPU node gets it), else
    None."""
    return git("rev-parse", "HEAD") or os.environ.get(COMMIT_ENV) or None


def metadata(opts: Options, mode: str) -> dict:
    """The invocation: its options, mode, date, host, ucudnn's commit (of the checkout this
    module runs from), the device and the Caffe binary."""
    meta = {"options": opts.to_json(), "mode": mode, "ucudnn_version": __version__,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "python": platform.python_version(),
            "ucudnn_commit": source_commit(),
            "ucudnn_dirty": (bool(git("status", "--porcelain", "--untracked-files=no"))
                             if CHECKOUT else None)}
    if opts.argv is not None:
        meta["command"] = " ".join(shlex.quote(a) for a in opts.argv)
    try:
        meta["device"] = device_info()
    except Exception as e:       # noqa: BLE001 - no GPU: recorded, not fatal
        meta["device"] = {"error": str(e)}
    caffe = None if opts.predict else opts.caffe
    if caffe:
        meta["caffe"] = caffe
        meta["caffe_commit"] = CAFFE_COMMIT
        parents = Path(caffe).resolve().parents       # BUILD/tools/caffe
        patches = caffe_patches(parents[1]) if len(parents) > 2 else None
        if patches is not None:
            meta["caffe_patches"] = patches
    return meta


def with_stock_budget(p: Point, doc: dict) -> Tuple[Point, Optional[str]]:
    """``p`` (a ``shared_stock`` point) with its budget (Note [Shared arena at stock memory]),
    or ``(p, why not)``; a point measured before keeps its budget."""
    rec = doc["points"].get(p.key) or {}
    if rec.get("status") == "ok" and rec.get("limit_bytes"):
        return dataclasses.replace(p, limit=rec["limit_bytes"]), None
    ws, how = stock_workspace(doc, p.net, p.bn)
    if ws is None:
        return p, how
    return dataclasses.replace(p, limit=ws), None


def has_cudnn_batchnorm(meta: dict) -> bool:
    """The Caffe binary of ``meta`` carries the BatchNorm engines CUDNN and FUSED
    (caffe_patch/0009-batch-norm-engines.patch), by the patch stamp of the source tree it
    was built from."""
    return any(line.split(" ", 1)[0].endswith("-batch-norm-engines.patch")
               for line in meta.get("caffe_patches") or [])


def has_batchnorm(prototxt: Path) -> bool:
    """The network has BatchNorm layers (so the cuDNN engine changes it)."""
    return any(layer.type == "BatchNorm" for layer in read_net(load_caffe_pb2(),
                                                                str(prototxt)).layer)


# ------------------------------------------------------------------------------------ runner

def run(opts: Options, say: Callable[[str], None] = print) -> dict:
    """Run (or resume) the grid; returns the results document."""
    nets_dir = opts.nets_dir
    try:
        names = {net: parse_net(net)[0] for net in opts.nets}
    except ValueError as e:
        raise ReproduceError(f"--nets: {e}") from None
    for net, name in names.items():
        if not (nets_dir / f"{name}.prototxt").is_file():
            raise ReproduceError(f"--nets: no {name}.prototxt in {nets_dir} (net {net!r})")
    mode = "predict" if opts.predict else "caffe"
    if mode == "caffe" and not (opts.caffe and os.access(opts.caffe, os.X_OK)):
        raise ReproduceError(f"--caffe: no Caffe binary at {opts.caffe!r} (scripts/build_caffe.sh "
                             "builds one; --predict plans from the shipped data instead)")
    path = Path(opts.out) / "reproduce.json"
    doc = load_results(path)
    if doc["points"] and doc["meta"].get("mode") not in (None, mode):
        raise ReproduceError(f"{path} holds {doc['meta'].get('mode')} results; use another "
                             "--out for a run in mode " + mode)
    # a grid resumed over several sessions: every invocation's machine and commit are kept,
    # and each point says which run measured it
    doc["meta"] = metadata(opts, mode)
    doc.setdefault("runs", []).append(doc["meta"])
    bn_engines = list(opts.bn_engines)
    bn_nets = {net for net in opts.nets if has_batchnorm(nets_dir / f"{names[net]}.prototxt")}
    if set(bn_engines) - {"caffe"} and bn_nets and (mode == "predict"
                                                    or not has_cudnn_batchnorm(doc["meta"])):
        # predicted convolution times do not depend on the BatchNorm engine
        if mode == "caffe":
            say("the Caffe binary does not carry caffe_patch/0009 (its source tree's patch "
                "stamp lists " + (", ".join(doc["meta"].get("caffe_patches", [])[1:]) or "none")
                + "): no points with its BatchNorm engines")
        bn_engines = [b for b in bn_engines if b == "caffe"]
    nets = list(opts.nets)
    layouts = list(opts.layouts)
    if mode == "predict" and set(layouts) - {"NCHW"}:
        say("predicted mode: the shipped benchmark data holds NCHW kernels only: no NHWC "
            "points (a GPU run measures them)")
        layouts = [l for l in layouts if l == "NCHW"]
    if mode == "predict" and opts.im2col:
        say("predicted mode: no im2col points (Note [im2col points]: a GPU run measures them)")
    if mode == "predict":
        unknown = [net for net in nets if net not in shipped.nets()]
        if unknown:
            say(f"predicted mode: no shipped benchmark data for {', '.join(unknown)} "
                f"(ucudnn/data/{shipped.DATA} has {', '.join(shipped.nets())}): left out; a "
                "GPU run measures them")
            nets = [net for net in nets if net not in unknown]
    points = grid(nets, opts.limits, opts.policies, ilp=opts.ilp,
                  unlimited=opts.unlimited, stock=opts.stock, shared=opts.shared,
                  bn_engines=bn_engines,
                  has_batchnorm=bn_nets.__contains__, engines=opts.engines,
                  layouts=layouts, im2col=opts.im2col and mode == "caffe")
    repeats = 1 if mode == "predict" else opts.repeats
    todo = pending(points, doc, opts.retry_failed, repeats)
    runs = sum(runs_needed(doc["points"].get(p.key), opts.retry_failed, repeats) for p in todo)
    say(f"ucudnn reproduce: {len(points)} points, {len(points) - len(todo)} complete in {path}, "
        f"{len(todo)} to run" + (f" ({runs} Caffe processes, {repeats} per point)"
                                 if mode == "caffe" else " (predicted, no GPU run)"))
    if mode == "caffe" and opts.pytorch:
        run_pytorch(opts, doc, say)
        save_results(path, doc)
    pb2 = None
    if mode == "caffe" and todo:
        pb2 = load_caffe_pb2()
    done = 0
    for rnd in range(1, repeats + 1):         # Note [Repeats]: rounds over the points
        for p in todo:
            rec = doc["points"].get(p.key)
            fresh = rnd == 1 and starts_afresh(rec, opts.retry_failed)
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
    if mode == "predict":
        say(f"{PREDICTED}: the points' convolution times are the planner's (points.csv, "
            "reproduce.json); no layers.csv (per-layer Caffe times come from a GPU run)")
    return doc


def run_point(opts: Options, pb2, p: Point, doc: dict, rec: Optional[dict]) -> dict:
    """Measure ``p`` in one more Caffe process and return its record: a new one, or ``rec``
    with this process added to its repeats (Note [Repeats])."""
    run_index = len(doc["runs"]) - 1
    out = Path(opts.out)
    if p.setting == "shared_stock" and not opts.predict:
        p, why = with_stock_budget(p, doc)
        if why:
            new = {"status": "failed", "error": why}
            new.update({"net": p.net, "setting": p.setting, "limit_bytes": None,
                        "bn_engine": p.bn, "engines": p.engines, "layout": p.layout,
                        "policy": opts.ilp_policy, "optimizer": "shared",
                        "run": run_index})
            return new
    if opts.predict:
        new = predict_point(p, opts.ilp_policy)
    else:
        prior = measured_repeats(rec) if rec else []
        stem = p.stem + (f".{len(prior) + 1}" if prior else "")
        model = out / "prototxt" / (p.stem + ".prototxt")
        try:
            types = variant_prototxt(pb2, opts.nets_dir / f"{parse_net(p.net)[0]}.prototxt",
                                     p, model,
                                     opts.cache_path, opts.ilp_policy,
                                     bn_engine_field=has_cudnn_batchnorm(doc["meta"]),
                                     share_diffs=opts.share_diffs, fusions=opts.fusions,
                                     force_backward=opts.force_backward)
            convs = [name for name, t in types.items() if t == "Convolution"]
            new = run_caffe_time(opts.caffe, model, opts.iterations, opts.gpu,
                                 out / "logs" / (stem + ".log"), opts.timeout,
                                 planned=p.setting not in STOCK_SETTINGS)
        except Exception as e:    # noqa: BLE001 - one point's failure is recorded
            new = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        if new.get("status") == "ok":
            new["run"], new["conv_layers"] = run_index, convs
            for r in prior + [new]:
                if r.get("conv_ms") is None:
                    r["conv_ms"] = conv_ms(r.get("layers") or [], convs)
            this = {f: new.get(f) for f in REPEAT_FIELDS}
            new = merge_repeats(rec if prior else new, prior + [this])
            new["type_ms"] = type_ms(new["layers"], types)
        elif prior:
            # a later process failed: the point is failed, its measured processes kept
            new = dict(rec, status="failed", error=f"repeat {len(prior) + 1}: {new['error']}",
                       log_tail=new.get("log_tail"))
    new.update({"net": p.net, "setting": p.setting, "limit_bytes": p.limit, "bn_engine": p.bn,
                "engines": p.engines, "layout": p.layout,
                "policy": p.policy if p.setting not in NETWIDE else opts.ilp_policy,
                "optimizer": {"ilp": "ilp", "shared": "shared",
                              "shared_stock": "shared"}.get(p.setting, "dp")})
    if p.setting == "shared_stock" and not opts.predict and "stock_workspace" not in new:
        new["stock_workspace"] = stock_workspace(doc, p.net, p.bn)[1]
    new.setdefault("run", run_index)
    return new


def pytorch_record(got: dict, name: str) -> dict:
    """A net's entry of ``doc["pytorch"]`` from scripts/time_pytorch.py's JSON ``got``."""
    return dict(got["nets"][name], status="ok", meta=got["meta"])


def run_pytorch(opts: Options, doc: dict, say: Callable[[str], None]) -> None:
    """The same networks in PyTorch (scripts/time_pytorch.py): its fp32 modes (Note
    [PyTorch's modes] in pytorch_modes.py), each in its own processes with NVML's
    whole-process peak memory, profiled by kind of layer unless ``pytorch_profile`` is false;
    the fastest mode is the baseline (``vs_pytorch_best``)."""
    script = Path(opts.pytorch_script) if opts.pytorch_script else default_pytorch_script()
    if not script.is_file():
        doc["pytorch"] = {n: {"status": "failed",
                              "error": f"no {script} (a checkout has it; --no-pytorch skips)"}
                          for n in opts.nets}
        say(f"pytorch: no {script} (a checkout has it; --no-pytorch skips)")
        return
    for net in opts.nets:
        if doc["pytorch"].get(net, {}).get("status") == "ok" and not opts.retry_failed:
            continue
        out = Path(opts.out) / "logs" / f"pytorch_{net}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        name, batch = parse_net(net)
        cmd = [sys.executable, str(script), "--net", name, "--iterations",
               str(opts.iterations), "--processes", "3", "--json", str(out)]
        if opts.pytorch_profile:
            cmd.append("--profile")
        if batch is not None:
            cmd += ["--batch", str(batch)]
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=opts.timeout)
            if r.returncode != 0:
                rec = {"status": "failed", "error": r.stdout[-2000:]}
            else:
                rec = pytorch_record(json.loads(out.read_text(encoding="utf-8")), name)
        except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
            rec = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        rec["command"] = " ".join(shlex.quote(c) for c in cmd)
        doc["pytorch"][net] = rec
        say(f"pytorch {net}: " + (f"{rec['median_ms']:.2f} ms ({rec.get('pytorch_mode')})"
                                  if rec["status"] == "ok" else f"failed: {rec['error'][-300:]}"))


# Note [Merging PyTorch's points]
#     PyTorch's side of a grid (scripts/time_pytorch.py) may be timed apart from the grid: in
#     the same GPU session after the Caffe points, with fewer modes or processes than
#     reproduce's own run. ``ucudnn reproduce --out GRID --merge-pytorch PYTORCH.json ...``
#     records such a JSON in the grid as reproduce records its own run (:func:`pytorch_record`
#     and the command line that timed it), then writes points.csv, layers.csv and summary.txt
#     again. A PyTorch net goes to the grid net of the same name and batch: ``NAME@BATCH``, or
#     ``NAME`` where its points' kernels ran at that batch (a grid that records no batch: where
#     PyTorch ran at its default batch, the prototxt's). A file that is not time_pytorch.py's
#     JSON, or a net that matches no grid net, stops the merge before anything is written.

def read_pytorch_json(path: Path) -> dict:
    """scripts/time_pytorch.py's JSON at ``path``, its shape checked (ReproduceError naming
    ``--merge-pytorch``, the file and what is wrong)."""
    where = f"--merge-pytorch: {path}"
    try:
        got = json.loads(read_text(path, ReproduceError, "JSON"))
    except ReproduceError as e:
        raise ReproduceError(f"--merge-pytorch: {e}") from None
    except ValueError as e:
        raise ReproduceError(f"{where}: not JSON ({e})") from None
    if not (isinstance(got, dict) and isinstance(got.get("meta"), dict)
            and isinstance(got["meta"].get("command_line"), str)
            and isinstance(got.get("nets"), dict) and got["nets"]):
        raise ReproduceError(f"{where}: not scripts/time_pytorch.py's JSON (expected "
                             "{\"meta\": {\"command_line\": ...}, \"nets\": {NET: ...}})")
    for name, rec in got["nets"].items():
        if not (isinstance(rec, dict) and type(rec.get("batch")) is int and rec["batch"] > 0
                and isinstance(rec.get("median_ms"), (int, float)) and rec["median_ms"] > 0):
            raise ReproduceError(f"{where}: net {name!r}: expected a positive \"batch\" and "
                                 "\"median_ms\"")
    return got


def _grid_net(doc: dict, name: str, batch: int, default_batch: bool) -> Optional[str]:
    """The grid net that PyTorch's ``name`` at ``batch`` belongs to (Note [Merging PyTorch's
    points]), or None."""
    nets = {r["net"] for r in doc["points"].values() if "net" in r}
    if f"{name}@{batch}" in nets:
        return f"{name}@{batch}"
    if name not in nets:
        return None
    ran = {k.get("batch") for r in doc["points"].values() if r.get("net") == name
           for k in (r.get("kernels") or {}).values()} - {None}
    return name if (batch in ran if ran else default_batch) else None


def merge_pytorch(out: Path, paths: Sequence[Path], say: Callable[[str], None] = print) -> dict:
    """Merge scripts/time_pytorch.py's JSON files into the grid at ``out`` (Note [Merging
    PyTorch's points]); returns the results document."""
    path = Path(out) / "reproduce.json"
    if not path.is_file():
        raise ReproduceError(f"--out: no {path} to merge PyTorch's points into")
    doc = load_results(path)
    merged = {}
    for p in paths:
        got = read_pytorch_json(Path(p))
        default_batch = got["meta"].get("options", {}).get("batch") is None
        for name, rec in got["nets"].items():
            net = _grid_net(doc, name, rec["batch"], default_batch)
            if net is None:
                nets = sorted({r["net"] for r in doc["points"].values() if "net" in r})
                raise ReproduceError(f"--merge-pytorch: {p}: PyTorch's {name} at batch "
                                     f"{rec['batch']} matches no net of {path} (its nets: "
                                     f"{', '.join(nets) or 'none'})")
            merged[net] = dict(pytorch_record(got, name), command=got["meta"]["command_line"])
    doc["pytorch"].update(merged)
    save_results(path, doc)
    write_csv(out, doc)
    write_text(Path(out) / "summary.txt", format_summary(doc) + "\n", fsync=True)
    for net, rec in merged.items():
        say(f"pytorch {net}: {rec['median_ms']:.2f} ms ({rec.get('pytorch_mode', 'eager')}) "
            f"merged into {path}")
    return doc
