"""``ucudnn bench``: benchmark convolution kernels on this GPU into the cache.

Note [Benchmarks over several GPUs]
    ``--devices 0,1`` starts one ``ucudnn bench ... --shard i/N`` process per GPU with
    ``CUDA_VISIBLE_DEVICES`` set to it, so each process's core sees one GPU (its own handles,
    buffers and benchmark lock) and nothing in the core has to choose devices. The kernels are
    split into N shares of about equal cost (``ucudnn.measure.sources.shard_kernels``: a
    cudnnFind's time grows with the micro-batch size and the convolution's work per sample,
    results/h200/cold_planning/), the same split in every process. All write into the one
    SQLite cache, which takes concurrent writers. Entries are keyed by GPU model, so the GPUs
    must be of one model for the measurements to serve each other. With ``--csv`` the parent
    reads the table back from the cache afterwards. ``--policy all --search pruned --limit
    L`` measures what the runtime's pruned search asks for within L (Note [Pruned search at
    run time]) instead of every size.

    Caffe: a two-GPU ``caffe train`` benchmarks each kernel once, not once per solver (the
    root solver's net is planned before the other solvers start, and they read its
    measurements from the cache; tests/gpu/test_caffe_gpu.py). With ``$UCUDNN_BENCH_DEVICES=0,1``
    Caffe itself spreads a net's benchmarks over those GPUs before its layers plan, in one
    process (Note [Benchmarks over several GPUs in one process] in
    :mod:`ucudnn.measure.for_plan`: threads, since Caffe's embedded interpreter has no Python
    to start); ``ucudnn bench --prototxt NET --devices 0,1`` does the same from outside, with
    one process per GPU. scripts/cold_planning.py measures the processes' way."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from ..measure.for_plan import parse_devices
from ..measure.sources import benchmark_layers
from ..plan.settings import FIND_REPEATS
from ..plan.table import format_table, rows_from_kernel
from ..vocab import DTYPES, ENGINE, MATH_MODES, OPS, SEARCHES, InputError
from . import common as c

HELP = "benchmark convolution kernels into the cache (GPU)"


def add_parser(sub) -> None:
    s = sub.add_parser("bench", help=HELP, description=HELP + "; what the cache holds is not "
                       "measured again unless --force.")
    c.add_layer_source(s, default_net=False)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--policy", help="micro-batch sizes to measure: undivided, powerOfTwo, all "
                   "(default: powerOfTwo)")
    g.add_argument("--sizes", metavar="LIST", help="explicit micro-batch sizes, e.g. 1,2,4,256 "
                   "(default: those of --policy)")
    s.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " +
                   ",".join(OPS))
    s.add_argument("--repeats", type=int, default=FIND_REPEATS,
                   help=f"cudnnFind calls per size (median; default {FIND_REPEATS}, Note "
                   "[Find repeats] in ucudnn/measure/bench.py)")
    s.add_argument("--math", default="default", help="math mode: " + ", ".join(MATH_MODES))
    s.add_argument("--dtype", default="float32", help="data type: " + ", ".join(DTYPES))
    s.add_argument("--engines", default="both", help="families of choices to measure: "
                   "legacy (cuDNN's algorithms), graph (the graph API's engine configs) or both "
                   "(the default, as ucudnn_param's); each family is its own cache entry")
    s.add_argument("--workspace-cap", metavar="SIZE", help="largest workspace offered to cuDNN "
                   "(default: unlimited)")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache (default: $UCUDNN_CACHE or "
                   "~/.cache/ucudnn/bench.sqlite)")
    s.add_argument("--csv", metavar="OUT", help="also write the measurements as a table "
                   "(default: none; an existing regular file is replaced)")
    s.add_argument("--force", action="store_true", help="measure again what is cached")
    s.add_argument("--devices", metavar="LIST", help="GPUs to spread the kernels over, e.g. "
                   "0,1: one process per GPU (CUDA_VISIBLE_DEVICES), each measuring its share "
                   "into the same cache (default: the current GPU only)")
    s.add_argument("--search", default="exhaustive", choices=SEARCHES,
                   help="how --policy all measures: every size (default: a full table), or "
                   "the sizes the pruned search asks for within --limit (what the runtime, "
                   "and so Caffe, runs by default)")
    s.add_argument("--limit", metavar="SIZE", help="workspace limit per kernel of the pruned "
                   "search (required with --search pruned)")
    s.add_argument("--shard", metavar="I/N", help="measure only the I-th of N equal-cost shares "
                   "of the kernels (what each process of --devices runs)")
    s.set_defaults(func=run)


def _shard(text):
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        i = n = -1
    if not 0 <= i < n:
        raise c.CliError(f"--shard: expected I/N with 0 <= I < N, got {text!r}")
    return i, n


def _devices(text):
    try:
        return parse_devices(text, "--devices")
    except InputError as e:
        raise c.CliError(str(e)) from None


def _spread(args, devices) -> int:
    """Note [Benchmarks over several GPUs]: one child ``ucudnn bench --shard i/N`` per GPU."""
    argv, skip = [], False
    for a in args.argv:                         # the same command without --devices / --csv
        if skip:
            skip = False
            continue
        if a in ("--devices", "--csv"):
            skip = True
            continue
        if a.startswith(("--devices=", "--csv=")):
            continue
        argv.append(a)
    procs, t0 = [], time.perf_counter()
    for i, dev in enumerate(devices):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(dev))
        cmd = [sys.executable, "-m", "ucudnn", "bench", *argv, "--shard", f"{i}/{len(devices)}"]
        c.say(f"GPU {dev}: {' '.join(cmd[2:])}")
        procs.append((dev, subprocess.Popen(cmd, env=env)))
    failed = []
    for dev, p in procs:
        if p.wait() != 0:
            failed.append(f"GPU {dev} (exit status {p.returncode})")
    c.say(f"{len(devices)} GPUs done in {time.perf_counter() - t0:.1f} s")
    if failed:
        # each child said why; what it measured before is in the cache
        c.say(f"{c.PROG}: error: bench --devices: failed on " + ", ".join(failed))
        return 1
    return 0


def run(args) -> int:
    c.need_layers(args)
    devices = _devices(args.devices) if args.devices is not None else None
    if devices and args.shard:
        raise c.CliError("--shard: not with --devices (each of its processes gets one)")
    shard = _shard(args.shard) if args.shard else None
    policy = c.policy(args.policy) if args.policy else "powerOfTwo"
    sizes = c.sizes(args.sizes)
    ops = c.ops(args.ops)
    math_mode, dtype = c.math(args.math), c.dtype(args.dtype)
    try:
        engines = ENGINE(args.engines, "--engines")
    except InputError as e:
        raise c.CliError(str(e)) from None
    c.positive(args.repeats, "--repeats")
    cap = c.size(args.workspace_cap, "--workspace-cap")
    search_limit = None
    if args.search == "pruned":
        if policy != "all" or sizes:
            raise c.CliError("--search pruned: only with --policy all")
        if args.limit is None:
            raise c.CliError("--search pruned: needs --limit (the search looks for the plan "
                             "within it)")
        if args.force:
            raise c.CliError("--search pruned: not with --force (the search reads the cache)")
        search_limit = c.size(args.limit, "--limit")
    elif args.limit is not None:
        raise c.CliError("--limit: only with --search pruned")
    if args.csv:
        c.output_file(args.csv, "--csv", force=True)   # a table of the cache: replaced
    layers, _, _ = c.load_layers(args, None)
    if devices:
        rc = _spread(args, devices)
        if rc or not args.csv:
            return rc
        # everything is in the cache now: the table is read back from it (on this process's
        # GPU, which must be of the same model: the cache keys on the model)
        args.force = False
    benches, _ = benchmark_layers(layers, policy=policy, sizes=sizes, ops=ops,
                                  cache_path=args.cache, math=math_mode, dtype=dtype,
                                  repeats=args.repeats, workspace_cap=cap, force=args.force,
                                  progress=c.say, shard=shard, search_limit=search_limit,
                                  engines=engines)
    if args.csv:
        rows = [r for (layer, op), b in benches.items() for r in rows_from_kernel(layer, op, b)]
        c.write_output(args.csv, "--csv", format_table(rows), force=True)
        c.say(f"wrote {len(rows)} rows to {args.csv}")
    return 0
