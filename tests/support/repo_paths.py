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


#: the project's benchmark tables of the H200 (cuDNN 9.14; AlexNet and ResNet-18 at powers of two)
SHARED = DATA / "h200-cudnn9.14"
#: tests that read the shared tables skip where the checkout lacks them
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"test data not found at {SHARED}")
