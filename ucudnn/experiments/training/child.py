"""The pycaffe child: one process per (net, setting), and what passes between it and the runner.

A fresh process gets Caffe's RNG seeded the same way by the solver's ``random_seed`` and
contains a crash; it is the only code that imports pycaffe. The runner starts it as
``python -m ucudnn.experiments.training --child SPEC.json`` (:data:`CHILD_MODULE`, the
package's ``__main__``) with :func:`child_env` and reads what it leaves:

* the spec (:func:`run_child` writes it): ``net``, ``setting``, ``solver`` (a file name in
  ``workdir``, where the child runs), ``mode``, ``gpu``, the run's ``batch``, ``iterations``,
  ``test_interval``, ``limit_bytes``, ``seed``, ``pycaffe`` (the folder to import caffe from),
  ``out`` (where the record goes), ``weights`` and ``reference_weights`` (the final weights
  of this run and of the net's stock run, ``.npz``); or ``probe`` and ``pycaffe`` only
  (:func:`probe`: an import check, answered in ``probe.out.json`` next to the spec);
* the record (JSON at ``out``): ``status`` (ok or failed), ``error``, ``curve``
  (``[iteration, loss, test_accuracy]``), the SHA-256 of the data and of the initial and final
  weights, ``final_weights_rel_diff`` to stock's, versions, timings. :func:`run_child` adds
  what the parent knows (the plans a ucudnn run's records show, :func:`kernel_plans_of`; the
  command, log, files, fingerprint) and writes it to ``runs/NET/SETTING.json``.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ...caffe.records import ENV as RECORDS_ENV
from ...caffe.records import RecordError, read_records, summarize
from ...plan.table import write_text
from ..caffe_run import PACKAGE_ROOT
from .nets import Dataset, dataset
from ...paths import caffe_build, pycaffe_dir
from .options import Options
from .settings import SETTINGS, TrainingError

#: what the runner starts with ``-m`` (its ``__main__`` calls :func:`main`)
CHILD_MODULE = "ucudnn.experiments.training"
#: every setting's process: no TF32 anywhere (Note [Training equivalence])
STRICT_FP32_ENV = {"NVIDIA_TF32_OVERRIDE": "0"}


def child_env(opts: Options, records: Optional[Path]) -> Dict[str, str]:
    """The child's environment: pycaffe and this ucudnn importable, Caffe's libraries found,
    :data:`STRICT_FP32_ENV`, and the plan records going to ``records`` (absolute), if any."""
    pycaffe = Path(opts.pycaffe or pycaffe_dir()).resolve()
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(pycaffe), str(PACKAGE_ROOT)]
                                      + [p for p in sys.path if p])
    # Caffe's warnings and errors (its per-layer set-up lines would make the logs large);
    # ucudnn's own lines (Python logging) and plan records in full
    e.update({"GLOG_logtostderr": "1", "GLOG_minloglevel": "1", "UCUDNN_LOG": "INFO"})
    e.update(STRICT_FP32_ENV)
    build = Path(opts.caffe_build or caffe_build())
    if (build / "lib").is_dir():
        e["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str((build / "lib").resolve())] + [p for p in e.get("LD_LIBRARY_PATH", "")
                                                .split(os.pathsep) if p])
    e.pop(RECORDS_ENV, None)
    if records is not None:
        # absolute: the child runs in the prototxt folder (its solver's relative paths)
        e[RECORDS_ENV] = str(Path(records).resolve())
    return e


def _python() -> List[str]:
    """This interpreter, with ``-P`` where this process runs with it (no working folder on
    the child's path)."""
    return [sys.executable] + (["-P"] if getattr(sys.flags, "safe_path", False) else [])


def probe(opts: Options) -> dict:
    """Import pycaffe in a child once (its versions, or an error naming --pycaffe)."""
    spec = {"probe": True, "pycaffe": str(Path(opts.pycaffe or pycaffe_dir()).resolve())}
    with tempfile.TemporaryDirectory() as tmp:
        sp = Path(tmp) / "probe.json"
        sp.write_text(json.dumps(spec), encoding="utf-8")
        r = subprocess.run(_python() + ["-m", CHILD_MODULE, "--child", str(sp)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=child_env(opts, None), timeout=300)
        res = Path(tmp) / "probe.out.json"
        if r.returncode != 0 or not res.is_file():
            raise TrainingError(f"--pycaffe: cannot import caffe from {spec['pycaffe']}: "
                                + (r.stdout.strip().splitlines() or ["(no output)"])[-1])
        return json.loads(res.read_text(encoding="utf-8"))


def load_json(path: Path) -> Optional[dict]:
    """The JSON object in ``path``, or None where it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run_child(opts: Options, net: str, setting: str, p: dict, model: Path, solver: Path,
              run_json: Path, key: str, weights_dir: Path) -> dict:
    """Train (net, setting) in a child: the spec in ``weights_dir``, the log and plan records
    under ``logs/``, the record (the child's, or why it failed) to ``run_json``, which is
    returned. ``p``: :meth:`.Options.plan`; ``key``: the inputs' fingerprint (kept in the
    record: what a later invocation resumes from)."""
    out = Path(opts.out)
    log = out / "logs" / f"{net}_{setting}.log"
    records = out / "logs" / f"{net}_{setting}.records.jsonl"
    if records.exists():
        records.unlink()
    run_json.parent.mkdir(parents=True, exist_ok=True)
    spec = {"net": net, "setting": setting, "solver": solver.name, "workdir": str(
        solver.parent.resolve()), "mode": opts.mode, "gpu": opts.gpu, **p,
        "pycaffe": str(Path(opts.pycaffe or pycaffe_dir()).resolve()),
        "out": str(run_json.resolve()), "weights": str(weights_dir / f"{net}_{setting}.npz"),
        "reference_weights": str(weights_dir / f"{net}_stock.npz")}
    spec_path = weights_dir / f"{net}_{setting}.spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    if run_json.exists():
        run_json.unlink()
    cmd = _python() + ["-m", CHILD_MODULE, "--child", str(spec_path)]
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        try:
            r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True,
                               env=child_env(opts, records if opts.mode == "gpu" else None),
                               timeout=opts.timeout, cwd=solver.parent)
            rc: Optional[int] = r.returncode
        except subprocess.TimeoutExpired:
            rc = None
    wall = time.perf_counter() - t0
    rec = load_json(run_json) or {}
    if rc != 0 or rec.get("status") != "ok":
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        why = (f"timed out after {opts.timeout:.0f} s" if rc is None else
               rec.get("error") or f"exit status {rc}")
        rec = {"status": "failed", "error": why, "log_tail": tail}
    else:
        if opts.mode == "gpu" and not SETTINGS[setting].stock:
            try:
                recs = read_records(records)
            except RecordError as e:
                recs, rec["records_error"] = [], str(e)
            rec["kernels"] = kernel_plans_of(recs)
            ilp = [r for r in recs if r["kind"] == "ilp"]
            if ilp:
                rec["ilp"] = {"budget_bytes": ilp[-1]["budget_bytes"],
                              "solve_s": ilp[-1]["solve_s"],
                              "predicted_ms": ilp[-1].get("predicted_ms")}
            if not rec["kernels"]:
                rec.update(status="failed", error=f"no plan records in {records.name}: the "
                           "net did not run through ucudnn")
    rec.update({"net": net, "setting": setting, "fingerprint": key, "wall_s": round(wall, 3),
                "log": str(log.relative_to(out)), "command": " ".join(map(shlex.quote, cmd)),
                "prototxt": str(model.relative_to(out)),
                "solver": str(solver.relative_to(out)), "environment": dict(STRICT_FP32_ENV)})
    if records.exists():
        rec["records"] = str(records.relative_to(out))
    write_text(run_json, json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def kernel_plans_of(records: List[dict]) -> Dict[str, dict]:
    """Per ``layer/op``, the plan a kernel ran (its last plan record, Note [Plan records] in
    ucudnn/caffe/records.py): the plan text, its runs of micro-batches, workspace, whether it
    splits the batch, and the math mode it was planned with."""
    math_of = {}
    for r in records:
        if r["kind"] == "kernel":
            math_of[f"{r['layer']}/{r['op']}"] = r.get("math")
    out = {}
    for key, k in summarize(records).kernels.items():
        chunks = [{"batch": c.get("batch"), "count": c.get("count"), "algo": c.get("algo"),
                   "algo_name": c.get("algo_name"), "ws_bytes": c.get("ws_bytes")}
                  for c in k.chunks]
        out[key] = {"plan": k.plan, "chunks": chunks, "batch": k.batch, "stage": k.stage,
                    "ws_bytes": k.ws_bytes, "predicted_ms": k.predicted_ms,
                    "undivided_ms": k.undivided_ms, "instances": k.instances,
                    "split": any((c.get("batch") or k.batch) < k.batch for c in k.chunks),
                    "math": math_of.get(key), "bench_s": k.bench_s,
                    "sizes_benchmarked": k.sizes_benchmarked, "sizes_cached": k.sizes_cached}
    return out


# ------------------------------------------------------------------------------ in the child

def _stub_missing_image_modules() -> List[str]:
    """pycaffe's ``caffe.io`` imports scikit-image (and SciPy) for image loading and resizing,
    which training from arrays never calls; where they are missing, stand-ins whose functions
    raise let ``import caffe`` work. Returns what was stubbed (recorded in the metadata)."""
    import importlib.util
    import types
    stubbed = []

    def unavailable(*_a, **_k):
        raise ImportError("stubbed by ucudnn training: not installed")

    if importlib.util.find_spec("skimage") is None:
        sk, sk_io, sk_tr = (types.ModuleType(n) for n in ("skimage", "skimage.io",
                                                          "skimage.transform"))
        sk.img_as_float = sk_io.imread = sk_io.imsave = sk_tr.resize = unavailable
        sk.io, sk.transform = sk_io, sk_tr
        sys.modules.update({"skimage": sk, "skimage.io": sk_io, "skimage.transform": sk_tr})
        stubbed.append("skimage")
    if importlib.util.find_spec("scipy") is None:
        sp, nd = types.ModuleType("scipy"), types.ModuleType("scipy.ndimage")
        nd.zoom = unavailable
        sp.ndimage = nd
        sys.modules.update({"scipy": sp, "scipy.ndimage": nd})
        stubbed.append("scipy")
    return stubbed


def _import_caffe(path: str):
    if path not in sys.path:
        sys.path.insert(0, path)
    stubbed = _stub_missing_image_modules()
    import caffe
    return caffe, stubbed


def _weights(net) -> List[Tuple[str, Any]]:
    return [(f"{name}/{i}", b.data) for name, blobs in net.params.items()
            for i, b in enumerate(blobs)]


def _weights_sha256(net) -> str:
    h = hashlib.sha256()
    for name, a in _weights(net):
        h.update(name.encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _evaluate(net, data: Dataset) -> float:
    """Held-out accuracy of the current weights: the training net's forward pass on the
    held-out batches (no dropout or batch norm in these nets, so it is the TEST phase's
    forward), the mean of its Accuracy top over equal batches."""
    accs = []
    for x, y in data.test_batches():
        net.blobs["data"].data[...] = x
        net.blobs["label"].data[...] = y
        net.forward()
        accs.append(float(net.blobs["accuracy"].data))
    return sum(accs) / len(accs)


def _train(spec: dict) -> dict:
    import numpy as np
    caffe, stubbed = _import_caffe(spec["pycaffe"])
    rec: Dict[str, Any] = {"caffe_version": getattr(caffe, "__version__", None),
                           "numpy_version": np.__version__, "stubbed": stubbed}
    t0 = time.perf_counter()
    data = dataset(spec["net"], spec["batch"], spec["seed"])
    rec["data_sha256"] = data.fingerprint()
    if spec["mode"] == "gpu":
        caffe.set_device(int(spec["gpu"]))
        caffe.set_mode_gpu()
    else:
        caffe.set_mode_cpu()
    os.chdir(spec["workdir"])
    solver = caffe.get_solver(spec["solver"])
    net = solver.net
    rec["initial_weights_sha256"] = _weights_sha256(net)
    rec["setup_s"] = round(time.perf_counter() - t0, 3)
    n, interval = int(spec["iterations"]), int(spec["test_interval"])
    curve = []
    t1 = time.perf_counter()
    for it in range(n + 1):
        acc = _evaluate(net, data) if it % interval == 0 or it == n else None
        x, y = data.train_batch(it)
        net.blobs["data"].data[...] = x
        net.blobs["label"].data[...] = y
        if it < n:
            solver.step(1)
        else:
            net.forward()            # the loss of the final weights, no update
        loss = float(net.blobs["loss"].data)
        curve.append([it, loss, acc])
        if not math.isfinite(loss):
            rec.update(status="failed", error=f"loss {loss} at iteration {it}", curve=curve)
            return rec
    rec["train_s"] = round(time.perf_counter() - t1, 3)
    rec["curve"] = curve
    rec["final_weights_sha256"] = _weights_sha256(net)
    w = dict(_weights(net))
    np.savez(spec["weights"], **{k.replace("/", "__"): v for k, v in w.items()})
    ref = spec.get("reference_weights")
    if ref and os.path.exists(ref) and os.path.abspath(ref) != os.path.abspath(
            spec["weights"]):
        with np.load(ref) as r:
            num = sum(float(np.sum((w[k].astype(np.float64)
                                    - r[k.replace("/", "__")].astype(np.float64)) ** 2))
                      for k in w)
            den = sum(float(np.sum(r[k.replace("/", "__")].astype(np.float64) ** 2))
                      for k in w)
        rec["final_weights_rel_diff"] = math.sqrt(num / den) if den else None
    rec.update({k: spec[k] for k in ("iterations", "batch", "limit_bytes", "seed",
                                     "test_interval")})
    rec["status"] = "ok"
    return rec


def main(argv: List[str]) -> int:
    """The child's command line, ``--child SPEC.json`` (:func:`child_main`)."""
    if len(argv) == 2 and argv[0] == "--child":
        return child_main(argv[1])
    print(f"usage: python -m {CHILD_MODULE} --child SPEC.json (the runner's child; use "
          "`ucudnn training`)", file=sys.stderr)
    return 2


def child_main(spec_path: str) -> int:
    """One setting's process (or, with ``probe``, an import check of pycaffe): reads the spec,
    trains, writes its record as JSON to ``spec['out']``."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    if spec.get("probe"):
        caffe, stubbed = _import_caffe(spec["pycaffe"])
        import numpy as np
        res = {"pycaffe": spec["pycaffe"], "caffe_version": getattr(caffe, "__version__", None),
               "caffe_module": getattr(caffe, "__file__", None), "numpy": np.__version__,
               "stubbed": stubbed, "python": platform.python_version()}
        try:
            import sklearn
            res["scikit_learn"] = sklearn.__version__
        except ImportError:
            res["scikit_learn"] = None
        Path(spec_path).with_name("probe.out.json").write_text(json.dumps(res),
                                                               encoding="utf-8")
        return 0
    try:
        rec = _train(spec)
    except Exception as e:       # noqa: BLE001 - the parent reads the error from the record
        traceback.print_exc()
        rec = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    Path(spec["out"]).write_text(json.dumps(rec), encoding="utf-8")
    sys.stdout.flush()
    sys.stderr.flush()
    # pycaffe's exit tears down Caffe's nets while the interpreter finalises (Note [ucudnn in
    # Caffe], Shutdown); the record is written, so leave at once
    os._exit(0 if rec.get("status") == "ok" else 1)
