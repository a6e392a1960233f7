"""The C API from C++: a host program that embeds Python, as Caffe does.

Compiling and linking it needs only the toolkit (CI checks that); running it needs a GPU.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HOST_SRC = Path(__file__).parent / "cpp" / "embed_host.cpp"


def _config():
    from ucudnn import config     # the installed package, with its compiled core
    return config.cflags(), config.libs()


@pytest.fixture(scope="module")
def embed_host(tmp_path_factory):
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        pytest.skip("no C++ compiler")
    cflags, libs = _config()
    exe = tmp_path_factory.mktemp("embed") / "embed_host"
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", str(HOST_SRC), "-o", str(exe), *cflags, *libs,
           "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"compile failed:\n{' '.join(cmd)}\n{proc.stderr}"
    return exe


def test_embed_host_compiles_and_links(embed_host):
    assert embed_host.exists() and os.access(embed_host, os.X_OK)


@pytest.mark.gpu
def test_embed_host_runs_two_threads(embed_host, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    env = dict(os.environ)
    # the embedded interpreter must find the same ucudnn as this test process
    import ucudnn
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(ucudnn.__file__).parent.parent)] + [p for p in sys.path if p])
    proc = subprocess.run([str(embed_host), str(tmp_path / "cache.sqlite")], capture_output=True,
                          text=True, env=env, timeout=600)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 of 2 threads matched" in proc.stdout
    assert proc.stdout.count("bad input rejected") == 2
    assert "pad_h" in proc.stdout
