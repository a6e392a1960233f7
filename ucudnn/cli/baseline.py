"""``ucudnn baseline``: Caffe + ucudnn against every PyTorch mode, processes interleaved."""
from __future__ import annotations

import os
from pathlib import Path

from ..experiments import baseline as bl
from ..experiments.baseline_report import write_readme
from ..experiments.pytorch_modes import FP32_MODES, MODES
from ..experiments.results import ReproduceError
from ..paths import caffe_binary
from . import common as c

HELP = ("Caffe + ucudnn in its fastest setting against every PyTorch mode (fp32, bf16, a "
        "constant-input control), their processes interleaved on one GPU")


def add_parser(sub) -> None:
    s = sub.add_parser("baseline", help=HELP, description=HELP + " (Note [Interleaved "
                       "baseline] in ucudnn/experiments/baseline.py).")
    s.add_argument("--out", metavar="DIR", default="baseline-out",
                   help="results folder: baseline.json, processes.csv, points.csv, "
                   "versions.json, README.md, logs/")
    s.add_argument("--nets", default=None,
                   help="comma-separated NAME@BATCH, NAME one of " + ", ".join(bl.SETTINGS)
                   + " (default: " + ",".join(bl.NETS) + "; with --quick: "
                   + ",".join(bl.QUICK["nets"]) + ")")
    s.add_argument("--modes", default=",".join(FP32_MODES),
                   help="PyTorch modes timed in every round, comma-separated, of "
                   + ", ".join(MODES) + "; the bf16 mode of the fastest compile mode and the "
                   "constant-input control are added unless --no-bf16, --no-control")
    s.add_argument("--processes", type=int, default=3,
                   help="processes a side per mode and net, in rounds")
    s.add_argument("--iterations", type=int, default=20, help="timed iterations per process")
    s.add_argument("--warmup", type=int, default=5, help="PyTorch's warm-up iterations")
    s.add_argument("--no-bf16", action="store_true", help="leave out the bf16 autocast mode")
    s.add_argument("--no-control", action="store_true",
                   help="leave out PyTorch's constant-input control")
    s.add_argument("--caffe-input", choices=("gaussian", "constant"), default="gaussian",
                   help="Caffe's input: gaussian drawn once (PyTorch's), or DummyData made "
                   "constant as `ucudnn reproduce` runs it")
    s.add_argument("--compile-cache", metavar="DIR",
                   help="torch.compile's caches under DIR, shared by the processes of a net and "
                   "mode (and by the control, the same graphs): only the first compiles cold "
                   "(default: every PyTorch process compiles from empty caches)")
    s.add_argument("--quick", action="store_true",
                   help="a smoke test of the whole pipeline in minutes: "
                   f"{bl.QUICK['processes']} process a side, {bl.QUICK['iterations']} "
                   f"iterations, {bl.QUICK['warmup']} warm-up, modes "
                   f"{','.join(bl.QUICK['modes'])} (replacing --processes, --iterations, "
                   "--warmup and --modes), and --nets "
                   f"{','.join(bl.QUICK['nets'])} and --compile-cache DIR/compile-cache "
                   "unless given")
    s.add_argument("--screen", action="store_true",
                   help="time every fp32 mode in round 1 only, and in the later rounds Caffe, "
                   "the fastest fp32 mode of round 1, bf16 and the control: --processes a "
                   "side for Caffe and its fp32 baseline, one for the other modes")
    s.add_argument("--resume", action="store_true",
                   help="go on with the run in --out (its baseline.json): run only the slots "
                   "it has no process for, and once more those that failed in an earlier "
                   "command; its settings must be these (a fresh run where --out has none)")
    s.add_argument("--deadline", type=float, metavar="SECONDS",
                   help="start no process once fewer SECONDS than one process (the longest so "
                   f"far, or --process-estimate; {bl.FIRST_PROCESS_S:.0f} s before any has run) "
                   "are left since the start; write everything, exit 0 and print the command "
                   "that resumes")
    s.add_argument("--process-estimate", type=float, metavar="SECONDS",
                   help="with --deadline: the seconds one process is taken to need (default: "
                   "the longest process so far)")
    s.add_argument("--readme-only", action="store_true",
                   help="run nothing: write --out's README.md again from its points.csv and "
                   "versions.json")
    s.add_argument("--gpu", type=int, default=0, help="GPU id for both sides")
    s.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    s.add_argument("--caffe", metavar="EXE", help="the patched caffe binary (default: "
                   "$UCUDNN_CAFFE or third_party/caffe/build/tools/caffe)")
    s.set_defaults(func=run)


def run(args) -> int:
    out = Path(args.out)
    if args.readme_only:
        for name in ("points.csv", "versions.json"):
            if not (out / name).is_file():
                raise c.CliError(f"--out: no {out / name} to write the README from")
        print(f"wrote {write_readme(out)}")
        return 0
    c.positive(args.processes, "--processes")
    c.positive(args.iterations, "--iterations")
    c.positive(args.warmup, "--warmup")
    for value, flag in ((args.deadline, "--deadline"), (args.process_estimate,
                                                        "--process-estimate")):
        if value is not None and not value > 0:
            raise c.CliError(f"{flag}: must be a positive number of seconds, got {value}")
    if args.process_estimate is not None and args.deadline is None:
        raise c.CliError("--process-estimate: only with --deadline")
    caffe = args.caffe or str(caffe_binary())
    if not os.access(caffe, os.X_OK):
        raise c.CliError(f"--caffe: no Caffe binary at {caffe!r} (scripts/gpu_node.sh setup "
                         "builds one)")
    nets = bl.NETS if args.nets is None else c.split_list(args.nets)
    opts = bl.Options(out=out, caffe=caffe, nets=nets,
                      modes=c.split_list(args.modes), processes=args.processes,
                      iterations=args.iterations, warmup=args.warmup, bf16=not args.no_bf16,
                      control=not args.no_control, gpu=args.gpu, timeout=args.timeout,
                      caffe_input=args.caffe_input,
                      compile_cache=None if args.compile_cache is None
                      else Path(args.compile_cache).resolve(),
                      argv=["ucudnn", "baseline", *getattr(args, "argv", [])],
                      screen=args.screen, resume=args.resume, deadline=args.deadline,
                      process_estimate=args.process_estimate)
    if args.quick:
        quick = dict(bl.QUICK, nets=bl.QUICK["nets"] if args.nets is None else nets,
                     compile_cache=opts.compile_cache or (out / "compile-cache").resolve())
        opts = bl.Options(**{**vars(opts), **quick})
    try:
        doc = bl.run(opts, say=lambda m: print(m, flush=True))
    except ReproduceError as e:
        raise c.CliError(str(e)) from None
    print(f"wrote {out / 'points.csv'}, {out / 'README.md'}")
    if doc["remaining"]:
        return 0
    return 1 if any(p.get("status") != "ok" for p in doc["processes"]) else 0
