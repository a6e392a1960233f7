"""The ``ucudnn`` command: device info, benchmarking, planning, the benchmark cache, prototxt
variants, the paper's grid and build flags.

    ucudnn info [--json]
    ucudnn bench (--net NET | --layers CSV | --prototxt FILE) [--policy P | --sizes L] ...
    ucudnn plan [--net NET | --layers CSV | --prototxt FILE] [--table CSV ...] [--cache PATH]
                [--policy P | --sizes L] [--limit SIZE] [--budget SIZE]
                [--optimizer dp|ilp|shared] ...
    ucudnn cache {list,import,export} ...
    ucudnn prototxt IN -o OUT [--policy P] [--limit SIZE] ...
    ucudnn reproduce [--out DIR] [--predict] [--bn-engines caffe,fused] ...
    ucudnn baseline [--out DIR] [--nets resnet18@256,...] [--quick] ...
    ucudnn training [--out DIR] [--nets digits,cifar10] [--settings ...] ...
    ucudnn config (--cflags | --libs | --include)

One module per subcommand: each adds its parser, checks its options, calls the library and
prints.

* :mod:`.info` -- ``ucudnn info``: the GPU, driver, CUDA, cuDNN and the compiled core;
* :mod:`.bench` -- ``ucudnn bench``: benchmark kernels on this GPU into the cache;
* :mod:`.plan` -- ``ucudnn plan``: plan a net (DP, ILP or the shared arena);
* :mod:`.cache` -- ``ucudnn cache``: list, import or export the benchmark cache;
* :mod:`.prototxt` -- ``ucudnn prototxt``: a variant of a Caffe prototxt with ucudnn_param;
* :mod:`.reproduce` -- ``ucudnn reproduce``: the paper's grid with Caffe, or predicted;
* :mod:`.baseline` -- ``ucudnn baseline``: Caffe + ucudnn against every PyTorch mode,
  interleaved;
* :mod:`.training` -- ``ucudnn training``: training curves through pycaffe;
* :mod:`.config` -- ``ucudnn config``: flags for C/C++ hosts of the C API;
* :mod:`.common` -- what the subcommands share: the parser, option checks, layer loading;
* :mod:`.options` -- the plan settings on the command line, one validation for ``plan`` and
  ``prototxt``.

Where benchmark data comes from is :mod:`ucudnn.measure.sources`. Imports every layer below
(:mod:`ucudnn.experiments`, :mod:`ucudnn.caffe`, :mod:`ucudnn.measure`, :mod:`ucudnn.plan`,
:mod:`ucudnn.vocab`, :mod:`ucudnn.paths`, :mod:`ucudnn.config`); never imported by them: only
:mod:`ucudnn.__main__` imports it (Note [Layers of the package] in :mod:`ucudnn`).

Errors in the input (:class:`ucudnn.vocab.InputError`, and OSError for files) are reported as
one line ``ucudnn: error: <field>: <what>`` on stderr with exit status 2; notes go to stderr as
``ucudnn: note: ...``. Any other exception is a bug: ``ucudnn: internal error: ...`` with the
traceback, exit status 1.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import traceback
from typing import List, Optional, Sequence

from ..caffe.prototxt import PrototxtError
from ..measure.cache import CacheError
from ..plan.layers import LayerError
from ..vocab import InputError, PlanError
from . import baseline, bench, cache, config, info, plan, prototxt, reproduce, training
from .common import PROG, CliError, Parser, clean, version

__all__ = ["main", "build_parser", "CliError"]

COMMANDS = (info, bench, plan, cache, prototxt, reproduce, baseline, training, config)
#: options taking a value that may look negative (``--limit -5MiB``): joined as ``--limit=-5MiB``
#: so that the value's own check reports it, not argparse's "expected one argument"
_VALUE_OPTIONS = ("--limit", "--budget", "--workspace-cap", "--limits", "--sizes", "--batch",
                  "--repeats", "--iterations", "--cudnn-version", "--timeout", "--processes",
                  "--warmup")
_NEGATIVE = re.compile(r"^-[0-9.]")


def build_parser() -> Parser:
    p = Parser(prog=PROG, description="μ-cuDNN: micro-batched cuDNN convolutions "
               "(benchmark, plan with DP or ILP, cache).")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for mod in COMMANDS:
        mod.add_parser(sub)
    return p


def _join_negative_values(argv: List[str]) -> List[str]:
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return out + argv[i:]
        if a in _VALUE_OPTIONS and i + 1 < len(argv) and _NEGATIVE.match(argv[i + 1]):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


#: library field names -> the options that set them
_FIELDS = {"workspace_budget": "--budget", "workspace_limit": "--limit", "policy": "--policy",
           "optimizer": "--optimizer", "micro_batch_sizes": "--sizes", "batch": "--batch",
           "phase": "--phase", "limit": "--limit", "budget": "--budget", "sizes": "--sizes",
           "math": "--math", "dtype": "--dtype", "repeats": "--repeats"}


def _message(e: BaseException) -> str:
    """The error text, led by the option it concerns."""
    msg = str(e)
    head, sep, rest = msg.partition(":")
    if sep and head in _FIELDS:
        return _FIELDS[head] + sep + rest
    if msg.startswith("--") or isinstance(e, CliError):
        return msg
    for cls, option in ((LayerError, "--layers"), (PrototxtError, "--prototxt"),
                        (CacheError, "--cache"), (PlanError, "plan")):
        if isinstance(e, cls):
            return f"{option}: {msg}"
    return msg


#: options naming a file, a folder or a net (dest -> option): an empty value is refused
#: rather than read as "not given" (``--prototxt ""`` would plan the default net)
_PATH_OPTIONS = {"net": "--net", "layers": "--layers", "prototxt": "--prototxt",
                 "cache": "--cache", "table": "--table", "caffe_proto": "--caffe-proto",
                 "caffe": "--caffe", "caffe_build": "--caffe-build", "csv": "--csv",
                 "out": "--out", "output": "-o", "file": "FILE", "input": "IN",
                 "pycaffe": "--pycaffe"}


def _no_empty_paths(args) -> None:
    for dest, option in _PATH_OPTIONS.items():
        value = getattr(args, dest, None)
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            raise CliError(f"{option}: an empty name (leave {option} out for its default)")


class _Warnings(logging.Handler):
    """The package's warnings on stderr as Python's last-resort handler writes them (the
    message alone), :func:`clean`: a name a cache or a file holds reaches the terminal
    escaped (Note [Text that reaches the terminal] in ucudnn/cli/common.py)."""

    def __init__(self):
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(clean(record.getMessage()) + "\n")
        except Exception:       # noqa: BLE001 - as logging's own handlers do
            self.handleError(record)


@contextlib.contextmanager
def _warnings_cleaned():
    """Within: :class:`_Warnings` on the ``ucudnn`` logger, unless a host gave it a handler
    (``UCUDNN_LOG``)."""
    log = logging.getLogger("ucudnn")
    if log.handlers:
        yield
        return
    handler = _Warnings()
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``ucudnn`` and ``python -m ucudnn``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(_join_negative_values(argv))
    args.argv = argv[argv.index(args.cmd) + 1:] if args.cmd in argv else argv
    with _warnings_cleaned():
        return _run(args)


def _run(args) -> int:
    try:
        _no_empty_paths(args)
        return args.func(args)
    except BrokenPipeError:         # e.g. `ucudnn plan | head`
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 1
    except OSError as e:
        name = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"{PROG}: error: {clean(name)}{clean(e.strerror or e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:      # noqa: BLE001 - sorted below: bad input, or a bug
        if isinstance(e, InputError):
            print(f"{PROG}: error: {clean(_message(e))}", file=sys.stderr)
            return 2
        print(f"{PROG}: internal error: {type(e).__name__}: {clean(e)} (a bug; please report it "
              "with the command)", file=sys.stderr)
        traceback.print_exc()
        return 1
