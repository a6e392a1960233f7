"""What the subcommands share: the parser class, option checks, layer loading, file checks."""
from __future__ import annotations

import argparse
import dataclasses
import math as _math
import os
import re
import sys
from math import prod
from typing import Callable, List, Optional, Sequence

import ucudnn

from ..caffe.prototxt import load_prototxt
from ..files import check_target, read_text, write_file
from ..caffe.shapes import parse_input_shape, parse_layer_shape
from ..measure import shipped
from ..plan.layers import read_layers
from ..vocab import (DTYPES, MATH_MODES, OPS, POLICIES, InputError, PlanError, format_size,
                     normalise_policy, parse_size)

PROG = "ucudnn"


class CliError(InputError):
    """A bad command line; the message starts with the option it concerns."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` for options with a default; not for None, False or text that
    already states its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.default in (None, False, argparse.SUPPRESS) or "default" in text
                or not action.option_strings):
            return text
        return text + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``ucudnn plan: error: ...``) and exit status 2."""

    def __init__(self, *a, **kw):
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*a, **kw)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {clean(message)} (see {self.prog} --help)\n")


# Note [Text that reaches the terminal]
#     Names come from the user's files (layer names of a prototxt, a cache's GPU text) and may
#     hold escape sequences or line breaks. Every line the CLI prints -- errors, notes,
#     progress, the plan's table, cache listings -- goes through :func:`clean`, which writes
#     C0 and C1 control characters (and DEL) the way Python's ``repr`` does (``\n``,
#     ``\x1b``, ``\x9b``): an error stays one line, and a name cannot move the cursor, recolour
#     the terminal or forge a line. JSON output is left to ``json.dumps``, which escapes them.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def clean(text) -> str:
    """``text`` with its control characters escaped (Note [Text that reaches the terminal])."""
    return _CONTROLS.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"),
                         str(text))


def out(*parts, **kw) -> None:
    """``print`` of a line of output, :func:`clean`: one printed line stays one line."""
    print(*(clean(p) for p in parts), **kw)


def note(msg: str) -> None:
    print(f"{PROG}: note: {clean(msg)}", file=sys.stderr)


def say(msg: str) -> None:
    """Progress text on stderr."""
    print(clean(msg), file=sys.stderr, flush=True)


def version() -> str:
    v = getattr(ucudnn, "__version__", None)
    if v:
        return str(v)
    try:
        from importlib.metadata import PackageNotFoundError, version as _v
        return _v("ucudnn")
    except (ImportError, PackageNotFoundError):
        return "unknown (not installed)"


# ---------------------------------------------------------------------------------------------
# option values
# ---------------------------------------------------------------------------------------------

_CANONICAL_SIZE = re.compile(r"^\s*[0-9]+(\.[0-9]+)?\s*[KMGT]iB\s*$|^\s*unlimited\s*$")


def size(text: Optional[str], field: str, echo: bool = True) -> Optional[int]:
    """A byte size (Note [Size units] in :mod:`ucudnn.vocab`); a spelling other than
    ``NKiB``/``NMiB``/``NGiB`` is echoed once as a note with the value it was read as."""
    if text is None:
        return None
    value = parse_size(text, field)
    if echo and not _CANONICAL_SIZE.match(str(text)):
        shown = re.sub(r"([0-9])([KMGT]iB)$", r"\1 \2", format_size(value))
        note(f"{field} {text} = {shown} ({value} B)")
    return value


def sizes(text: Optional[str], field: str = "--sizes") -> Optional[List[int]]:
    if text is None:
        return None
    out = []
    for part in str(text).split(","):
        try:
            v = int(part.strip())
        except ValueError:
            v = 0
        if v < 1:
            raise CliError(f"{field}: expected comma-separated positive integers, got "
                           f"{_short(repr(text))}")
        out.append(v)
    return sorted(set(out))


def policy(text: str, field: str = "--policy") -> str:
    try:
        return normalise_policy(text)
    except PlanError:
        raise CliError(f"{field}: unknown policy {text!r} (expected one of "
                       f"{', '.join(POLICIES)})") from None


def math(text: str, field: str = "--math") -> str:
    if text not in MATH_MODES:
        raise CliError(f"{field}: unknown math mode {text!r} (expected one of "
                       f"{', '.join(MATH_MODES)})")
    return text


def dtype(text: str, field: str = "--dtype") -> str:
    if text not in DTYPES:
        raise CliError(f"{field}: unknown dtype {text!r} (expected one of {', '.join(DTYPES)})")
    return text


def ops(text: str) -> List[str]:
    chosen = [o.strip() for o in text.split(",") if o.strip()]
    bad = [o for o in chosen if o not in OPS]
    if bad or not chosen:
        raise CliError(f"--ops: unknown op(s) {bad or [text]} (expected a comma-separated "
                       f"subset of {','.join(OPS)})")
    return [o for o in OPS if o in chosen]


#: the largest count an option takes (``--repeats``, ``--iterations``, ``--cudnn-version``):
#: caffe.proto's int32 fields, cuDNN's ``int`` arguments
INT32_MAX = 2**31 - 1
#: the largest mini-batch: 2^20 samples (a per-GPU batch beyond it does not fit in a GPU's
#: memory for any net of this kind, and policy ``all`` lists every size up to it)
MAX_BATCH = 2**20
#: the most identical layers a layer list's row may count: the plan holds one kernel plan per
#: layer, and the deepest Caffe nets have about a thousand layers
MAX_COUNT = 2**10


def positive(value: Optional[int], field: str, hi: int = INT32_MAX) -> Optional[int]:
    """``value`` if it is None or an integer from 1 to ``hi``; a :class:`CliError` otherwise."""
    if value is not None and value < 1:
        raise CliError(f"{field}: must be a positive integer, got {value}")
    if value is not None and value > hi:
        raise CliError(f"{field}: must be at most {hi}, got {_short(value)}")
    return value


def cudnn_version(value: Optional[int], field: str = "--cudnn-version") -> Optional[int]:
    """A cuDNN version as ``cudnnGetVersion`` gives it (91400), or None."""
    if value is not None and not 0 <= value <= INT32_MAX:
        raise CliError(f"{field}: expected a cuDNN version such as 91400 (0 to {INT32_MAX}), "
                       f"got {_short(value)}")
    return value


def _short(value) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} digits)"


def split_list(text: str) -> List[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


# ---------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------

def text_file(path, option: str) -> str:
    """Check that ``path`` is a readable UTF-8 text file, within the size and line bounds of
    Note [Reading a named file] in ucudnn/files.py; the error names option and file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CliError(f"{option}: cannot read {path!r}: no such file")
    if os.path.isdir(path):
        raise CliError(f"{option}: {path!r} is a folder, not a file")
    try:
        return read_text(path, what="a text file")      # ucudnn.files.read_text
    except InputError as e:
        raise CliError(f"{option}: {e}; is it the right file?") from None


def _reason(e: OSError, path: str) -> str:
    return f"{path}: {e.strerror or e}"


def output_file(path, option: str, *, inputs: Sequence = (), force: bool = False) -> str:
    """Check, before the work, that ``path`` may be written (Note [Writing a named file] in
    ucudnn/files.py): its folder exists; it is not a FIFO, a device, a socket or a folder
    (never, ``force`` or not); an existing file, or one of ``inputs``, only with ``force``.
    :func:`write_output` checks again when it writes."""
    path = os.fspath(path)
    if not path:
        raise CliError(f"{option}: an empty file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CliError(f"{option}: the folder {folder} does not exist (create it first)")
    if os.path.isdir(path):
        raise CliError(f"{option}: {path!r} is a folder, not a file")
    try:
        check_target(path, replace=True)
    except OSError as e:
        raise CliError(f"{option}: {_reason(e, path)}") from None
    for src in inputs:
        if src is not None and os.path.exists(path) and os.path.exists(src) and \
                os.path.samefile(path, src):
            if not force:
                raise CliError(f"{option}: {path} is the input file; writing it would "
                               "overwrite the input (pass --force to do so)")
    if os.path.lexists(path) and not force:
        raise CliError(f"{option}: {path} exists; pass --force to overwrite it")
    return path


def write_output(path, option: str, text: Optional[str] = None, *,
                 fill: Optional[Callable[[str], None]] = None, force: bool = False) -> None:
    """Write the output file ``path`` of ``option``: ``text``, or what ``fill(tmp)`` writes
    into a temporary file (:func:`ucudnn.files.write_file`: atomic, flushed to the disk, never
    over anything but a regular file, over one only with ``force``). An OS error (a full disk,
    a folder this user may not write) is one :class:`CliError` naming ``path``; nothing is
    left behind."""
    if fill is None:
        def fill(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                f.write(text)
    try:
        write_file(path, fill, replace=force, fsync=True)
    except FileExistsError:
        raise CliError(f"{option}: {os.fspath(path)} exists; pass --force to overwrite "
                       "it") from None
    except OSError as e:
        raise CliError(f"{option}: {_reason(e, os.fspath(path))}") from None


# ---------------------------------------------------------------------------------------------
# layers
# ---------------------------------------------------------------------------------------------

def add_layer_source(p: argparse.ArgumentParser, default_net: bool) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--net", choices=None, metavar="NET",
                   help="a network of the shipped benchmark data: alexnet, resnet18" +
                   (" (default: alexnet)" if default_net else ""))
    g.add_argument("--layers", metavar="CSV", help="a layer list (name,N,C,H,W,K,R,S,pad,stride"
                   ",dilation,groups,count,bwd_data)")
    g.add_argument("--prototxt", metavar="FILE", help="a Caffe network definition: every "
                   "Convolution layer of --phase")
    p.add_argument("--phase", default="TRAIN", choices=("TRAIN", "TEST"),
                   help="phase of --prototxt")
    p.add_argument("--input-shape", metavar="BLOB=N,C,H,W", action="append",
                   help="the shape of a blob of --prototxt that the file does not settle (a "
                   "data layer reading files, a Python layer); repeatable")
    p.add_argument("--layer-shape", metavar="TYPE=same[:K]", action="append",
                   help="a layer type of a Caffe fork (unknown to BVLC Caffe) whose tops have "
                   "the shape of its bottom K (default 0), e.g. SENet's Axpy=same:1; "
                   "repeatable")
    p.add_argument("--caffe-proto", metavar="PATH", help="the caffe.proto of the Caffe fork "
                   "--prototxt is written for (default: $UCUDNN_CAFFE_PROTO, else ucudnn's own "
                   "schema of BVLC Caffe's nets); fields the fork lacks read as BVLC's "
                   "defaults")
    p.add_argument("--batch", type=int, metavar="N",
                   help="replace the mini-batch size (default: the network's)")


def load_layers(args, default_net: Optional[str]):
    """(layers, label, net name or None) from --net, --layers or --prototxt; for --prototxt
    also ``args.prototxt_net`` (:class:`ucudnn.caffe.prototxt.PrototxtNet`, with the file's
    ucudnn_param)."""
    batch = positive(args.batch, "--batch", MAX_BATCH)
    given = {}
    for text in args.input_shape or ():
        blob, shape = parse_input_shape(text)
        if _math.prod(shape) > INT32_MAX:
            raise CliError(f"--input-shape: {_short(clean(text))}: more than {INT32_MAX} "
                           "elements; Caffe refuses such a blob (blob size exceeds INT_MAX)")
        given[blob] = shape
    if given and not args.prototxt:
        raise CliError("--input-shape: only with --prototxt")
    layer_shapes = dict(parse_layer_shape(t) for t in getattr(args, "layer_shape", None) or ())
    if layer_shapes and not args.prototxt:
        raise CliError("--layer-shape: only with --prototxt")
    caffe_proto = getattr(args, "caffe_proto", None)
    if caffe_proto and not args.prototxt:
        raise CliError("--caffe-proto: only with --prototxt")
    if args.prototxt:
        text = text_file(args.prototxt, "--prototxt")
        args.prototxt_net = load_prototxt(args.prototxt, phase=args.phase, batch=batch,
                                          caffe_proto=caffe_proto, given=given,
                                          layer_shapes=layer_shapes, text=text)
        return _bounded(list(args.prototxt_net.layers), "--prototxt",
                        args.prototxt), args.prototxt, None
    if args.layers:
        text = text_file(args.layers, "--layers")
        layers, label, net = read_layers(args.layers, text), args.layers, None
    else:
        net = args.net or default_net
        if net is None:
            raise CliError("one of --net, --layers or --prototxt is required")
        if net not in shipped.nets():
            raise CliError(f"--net: unknown network {net!r} (expected one of "
                           f"{', '.join(shipped.nets())})")
        layers, label = shipped.layers(net), net
    if batch is not None:
        layers = [dataclasses.replace(l, n=batch) for l in layers]
    return _bounded(layers, "--layers" if args.layers else "--net", label), label, net


def _bounded(layers, option: str, path: str):
    """``layers``, if no mini-batch is larger than :data:`MAX_BATCH`, no row counts more than
    :data:`MAX_COUNT` layers and no tensor of a layer (input, output, filter) holds more than
    INT_MAX elements, which Caffe's ``Blob::Reshape`` refuses ("blob size exceeds
    INT_MAX")."""
    for l in layers:
        where = f"{option}: {path}: layer {clean(l.name)!r}"
        if l.n > MAX_BATCH:
            raise CliError(f"{where}: a mini-batch of {_short(l.n)}, more than the "
                           f"{MAX_BATCH} planned at most (--batch N sets another)")
        if l.count > MAX_COUNT:
            raise CliError(f"{where}: field 'count': {_short(l.count)} identical layers, more "
                           f"than the {MAX_COUNT} planned at most")
        for what, count in (("input", l.n * l.c * prod(l.spatial)),
                            ("output", l.n * l.k * prod(l.out_spatial)),
                            ("filter", l.k * (l.c // l.groups) * prod(l.kernel))):
            if count > INT32_MAX:
                raise CliError(f"{where}: its {what} would hold {_short(count)} elements; "
                               f"Caffe refuses a blob of more than {INT32_MAX} (blob size "
                               "exceeds INT_MAX)")
    return layers


def need_layers(args, what: str = "") -> None:
    if not (args.net or args.layers or args.prototxt):
        raise CliError("one of --net, --layers or --prototxt is required" + what)
