"""scripts/cold_planning.py with the graph family's engine configs per size set to
``UCUDNN_PROBE_GRAPH_CONFIGS`` instead of the core's GRAPH_CONFIGS_DEFAULT, for a side-by-side
run with the script as it is, in one call. Arguments: cold_planning.py's."""
import os
import sys
from pathlib import Path

import ucudnn._core as core

core.GRAPH_CONFIGS_DEFAULT = int(os.environ["UCUDNN_PROBE_GRAPH_CONFIGS"])
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "scripts"))
import cold_planning  # noqa: E402

sys.exit(cold_planning.main(sys.argv[1:]))
