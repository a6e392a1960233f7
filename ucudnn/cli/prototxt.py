"""``ucudnn prototxt``: write a variant of a Caffe prototxt with ucudnn_param."""
from __future__ import annotations

import os

from ..vocab import OPTIMIZERS, POLICIES
from . import common as c

HELP = "write a variant of a Caffe prototxt with ucudnn_param"


def add_parser(sub) -> None:
    s = sub.add_parser("prototxt", help=HELP, description=HELP + ". The net is read as "
                       "strictly as Caffe reads it (a field Caffe refuses is an error naming "
                       "the file, line, layer and field) and written through protobuf's text "
                       "format: every field is kept, options not given are left as they are, "
                       "but comments are dropped and fields come out in the order of their "
                       "numbers in caffe.proto.")
    s.add_argument("input", help="the prototxt to start from")
    s.add_argument("-o", "--output", required=True, help="the variant to write (a new file "
                   "unless --force)")
    s.add_argument("--force", action="store_true",
                   help="allow --output to be an existing file, the input included "
                   "(overwrite it)")
    s.add_argument("--policy", help="micro-batch policy: " + ", ".join(POLICIES))
    s.add_argument("--optimizer", help=f"{' or '.join(OPTIMIZERS)} (default: ilp when --budget "
                   "is given)")
    s.add_argument("--limit", metavar="SIZE", help="per-kernel workspace limit, e.g. 64MiB")
    s.add_argument("--budget", metavar="SIZE", help="total workspace of the net (ILP, or the "
                   "arena of the shared optimizer)")
    s.add_argument("--sizes", metavar="LIST", help="explicit micro-batch sizes, e.g. 32,64")
    s.add_argument("--math", help="math mode: default, tensor_op, fma")
    s.add_argument("--repeats", type=int, help="cudnnFind repetitions per size")
    s.add_argument("--cache", metavar="PATH", help="benchmark cache path for Caffe to use")
    s.add_argument("--layers", metavar="LIST", help="set it on these layers instead of the "
                   "net (default: the net-wide ucudnn_param)")
    s.add_argument("--caffe-proto", metavar="PATH", help="a fork's caffe.proto with fields "
                   "BVLC Caffe lacks (default: $UCUDNN_CAFFE_PROTO, else ucudnn's own schema "
                   "of BVLC Caffe's nets)")
    s.set_defaults(func=run)


def run(args) -> int:
    from ..caffe import proto as cp
    c.text_file(args.input, "input")
    c.output_file(args.output, "--output", inputs=[args.input], force=args.force)
    if os.path.lexists(args.output) and not args.force:
        raise c.CliError(f"--output: {args.output} exists; pass --force to overwrite it")
    if args.repeats is not None and args.repeats < 1:
        raise c.CliError(f"--repeats: must be >= 1, got {args.repeats}")
    if args.math is not None:
        c.math(args.math)
    budget = c.size(args.budget, "--budget")
    limit = c.size(args.limit, "--limit")
    optimizer = args.optimizer or ("ilp" if budget is not None else None)
    try:
        cp.make_variant(args.input, args.output, caffe_proto=args.caffe_proto,
                        replace=args.force, policy=args.policy, optimizer=optimizer,
                        limit=limit, budget=budget, sizes=c.sizes(args.sizes), math=args.math,
                        repeats=args.repeats, cache_path=args.cache,
                        layers=args.layers.split(",") if args.layers else None)
    except cp.PrototxtError as e:
        raise c.CliError(str(e)) from None
    c.say(f"wrote {args.output}")
    return 0
