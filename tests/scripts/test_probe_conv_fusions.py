"""scripts/probe_conv_fusions.cu without a GPU: it compiles against the cuDNN the core was
built against (Note [Which cuDNN] in setup.py), and bad arguments get a one-line refusal
(exit 2) before any GPU is touched."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from repo_paths import REPO
from ucudnn import config

SOURCE = REPO / "scripts" / "probe_conv_fusions.cu"


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc to build the probe with")
    cfg = config.build_config()
    lib = cfg["cudnn_library"]
    exe = tmp_path_factory.mktemp("probe") / "probe"
    cmd = [nvcc, "-O0", "-std=c++17", "-arch=sm_90", "-o", str(exe), str(SOURCE),
           f"-I{cfg['cudnn_include']}", f"-L{os.path.dirname(lib)}", f"-l:{os.path.basename(lib)}"]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    return exe


@pytest.mark.parametrize("args, said", [
    (["1,2,3"], "a shape is N,C,H,W,K,R,stride, not '1,2,3'"),
    (["8,16,8,8,16,3,1,5"], "a shape is N,C,H,W,K,R,stride"),
    (["8,0,8,8,16,3,1"], "every number is at least 1"),
    (["8,16,8,8,16,3,-1"], "every number is at least 1"),
    (["--dtype", "double"], "--dtype is float or half"),
    (["--builds", "0"], "--builds is at least 1"),
    (["--shape", "8,16,8,8,16,3,1"], "unknown option '--shape'"),
])
def test_bad_arguments_are_refused_in_one_line(probe, args, said):
    got = subprocess.run([str(probe), *args], capture_output=True, text=True, timeout=60)
    assert got.returncode == 2
    assert said in got.stderr and got.stderr.count("\n") == 1
    assert got.stdout == ""
