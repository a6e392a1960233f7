"""``ucudnn prototxt``: write a variant of a Caffe prototxt with ucudnn_param."""
from __future__ import annotations

from ..caffe import params
from ..caffe.proto import PrototxtError, load_caffe_pb2, parse_net, read_text, write_net
from ..caffe.prototxt import check_net
from . import common as c
from . import options

HELP = "write a variant of a Caffe prototxt with ucudnn_param"


def add_parser(sub) -> None:
    s = sub.add_parser("prototxt", help=HELP, description=HELP + ". The net is read as "
                       "strictly as Caffe reads it (a field Caffe refuses is an error naming "
                       "the file, line, layer and field), checked in both phases as Caffe's "
                       "Net::Init checks it, and written through protobuf's text format: every "
                       "field is kept, options not given are left as they are, but comments "
                       "are dropped and fields come out in the order of their numbers in "
                       "caffe.proto.")
    s.add_argument("input", help="the prototxt to start from")
    s.add_argument("-o", "--output", required=True, help="the variant to write (a new file "
                   "unless --force)")
    s.add_argument("--force", action="store_true",
                   help="allow --output to be an existing file, the input included "
                   "(overwrite it)")
    options.add_settings_options(s, repeats=True)
    s.add_argument("--cache", metavar="PATH", help="benchmark cache path for Caffe to use")
    s.add_argument("--layers", metavar="LIST", help="set it on these layers instead of the "
                   "net (default: the net-wide ucudnn_param)")
    s.add_argument("--caffe-proto", metavar="PATH", help="a fork's caffe.proto with fields "
                   "BVLC Caffe lacks (default: $UCUDNN_CAFFE_PROTO, else ucudnn's own schema "
                   "of BVLC Caffe's nets)")
    s.set_defaults(func=run)


def run(args) -> int:
    try:
        return _run(args)
    except PrototxtError as e:      # names the input file itself
        raise c.CliError(str(e)) from None


def _run(args) -> int:
    c.text_file(args.input, "input")
    c.output_file(args.output, "--output", inputs=[args.input], force=args.force)
    given = options.settings_given(args)
    if args.cache is not None:
        given["cache_path"] = args.cache
    text = read_text(args.input)
    net = parse_net(load_caffe_pb2(args.caffe_proto), text, args.input)
    options.check_sizes(given, check_net(net, text, args.input))
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
    check_net(net, text, args.input)
    c.write_output(args.output, "--output", fill=lambda tmp: write_net(net, tmp),
                   force=args.force)
    c.say(f"wrote {args.output}")
    return 0
