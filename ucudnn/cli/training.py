"""``ucudnn training``: training curves through pycaffe with and without micro-batching
(:mod:`ucudnn.experiments.training`)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, TypeVar

from ..experiments.training.nets import NETS
from ..experiments.training.options import Options, check_options
from ..experiments.training.runner import regenerate, regenerate_seeds
from ..experiments.training.runner import run as run_training
from ..experiments.training.settings import DEFAULT_SETTINGS, SETTINGS
from ..measure.sources import device_status
from . import common as c

HELP = ("train nets through pycaffe under stock Caffe and ucudnn's settings from the same "
        "weights and batches, and compare the curves")
T = TypeVar("T")


def add_parser(sub) -> None:
    s = sub.add_parser("training", help=HELP, description=HELP + ". Settings: " + "; ".join(
        f"{n}: {x.about}" + ("" if x.available else f" [not available: {x.why_not}]")
        for n, x in SETTINGS.items()) + ".")
    s.add_argument("--out", metavar="DIR", default="training-out",
                   help="results folder (curves.csv, metadata.json, summary.{json,md}, "
                   "training_curves.png, runs/, logs/, prototxt/); a run with the same folder "
                   "keeps the settings already trained with the same inputs")
    s.add_argument("--nets", default=",".join(NETS), help="comma-separated: " + ", ".join(
        f"{n} ({cfg.about})" for n, cfg in NETS.items()))
    s.add_argument("--settings", metavar="LIST",
                   help="comma-separated settings for every net (default: "
                   + "; ".join(f"{n}: {','.join(v)}" for n, v in DEFAULT_SETTINGS.items())
                   + ")")
    s.add_argument("--iterations", metavar="N|NET=N,...",
                   help="SGD iterations (default: " + ", ".join(
                       f"{n}={cfg.iterations}" for n, cfg in NETS.items()) + ")")
    s.add_argument("--test-interval", metavar="N|NET=N,...",
                   help="held-out accuracy every N iterations (default: " + ", ".join(
                       f"{n}={cfg.test_interval}" for n, cfg in NETS.items()) + ")")
    s.add_argument("--limit", metavar="SIZE|NET=SIZE,...",
                   help="per-kernel workspace limit of the ucudnn settings; the ILP's budget "
                   "is limit x kernels (default: " + ", ".join(
                       f"{n}={cfg.limit >> 20}MiB" for n, cfg in NETS.items()) + ")")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--seed", type=int, help="solver random_seed and data seed (default: "
                   "the nets' own, 1)")
    g.add_argument("--seeds", metavar="LIST", help="several seeds, e.g. 1,2,3,4,5: each into "
                   "OUT/seedN, then OUT/seeds_summary.{json,md} (Note [Training equivalence])")
    s.add_argument("--gpu", type=int, default=0, help="GPU id")
    s.add_argument("--cpu", action="store_true",
                   help="Caffe's CPU mode with its own convolution (engine CAFFE): only the "
                   "stock settings (a check of the pipeline without a GPU)")
    s.add_argument("--pycaffe", metavar="PATH",
                   help="folder holding pycaffe's caffe/ package (default: $UCUDNN_PYCAFFE or "
                   "third_party/caffe/src/python)")
    s.add_argument("--caffe-build", metavar="DIR",
                   help="Caffe's build folder: its lib/ on LD_LIBRARY_PATH, its patches and "
                   "CMake settings in the metadata (default: $UCUDNN_CAFFE_BUILD or "
                   "third_party/caffe/build)")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache for the ucudnn settings "
                   "(default: the core's, $UCUDNN_CACHE or ~/.cache/ucudnn/bench.sqlite)")
    s.add_argument("--timeout", type=float, default=900, help="seconds per setting")
    s.add_argument("--force", action="store_true",
                   help="train every setting again, even those already in --out")
    s.add_argument("--plot-only", action="store_true",
                   help="only regenerate summary.{json,md} and the figure from --out's "
                   "curves.csv")
    s.set_defaults(func=run)


def _per_net(text: Optional[str], nets: List[str], option: str,
             parse: Callable[[str], T]) -> Dict[str, T]:
    """``VALUE`` (every net) or ``NET=VALUE,...``."""
    if text is None:
        return {}
    out: Dict[str, T] = {}
    for part in c.split_list(text):
        name, sep, value = part.rpartition("=")
        if sep and name.strip() not in nets:
            raise c.CliError(f"{option}: {name.strip()!r} is not one of --nets "
                             f"({', '.join(nets)})")
        for n in ([name.strip()] if sep else nets):
            out[n] = parse(value.strip())
    if not out:
        raise c.CliError(f"{option}: no value in {text!r}")
    return out


def _int(option: str) -> Callable[[str], int]:
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise c.CliError(f"{option}: expected a positive integer, got {v!r}") from None
        return c.positive(n, option)
    return parse


def run(args) -> int:
    if args.plot_only:
        if (Path(args.out) / "curves.csv").is_file():
            regenerate(Path(args.out), from_csv=True, say=print)
        if regenerate_seeds(Path(args.out), say=print) is None \
                and not (Path(args.out) / "curves.csv").is_file():
            raise c.CliError(f"--out: no such file: {Path(args.out) / 'curves.csv'} (and no "
                             "seed folders with curves)")
        return 0
    seeds = None
    if args.seeds is not None:
        seeds = [_int("--seeds")(v) for v in c.split_list(args.seeds)]
        if len(seeds) < 2 or len(set(seeds)) != len(seeds):
            raise c.CliError(f"--seeds: expected two or more distinct seeds, got {args.seeds!r}")
    nets = c.split_list(args.nets)
    if not nets:
        raise c.CliError("--nets: no net named")
    for n in nets:
        if n not in NETS:
            raise c.CliError(f"--nets: unknown net {n!r} (expected one of "
                             f"{', '.join(NETS)})")
    settings = {}
    if args.settings is not None:
        chosen = c.split_list(args.settings)
        if not chosen:
            raise c.CliError("--settings: no setting named")
        settings = {n: chosen for n in nets}
    if args.gpu < 0:
        raise c.CliError(f"--gpu: must not be negative, got {args.gpu}")
    if args.timeout <= 0:
        raise c.CliError(f"--timeout: must be positive, got {args.timeout}")
    mode = "cpu" if args.cpu else "gpu"
    if args.cpu and args.settings is None:
        settings = {n: ["stock", "stock-rerun"] for n in nets}
    opts = Options(
        out=Path(args.out), nets=nets, settings=settings,
        iterations=_per_net(args.iterations, nets, "--iterations", _int("--iterations")),
        test_interval=_per_net(args.test_interval, nets, "--test-interval",
                               _int("--test-interval")),
        limits=_per_net(args.limit, nets, "--limit", lambda v: c.size(v, "--limit")),
        pycaffe=Path(args.pycaffe) if args.pycaffe else None,
        caffe_build=Path(args.caffe_build) if args.caffe_build else None,
        gpu=args.gpu, mode=mode, timeout=args.timeout, force=args.force, seed=args.seed,
        # absolute: each run's child works in its prototxt folder
        cache_path=str(Path(args.cache).resolve()) if args.cache else None,
        argv=["ucudnn", "training", *getattr(args, "argv", [])])
    check_options(opts)
    if mode == "gpu":
        info, reason = device_status()
        if info is None:
            raise c.CliError(f"training needs a GPU: none visible ({reason}); --cpu checks "
                             "the pipeline with the stock settings on the CPU")
    failed = []
    for seed in seeds or [None]:
        o = opts if seed is None else dataclasses.replace(
            opts, out=Path(args.out) / f"seed{seed}", seed=seed)
        meta = run_training(o, say=lambda m: print(m, flush=True))
        for net, entry in meta.get("nets", {}).items():
            for w in entry.get("warnings", []):
                c.note(f"{net}: {w}")
            if entry.get("initial_weights_identical") is False:
                c.note(f"{net}: the settings did not start from the same weights")
        failed += [f"{f} (seed {seed})" if seed is not None else f
                   for f in meta.get("failed", [])]
    if seeds:
        regenerate_seeds(Path(args.out), say=print)
    if failed:
        print(f"{len(failed)} run(s) failed: {', '.join(failed)} (logs under "
              f"{args.out}/.../logs)", file=sys.stderr)
        return 1
    return 0
