"""``metadata.json``: how a training comparison was run -- the command and every invocation
into the same folder, versions (ucudnn, Caffe and its build, pycaffe, the device), the
environment, the settings, per net its solver and the runs' records (weights, plans, timings),
and warnings where a run does not show what it should (Note [Training equivalence]).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
import shlex
from pathlib import Path
from typing import Any, Dict, Mapping

from ... import __version__
from ...measure.bench import device_info
from ...paths import CHECKOUT, caffe_build, caffe_patches
from ...vocab import CAFFE_COMMIT
from ..reproduce import git, source_commit
from .child import STRICT_FP32_ENV
from .nets import NETS, solver_text
from .options import Options
from .settings import BENCH_REPEATS, SETTINGS, setting_order


def _caffe_build_facts(build: Path) -> dict:
    """Caffe's build folder: the patches applied (:func:`ucudnn.paths.caffe_patches`) and the
    CMake settings that say how it was built."""
    facts: Dict[str, Any] = {"build": str(build)}
    patches = caffe_patches(build)
    if patches is not None:
        facts["patches"] = patches
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        for line in cache.read_text(encoding="utf-8", errors="replace").splitlines():
            k, _, v = line.partition("=")
            name = k.split(":")[0]
            if name in ("USE_UCUDNN", "USE_CUDNN", "CUDNN_VERSION", "CMAKE_BUILD_TYPE",
                        "UCUDNN_PYTHON", "python_version"):
                facts[name] = v
    return facts


def metadata(opts: Options, probe: dict, runs: Mapping[str, Mapping[str, dict]]) -> dict:
    """The metadata of this invocation (``opts``; ``probe``: what :func:`.child.probe` found)
    over every run in the folder (``{net: {setting: run record}}``)."""
    meta: Dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": platform.python_version(),
        "ucudnn_version": __version__, "ucudnn_commit": source_commit(),
        "ucudnn_dirty": (bool(git("status", "--porcelain", "--untracked-files=no"))
                         if CHECKOUT else None),
        "mode": opts.mode, "environment": dict(STRICT_FP32_ENV),
        "strict_fp32": "every setting's process runs with NVIDIA_TF32_OVERRIDE=0 (no TF32 in "
                       "cuDNN or cuBLAS); ucudnn settings with math FMA; stock with cuDNN's "
                       "default math (Note [Training equivalence])",
        "bench_repeats": BENCH_REPEATS, "caffe_commit": CAFFE_COMMIT,
        "bench_cache": opts.cache_path or os.environ.get("UCUDNN_CACHE") or "the core's default",
        "pycaffe": probe, "caffe_build": _caffe_build_facts(
            Path(opts.caffe_build or caffe_build())),
        "settings": {n: dataclasses.asdict(s) for n, s in SETTINGS.items()},
        "nets": {},
        "note": "Note [Training equivalence] in ucudnn/experiments/training/comparison.py",
    }
    if opts.argv is not None:
        meta["command"] = " ".join(shlex.quote(a) for a in opts.argv)
    if opts.mode == "gpu":
        try:
            meta["device"] = device_info()
        except Exception as e:       # noqa: BLE001 - recorded, not fatal
            meta["device"] = {"error": str(e)}
    for net in sorted(runs):
        cfg = NETS.get(net)
        entry: Dict[str, Any] = {"config": cfg.to_json() if cfg else None}
        if net in opts.nets:
            p = opts.plan(net)
            entry["run_with"] = p
            entry["solver"] = solver_text(cfg, f"{net}_SETTING.prototxt", p["iterations"],
                                          p["seed"], opts.mode)
        hashes = {}
        entry["runs"] = {}
        for setting, rec in sorted(runs[net].items(), key=lambda kv: setting_order(kv[0])):
            keep = {k: rec.get(k) for k in (
                "status", "error", "wall_s", "log", "records", "prototxt", "solver", "command",
                "environment", "kernels", "ilp", "initial_weights_sha256",
                "final_weights_sha256", "final_weights_rel_diff", "data_sha256",
                "caffe_version", "numpy_version", "stubbed", "iterations", "batch",
                "limit_bytes", "seed", "test_interval", "train_s", "setup_s") if k in rec}
            entry["runs"][setting] = keep
            if rec.get("initial_weights_sha256"):
                hashes[setting] = rec["initial_weights_sha256"]
            if SETTINGS.get(setting) and SETTINGS[setting].micro_batched and rec.get(
                    "status") == "ok" and rec.get("kernels") is not None:
                if not any(k.get("split") for k in rec["kernels"].values()):
                    entry.setdefault("warnings", []).append(
                        f"{setting}: no kernel split the batch at this limit; a smaller "
                        "--limit makes the plans micro-batched")
            maths = {k.get("math") for k in (rec.get("kernels") or {}).values()}
            if maths - {"fma"}:
                entry.setdefault("warnings", []).append(
                    f"{setting}: kernels planned with math {sorted(map(str, maths))}, not fma")
        entry["initial_weights_identical"] = len(set(hashes.values())) <= 1 if hashes else None
        meta["nets"][net] = entry
    return meta
