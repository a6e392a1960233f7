"""The runner of ``ucudnn training``: every (net, setting) trained in its own child, then the
files of the comparison written from every run the results folder holds.

The same net is trained from the same initial weights on the same batches under every setting
(:data:`.settings.SETTINGS`), one setting per process (:mod:`.child`), through pycaffe; the
training loss of every iteration and the held-out accuracy at intervals are compared with the
stock run (:mod:`.comparison`, Note [Training equivalence]).

Outputs (``--out``): ``curves.csv`` (:mod:`.curves`), ``metadata.json`` (:mod:`.metadata`),
``summary.json`` and ``summary.md``, ``training_curves.png`` (:mod:`.report`); per run
``runs/NET/SETTING.json`` (the child's record, also what a later invocation resumes from),
``logs/NET_SETTING.{log,records.jsonl}`` and ``prototxt/``. With several seeds, one such
folder per seed (``seedN/``) and ``seeds_summary.{json,md}`` over them
(:func:`regenerate_seeds`).
"""
from __future__ import annotations

import hashlib
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Optional

from ...caffe.proto import load_caffe_pb2, write_net
from ...plan.table import write_text
from .child import load_json, probe as probe_pycaffe, run_child
from .comparison import compare, compare_seeds
from .curves import read_curves, rows_of, write_curves
from .metadata import metadata
from .nets import base_net, net_config, solver_text
from .options import Options, check_options
from .report import format_seeds_summary, format_summary, plot_curves
from .settings import SETTINGS, TrainingError, variant


def _fingerprint(*parts: str) -> str:
    """A short SHA-256 of a run's inputs: a prior record with the same one is kept."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def run(opts: Options, say: Callable[[str], None] = print) -> dict:
    """Train every (net, setting) that has no matching result in ``opts.out`` yet (or all with
    ``force``), then write curves.csv, metadata.json, the summary and the figure from every run
    there. Returns the metadata."""
    check_options(opts)
    out = Path(opts.out)
    for d in ("prototxt", "logs", "runs"):
        (out / d).mkdir(parents=True, exist_ok=True)
    probe = probe_pycaffe(opts)
    say(f"ucudnn training: pycaffe {probe.get('caffe_version')} from {probe.get('pycaffe')}"
        + (f" (stubbed: {', '.join(probe['stubbed'])})" if probe.get("stubbed") else ""))
    pb2 = load_caffe_pb2()
    engine = "CAFFE" if opts.mode == "cpu" else None
    failed = []
    with tempfile.TemporaryDirectory(prefix="ucudnn-training-") as weights_dir:
        for net in opts.nets:
            p = opts.plan(net)
            base = base_net(pb2, net, p["batch"])
            settings = opts.net_settings(net)
            # stock first: the others compare their final weights with its
            settings = sorted(settings, key=lambda s: (not SETTINGS[s].stock, settings.index(s)))
            for setting in settings:
                stem = f"{net}_{setting}"
                model = out / "prototxt" / f"{stem}.prototxt"
                write_net(variant(pb2, base, setting, p["limit_bytes"], engine=engine,
                                  cache_path=opts.cache_path), str(model))
                solver = out / "prototxt" / f"{stem}.solver.prototxt"
                stext = solver_text(net_config(net), model.name, p["iterations"], p["seed"],
                                    opts.mode)
                solver.write_text(stext, encoding="utf-8")
                key = _fingerprint(model.read_text(encoding="utf-8"), stext, json.dumps(p),
                                   opts.mode)
                run_json = out / "runs" / net / f"{setting}.json"
                prior = load_json(run_json)
                if (not opts.force and prior and prior.get("status") == "ok"
                        and prior.get("fingerprint") == key):
                    say(f"{net}/{setting}: done before ({run_json}), kept")
                    continue
                t0 = time.perf_counter()
                rec = run_child(opts, net, setting, p, model, solver, run_json, key,
                                Path(weights_dir))
                if rec["status"] != "ok":
                    failed.append(f"{net}/{setting}")
                say(f"{net}/{setting}: {_run_line(rec)} ({time.perf_counter() - t0:.1f} s)")
    meta = regenerate(out, opts=opts, probe=probe, say=say)
    meta["failed"] = failed
    return meta


def _run_line(rec: dict) -> str:
    """One line of what a run did: its loss, accuracy and split kernels, or why it failed."""
    if rec["status"] != "ok":
        return f"FAILED: {rec.get('error')}"
    curve = rec["curve"]
    acc = [a for _, _, a in curve if a is not None]
    k = rec.get("kernels") or {}
    split = sum(1 for v in k.values() if v.get("split"))
    return (f"loss {curve[0][1]:.4f} -> {curve[-1][1]:.4f}, held-out accuracy "
            f"{100 * acc[-1]:.2f} %" if acc else "") + (
        f", {split}/{len(k)} kernels split" if k else "")


def _runs(out: Path) -> Dict[str, Dict[str, dict]]:
    """``{net: {setting: run record}}`` of every record under ``out``/runs."""
    runs: Dict[str, Dict[str, dict]] = {}
    for p in sorted((out / "runs").glob("*/*.json")):
        rec = load_json(p)
        if rec and rec.get("net") and rec.get("setting"):
            runs.setdefault(rec["net"], {})[rec["setting"]] = rec
    return runs


def regenerate(out: Path, *, opts: Optional[Options] = None, probe: Optional[dict] = None,
               say: Callable[[str], None] = print, from_csv: bool = False) -> dict:
    """Write curves.csv (unless ``from_csv``: then read it), summary.json, summary.md and
    training_curves.png, and (after a run) metadata.json, from what ``out`` holds. Returns the
    metadata (or the summary for ``from_csv``)."""
    out = Path(out)
    runs = _runs(out)
    if from_csv:
        rows = read_curves(out / "curves.csv")
    else:
        rows = rows_of(runs)
        write_curves(out / "curves.csv", rows)
    if not rows:
        raise TrainingError(f"--out: no training curves in {out}")
    summary = compare(rows, plans=runs)
    summary["failed"] = {f"{net}/{setting}": rec.get("error")
                         for net, per in runs.items() for setting, rec in per.items()
                         if rec.get("status") != "ok"}
    write_text(out / "summary.json", json.dumps(_json_safe(summary), indent=1,
                                                sort_keys=True, allow_nan=False,
                                                default=str) + "\n")
    text = format_summary(summary)
    write_text(out / "summary.md", text + "\n")
    try:
        plot_curves(rows, str(out / "training_curves.png"))
    except ImportError as e:
        say(f"no figure (matplotlib: {e}; pip install 'ucudnn[plot]')")
    say(text)
    if from_csv or opts is None:
        return summary
    meta = metadata(opts, probe or {}, runs)
    # runs of earlier invocations into the same folder keep how they were started
    prior = load_json(out / "metadata.json") or {}
    this = {k: meta.get(k) for k in ("command", "date", "host", "ucudnn_commit", "mode")}
    this["nets"] = {n: opts.net_settings(n) for n in opts.nets}
    meta["invocations"] = list(prior.get("invocations") or []) + [this]
    for net, entry in meta["nets"].items():
        old = (prior.get("nets") or {}).get(net) or {}
        for k in ("run_with", "solver"):
            if k not in entry and k in old:
                entry[k] = old[k]
    write_text(out / "metadata.json", json.dumps(meta, indent=1, sort_keys=True,
                                                 default=str) + "\n")
    return meta


def regenerate_seeds(root: Path, say: Callable[[str], None] = print) -> Optional[dict]:
    """seeds_summary.{json,md} from ``root``/seed*/curves.csv (None where there are fewer
    than two seeds)."""
    root = Path(root)
    runs = {}
    for d in sorted(root.glob("seed*")):
        if d.is_dir() and d.name[4:].isdigit() and (d / "curves.csv").is_file():
            runs[int(d.name[4:])] = read_curves(d / "curves.csv")
    if len(runs) < 2:
        return None
    summary = compare_seeds(runs)
    write_text(root / "seeds_summary.json", json.dumps(_json_safe(summary), indent=1,
                                                       sort_keys=True, allow_nan=False) + "\n")
    text = format_seeds_summary(summary)
    write_text(root / "seeds_summary.md", text + "\n")
    say(text)
    return summary


def _json_safe(v):
    """``v`` with non-finite floats as the strings "inf", "-inf", "nan" (strict JSON)."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v
