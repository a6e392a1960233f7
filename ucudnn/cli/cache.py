"""``ucudnn cache``: list, import or export the benchmark cache.

    ucudnn cache list [--cache PATH] [--json]
    ucudnn cache export FILE [--cache PATH] [--force]    a copy of the whole cache (a cache file)
    ucudnn cache export (--net|--layers|--prototxt) ...  [--csv OUT]: a table of those layers
    ucudnn cache import FILE [--cache PATH]              FILE a cache (as export writes): merged
    ucudnn cache import CSV (--net|--layers|--prototxt) ...  a table, keyed by the layers' shapes

Reading commands (list, export) never create a cache, nor write one: a cache of an older
schema is read as it is (Note [Schema migration] in :mod:`ucudnn.measure.cache.schema`).
Note [A cache shared by a cluster] in :mod:`ucudnn.measure.cache` says what the copies are
for.
"""
from __future__ import annotations

import json
import os
import sys

from ..measure import sources
from ..measure.cache import BenchCache
from ..measure.cache.transfer import SourceRefused
from ..measure.cache.schema import SQLITE_MAGIC
from ..plan.table import format_table
from ..vocab import DTYPES, MATH_MODES
from . import common as c

HELP = "list, import or export the benchmark cache"
_CACHE_HELP = "benchmark cache (default: $UCUDNN_CACHE or ~/.cache/ucudnn/bench.sqlite)"
_TABLE_ONLY = (("gpu", None, "--gpu"), ("cudnn_version", None, "--cudnn-version"),
               ("dtype", "float32", "--dtype"), ("math", "default", "--math"),
               ("repeats", 1, "--repeats"), ("csv", None, "--csv"), ("net", None, "--net"),
               ("layers", None, "--layers"), ("prototxt", None, "--prototxt"),
               ("batch", None, "--batch"))


def add_parser(sub) -> None:
    s = sub.add_parser("cache", help=HELP, description=HELP + ".")
    csub = s.add_subparsers(dest="command", metavar="ACTION", parser_class=c.Parser)
    csub.required = True
    p = csub.add_parser("list", help="list cached kernels")
    p.add_argument("--cache", metavar="PATH", help=_CACHE_HELP)
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=run)
    for name, helptext in (
            ("import", "merge a cache file (as 'cache export FILE' writes) into the cache, or "
                       "store a benchmark table keyed by the layers' shapes"),
            ("export", "copy the whole cache to FILE (a cache file), or write the cached "
                       "measurements of some layers as a table")):
        p = csub.add_parser(name, help=helptext, description=helptext + ".")
        if name == "import":
            p.add_argument("table", metavar="FILE",
                           help="a cache file (merged entry by entry: the later measurement "
                           "wins) or a benchmark table (CSV; needs --net, --layers or "
                           "--prototxt)")
            p.add_argument("--repeats", type=int, default=1,
                           help="cudnnFind calls behind each row of a table")
        else:
            p.add_argument("file", metavar="FILE", nargs="?",
                           help="new file for a copy of the whole cache (an existing file "
                           "only with --force)")
            p.add_argument("--csv", "-o", metavar="OUT",
                           help="output file of a table (default: stdout; an existing file "
                           "only with --force)")
            p.add_argument("--force", action="store_true",
                           help="allow FILE or OUT to be an existing regular file (replace "
                           "it); never a FIFO, a device or a folder")
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


def _is_cache_file(path) -> bool:
    if not os.path.isfile(path):        # never opened (a FIFO would block): BenchCache refuses it
        return os.path.exists(path) and not os.path.isdir(path)
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _no_table_options(args, what: str) -> None:
    for field, default, option in _TABLE_ONLY:
        if getattr(args, field, default) != default:
            raise c.CliError(f"{option}: {what} copies entries as they are; {option} is for "
                             "a table of layers")


def _whole_cache(args) -> int:
    if args.command == "export":
        _no_table_options(args, "'cache export FILE'")
        c.output_file(args.file, "FILE", force=True)     # an existing file: export_cache
        with BenchCache(args.cache, readonly=True) as cache:      # read as it is
            n = cache.export_cache(args.file, replace=args.force)
            c.say(f"copied {n} entries of {cache.path} to {args.file}")
        return 0
    _no_table_options(args, f"importing the cache file {args.table}")
    with BenchCache(args.cache) as cache:
        try:
            got = cache.import_cache(args.table)
        except SourceRefused as e:          # about FILE, not --cache
            raise c.CliError(str(e)) from None
        kept = (f"; kept {got.kept_newer} entries of {cache.path} measured later"
                if got.kept_newer else "")
        legacy = (f"; skipped {got.legacy_skipped} schema-1 entries of unknown workspace cap"
                  if got.legacy_skipped else "")
        refused = (f"; {got.refusals} engine refusals (Note [Refused engines])"
                   if got.refusals else "")
        c.say(f"imported {got.stored} entries from {args.table} into {cache.path}{kept}{legacy}"
              f"{refused}")
    return 0


def run(args) -> int:
    c.cudnn_version(getattr(args, "cudnn_version", None))
    if args.command == "list":
        path, n_entries, listing = sources.cache_listing(args.cache)
        if args.json:
            print(json.dumps([{"gpu": k.gpu, "cudnn_version": k.cudnn_version,
                               "dtype": k.dtype, "math": k.math, "op": k.op,
                               "shape": k.shape.key(), "batches": b}
                              for k, b in listing], indent=2))
            return 0
        c.out(f"{path}: {len(listing)} kernels, {n_entries} entries")
        for k, b in listing:
            c.out(f"{k.gpu} | cuDNN {sources.format_cudnn(k.cudnn_version)} | {k.dtype} | "
                  f"{k.math} | {k.op} | {k.shape.key()} | batches {','.join(map(str, b))}")
        return 0
    if (args.command == "export" and args.file is not None) or (
            args.command == "import" and _is_cache_file(args.table)):
        return _whole_cache(args)
    math_mode, dtype = c.math(args.math), c.dtype(args.dtype)
    if args.command == "export" and not (args.net or args.layers or args.prototxt):
        raise c.CliError("export: give FILE (a copy of the whole cache) or --net, --layers or "
                         "--prototxt (a table of those layers)")
    c.need_layers(args, " (the layer shapes)")
    if args.command == "import":
        text = c.text_file(args.table, "table")
        c.positive(args.repeats, "--repeats")
        layers, _, _ = c.load_layers(args, None)
        n, n_rows, path, gpu, ver = sources.import_table(
            args.table, layers, cache_path=args.cache, gpu=args.gpu,
            cudnn_version=args.cudnn_version, dtype=dtype, math=math_mode, repeats=args.repeats,
            text=text)
        c.say(f"imported {n} entries ({n_rows} rows) into {path} as {gpu}, "
              f"cuDNN {sources.format_cudnn(ver)}, {dtype}, math {math_mode}")
        return 0
    if args.csv:
        c.output_file(args.csv, "--csv", force=args.force)
    layers, _, _ = c.load_layers(args, None)
    rows = sources.export_rows(layers, cache_path=args.cache, gpu=args.gpu,
                               cudnn_version=args.cudnn_version, dtype=dtype, math=math_mode)
    if args.csv:
        c.write_output(args.csv, "--csv", format_table(rows), force=args.force)
        c.say(f"wrote {len(rows)} rows to {args.csv}")
    else:
        sys.stdout.write(format_table(rows))
    return 0
