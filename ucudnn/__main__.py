"""``python -m ucudnn``: the command line interface (see :mod:`ucudnn.cli`)."""
from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
