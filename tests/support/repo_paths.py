"""Where the tests find the repository's files (the test folders lie at different depths)."""
import importlib.util
import sys
from pathlib import Path

import pytest

#: the repository's root
REPO = Path(__file__).resolve().parents[2]
#: data recorded for the tests (tests/data)
DATA = REPO / "tests" / "data"
#: the H200 tables of every micro-batch size 1..N (AlexNet, ResNet-18, CIFAR-10)
ALL_SIZES = DATA / "h200_all_sizes"
#: `caffe time` logs written on the GPU host
LOGS = DATA / "caffe_logs"
#: the benchmark data shipped with the package
SHIPPED = REPO / "ucudnn" / "data" / "h200"
#: the nets shipped with the package
NETS = REPO / "prototxt"
#: the project's scripts (run as programs; the tests load them as modules)
SCRIPTS = REPO / "scripts"


def load_script(name: str):
    """scripts/NAME.py as a module, loaded afresh (registered under NAME: its dataclasses
    look their module up)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _shared_data() -> Path:
    """The project's shared H200 tables (shared/data/h200-cudnn9.14 beside a checkout or
    above a worktree), where there are some."""
    for root in (REPO, *REPO.parents):
        d = root / "shared" / "data" / "h200-cudnn9.14"
        if d.is_dir():
            return d
    return REPO.parent / "shared" / "data" / "h200-cudnn9.14"


SHARED = _shared_data()
#: tests that read the shared tables skip where there are none
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")
