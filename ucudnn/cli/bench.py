"""``ucudnn bench``: benchmark convolution kernels on this GPU into the cache."""
from __future__ import annotations

from ..vocab import DTYPES, MATH_MODES, OPS
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
    s.add_argument("--repeats", type=int, default=3, help="cudnnFind calls per size (median)")
    s.add_argument("--math", default="default", help="math mode: " + ", ".join(MATH_MODES))
    s.add_argument("--dtype", default="float32", help="data type: " + ", ".join(DTYPES))
    s.add_argument("--workspace-cap", metavar="SIZE", help="largest workspace offered to cuDNN "
                   "(default: unlimited)")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache (default: $UCUDNN_CACHE or "
                   "~/.cache/ucudnn/bench.sqlite)")
    s.add_argument("--csv", metavar="OUT", help="also write the measurements as a table "
                   "(default: none)")
    s.add_argument("--force", action="store_true", help="measure again what is cached")
    s.set_defaults(func=run)


def run(args) -> int:
    from ..measure.sources import benchmark_layers
    from ..plan.table import rows_from_kernel, write_table
    c.need_layers(args)
    policy = c.policy(args.policy) if args.policy else "powerOfTwo"
    sizes = c.sizes(args.sizes)
    ops = c.ops(args.ops)
    math_mode, dtype = c.math(args.math), c.dtype(args.dtype)
    c.positive(args.repeats, "--repeats")
    cap = c.size(args.workspace_cap, "--workspace-cap")
    if args.csv:
        c.output_file(args.csv, "--csv")
    layers, _, _ = c.load_layers(args, None)
    benches, _ = benchmark_layers(layers, policy=policy, sizes=sizes, ops=ops,
                                  cache_path=args.cache, math=math_mode, dtype=dtype,
                                  repeats=args.repeats, workspace_cap=cap, force=args.force,
                                  progress=c.say)
    if args.csv:
        rows = [r for (layer, op), b in benches.items() for r in rows_from_kernel(layer, op, b)]
        write_table(args.csv, rows)
        c.say(f"wrote {len(rows)} rows to {args.csv}")
    return 0
