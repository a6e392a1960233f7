"""``ucudnn prototxt``: write a variant of a Caffe prototxt with ucudnn_param."""
from __future__ import annotations

from ..vocab import OPTIMIZERS, POLICIES
from . import common as c

HELP = "write a variant of a Caffe prototxt with ucudnn_param"


def add_parser(sub) -> None:
    s = sub.add_parser("prototxt", help=HELP, description=HELP + " (through the protobuf "
                       "classes of the patched caffe.proto; fields not given are left as they "
                       "are).")
    s.add_argument("input", help="the prototxt to start from")
    s.add_argument("-o", "--output", required=True, help="the variant to write")
    s.add_argument("--force", action="store_true",
                   help="allow --output to be the input file (overwrite it)")
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
    s.add_argument("--caffe-proto", metavar="PATH", help="the patched caffe.proto (default: "
                   "$UCUDNN_CAFFE_PROTO or third_party/caffe/src/src/caffe/proto/caffe.proto)")
    s.set_defaults(func=run)


def run(args) -> int:
    from ..caffe import proto as cp
    c.text_file(args.input, "input")
    c.output_file(args.output, "--output", inputs=[args.input], force=args.force)
    if args.repeats is not None and args.repeats < 1:
        raise c.CliError(f"--repeats: must be >= 1, got {args.repeats}")
    if args.math is not None:
        c.math(args.math)
    budget = c.size(args.budget, "--budget")
    limit = c.size(args.limit, "--limit")
    optimizer = args.optimizer or ("ilp" if budget is not None else None)
    try:
        pb2 = cp.load_caffe_pb2(args.caffe_proto)
        net = cp.read_net(pb2, args.input)
        cp.set_ucudnn_param(net, policy=args.policy, optimizer=optimizer, limit=limit,
                            budget=budget, sizes=c.sizes(args.sizes), math=args.math,
                            repeats=args.repeats, cache_path=args.cache,
                            layers=args.layers.split(",") if args.layers else None)
        cp.write_net(net, args.output)
    except cp.CaffeProtoError as e:     # not an InputError in every tree
        raise c.CliError(str(e)) from None
    c.say(f"wrote {args.output}")
    return 0
