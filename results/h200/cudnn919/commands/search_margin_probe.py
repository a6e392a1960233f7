"""scripts/cold_planning.py with the pruned search's margin set to 1: the search as it ran
before Note [Pruned search] settled kernels by the DP's margin (the plans are still made by
the DP with its margin), for a side-by-side run with the script as it is, in one call.
Arguments: cold_planning.py's."""
import sys
from pathlib import Path

import ucudnn.measure.runtime as runtime

runtime.DIVIDE_MARGIN = 1.0         # what runtime passes to pruned_sizes only
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "scripts"))
import cold_planning  # noqa: E402

sys.exit(cold_planning.main(sys.argv[1:]))
