"""``ucudnn config``: compile and link flags for C/C++ hosts of the C API."""
from __future__ import annotations

from .. import config
from .common import CliError

HELP = "compile and link flags for C/C++ hosts of the C API"


def add_parser(sub) -> None:
    s = sub.add_parser("config", help=HELP, description=HELP + ".")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--cflags", action="store_true", help="-I flags (ucudnn.h, cuDNN, Python)")
    g.add_argument("--libs", action="store_true", help="link flags (cuDNN, CUDA runtime, Python)")
    g.add_argument("--include", action="store_true", help="the folder holding ucudnn.h")
    s.set_defaults(func=run)


def run(args) -> int:
    try:
        out = (config.get_include() if args.include else
               " ".join(config.cflags() if args.cflags else config.libs()))
    except FileNotFoundError as e:
        raise CliError(f"config: {e}") from None
    print(out)
    return 0
