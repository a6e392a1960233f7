"""``ucudnn prototxt``: write a variant of a Caffe prototxt with ucudnn_param."""
from __future__ import annotations

from . import common as c
from . import options

HELP = "write a variant of a Caffe prototxt with ucudnn_param"


def add_parser(sub) -> None:
    s = sub.add_parser("prototxt", help=HELP, description=HELP + " (through the protobuf "
                       "classes of Caffe's patched caffe.proto; fields not given are left as "
                       "they are). The variant is checked as Caffe's Net::Init checks a net, "
                       "in both phases, before it is written.")
    s.add_argument("input", help="the prototxt to start from")
    s.add_argument("-o", "--output", required=True, help="the variant to write")
    s.add_argument("--force", action="store_true",
                   help="allow --output to be the input file (overwrite it)")
    options.add_settings_options(s, repeats=True)
    s.add_argument("--cache", metavar="PATH", help="benchmark cache path for Caffe to use")
    s.add_argument("--layers", metavar="LIST", help="set it on these layers instead of the "
                   "net (default: the net-wide ucudnn_param)")
    s.add_argument("--caffe-proto", metavar="PATH", help="a caffe.proto to read the net with "
                   "(default: $UCUDNN_CAFFE_PROTO, else ucudnn's schema of Caffe's)")
    s.set_defaults(func=run)


def run(args) -> int:
    from ..caffe import params, proto as cp
    from ..caffe.prototxt import check_net
    from ..caffe.shapes import PHASES, NetShapes
    c.text_file(args.input, "input")
    c.output_file(args.output, "--output", inputs=[args.input], force=args.force)
    given = options.settings_given(args)
    if args.cache is not None:
        given["cache_path"] = args.cache
    pb2 = cp.load_caffe_pb2(args.caffe_proto)
    net = cp.read_net(pb2, args.input)
    check_net(net, args.input)
    batches = [l.n for phase in PHASES for l in
               NetShapes(net, phase, source=args.input, need_convs=False).run().convs]
    options.check_sizes(given, batches)
    targets = [net.ucudnn_param]
    if args.layers:
        names = c.split_list(args.layers)
        by_name = {l.name: l for l in net.layer}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise c.CliError(f"--layers: no layer named {', '.join(missing)} in {args.input}")
        if given.get("optimizer") == "shared":
            raise c.CliError("--optimizer shared: the shared arena is net-wide; set it "
                             "without --layers")
        targets = [by_name[n].ucudnn_param for n in names]
    for p in targets:
        params.set_param(p, given)
    check_net(net, args.input)
    cp.write_net(net, args.output)
    c.say(f"wrote {args.output}")
    return 0
