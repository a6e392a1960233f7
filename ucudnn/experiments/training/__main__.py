"""``python -m ucudnn.experiments.training --child SPEC.json``: the pycaffe child (:mod:`.child`),
as the runner starts it."""
import sys

from .child import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
