"""Fixtures shared by test files."""
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    # pulp 3.0 imports its own test modules, which pytest then rewrites; their invalid escape
    # sequences warn, and filterwarnings=error would turn that into a SyntaxError in whichever
    # test first plans with the ILP. Imported once here, before any test runs.
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", SyntaxWarning)
    try:
        import pulp  # noqa: F401
    except ImportError:
        pass

REPO = Path(__file__).resolve().parents[1]
ORIG = "caffe_1.0.0+git20180821.99bd997.orig.tar.gz"


@pytest.fixture(scope="session")
def patched_caffe_source(tmp_path_factory):
    """Caffe's pinned source with caffe_patch/ applied (scripts/build_caffe.sh --skip-build),
    from an already verified tarball where there is one. Skips where the source cannot be had."""
    if shutil.which("protoc") is None:
        pytest.skip("protoc not installed (.ci/caffe_deps.sh installs protobuf-compiler)")
    prefix = tmp_path_factory.mktemp("caffe")
    args = ["bash", str(REPO / "scripts" / "build_caffe.sh"), "--prefix", str(prefix),
            "--skip-build"]
    for cand in (REPO / "third_party" / "caffe" / "downloads" / ORIG, REPO / ".offline" / ORIG):
        if cand.is_file():
            args += ["--source", str(cand)]
            break
    res = subprocess.run(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=1800)
    if res.returncode != 0 and not (prefix / "pristine" / ".ucudnn-source").exists():
        pytest.skip("could not obtain the pinned Caffe source:\n" + res.stdout[-2000:])
    assert res.returncode == 0, res.stdout[-4000:]
    return prefix / "src"
