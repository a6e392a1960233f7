"""``ucudnn cache``: list, import or export the benchmark cache."""
from __future__ import annotations

import json
import sys

from ..vocab import DTYPES, MATH_MODES
from . import common as c

HELP = "list, import or export the benchmark cache"
_CACHE_HELP = "benchmark cache (default: $UCUDNN_CACHE or ~/.cache/ucudnn/bench.sqlite)"


def add_parser(sub) -> None:
    s = sub.add_parser("cache", help=HELP, description=HELP + ".")
    csub = s.add_subparsers(dest="command", metavar="ACTION", parser_class=c.Parser)
    csub.required = True
    p = csub.add_parser("list", help="list cached kernels")
    p.add_argument("--cache", metavar="PATH", help=_CACHE_HELP)
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=run)
    for name, helptext in (("import", "store a benchmark table, keyed by the layers' shapes"),
                           ("export", "write cached measurements as a table")):
        p = csub.add_parser(name, help=helptext, description=helptext + ".")
        if name == "import":
            p.add_argument("table", metavar="CSV", help="benchmark table to import")
            p.add_argument("--repeats", type=int, default=1,
                           help="cudnnFind calls behind each row")
        else:
            p.add_argument("--csv", "-o", metavar="OUT", help="output file (default: stdout)")
        c.add_layer_source(p, default_net=False)
        p.add_argument("--cache", metavar="PATH", help=_CACHE_HELP)
        p.add_argument("--gpu", help="GPU name (default: the visible GPU"
                       + (")" if name == "import" else ", or the only one in the cache)"))
        p.add_argument("--cudnn-version", type=int, metavar="V",
                       help="cuDNN version, e.g. 91400 (default: the visible GPU's"
                       + (")" if name == "import" else ", or the only one in the cache)"))
        p.add_argument("--dtype", default="float32", help="data type: " + ", ".join(DTYPES))
        p.add_argument("--math", default="default", help="math mode: " + ", ".join(MATH_MODES))
        p.set_defaults(func=run)


def run(args) -> int:
    from ..measure import sources
    from ..plan.table import format_table, write_table
    if args.command == "list":
        path, n_entries, listing = sources.cache_listing(args.cache)
        if args.json:
            print(json.dumps([{"gpu": k.gpu, "cudnn_version": k.cudnn_version,
                               "dtype": k.dtype, "math": k.math, "op": k.op,
                               "shape": k.shape.key(), "batches": b}
                              for k, b in listing], indent=2))
            return 0
        print(f"{path}: {len(listing)} kernels, {n_entries} entries")
        for k, b in listing:
            print(f"{k.gpu} | cuDNN {sources.format_cudnn(k.cudnn_version)} | {k.dtype} | "
                  f"{k.math} | {k.op} | {k.shape.key()} | batches {','.join(map(str, b))}")
        return 0
    math_mode, dtype = c.math(args.math), c.dtype(args.dtype)
    c.need_layers(args, " (the layer shapes)")
    if args.command == "import":
        c.text_file(args.table, "table")
        c.positive(args.repeats, "--repeats")
        layers, _, _ = c.load_layers(args, None)
        n, n_rows, path, gpu, ver = sources.import_table(
            args.table, layers, cache_path=args.cache, gpu=args.gpu,
            cudnn_version=args.cudnn_version, dtype=dtype, math=math_mode, repeats=args.repeats)
        c.say(f"imported {n} entries ({n_rows} rows) into {path} as {gpu}, "
              f"cuDNN {sources.format_cudnn(ver)}, {dtype}, math {math_mode}")
        return 0
    if args.csv:
        c.output_file(args.csv, "--csv")
    layers, _, _ = c.load_layers(args, None)
    rows = sources.export_rows(layers, cache_path=args.cache, gpu=args.gpu,
                               cudnn_version=args.cudnn_version, dtype=dtype, math=math_mode)
    if args.csv:
        write_table(args.csv, rows)
        c.say(f"wrote {len(rows)} rows to {args.csv}")
    else:
        sys.stdout.write(format_table(rows))
    return 0
