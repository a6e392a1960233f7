"""setup.py's search for cuDNN (Note [Which cuDNN]): every installation found in the order of the
roots, and its version, on fake installations laid out as the toolkit, the system and the
nvidia-cudnn wheel lay them."""
import importlib.util
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[1] / "setup.py"


@pytest.fixture(scope="module")
def setup_py():
    pytest.importorskip("setuptools")
    spec = importlib.util.spec_from_file_location("_ucudnn_setup", SETUP)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)        # defines the helpers; setup() runs only as __main__
    return mod


def _install(root, version, header="cudnn_version.h", lib="lib", libname="libcudnn.so.9"):
    major, minor, patch = version
    (root / "include").mkdir(parents=True)
    (root / "include" / "cudnn.h").write_text('#include "cudnn_version.h"\n'
                                              if header == "cudnn_version.h" else "")
    (root / "include" / header).write_text(
        f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n"
        f"#define CUDNN_PATCHLEVEL {patch}\n")
    (root / lib).mkdir()
    (root / lib / libname).write_bytes(b"")
    return str(root)


def test_installations_are_found_in_the_order_of_the_roots_with_their_versions(setup_py,
                                                                             tmp_path):
    system = _install(tmp_path / "usr", (9, 14, 0), lib="lib64")
    wheel = _install(tmp_path / "nvidia" / "cudnn", (9, 19, 0))
    found = setup_py._find_all("cudnn.h", ("libcudnn.so.9", "libcudnn.so"), [system, wheel])
    assert found == [(f"{system}/include", f"{system}/lib64", "libcudnn.so.9"),
                     (f"{wheel}/include", f"{wheel}/lib", "libcudnn.so.9")]
    assert [setup_py.cudnn_version(f[0]) for f in found] == [(9, 14, 0), (9, 19, 0)]
    # CUDNN_ROOT comes first: naming the wheel's folder puts it before the system's
    found = setup_py._find_all("cudnn.h", ("libcudnn.so.9",), [wheel, system, wheel])
    assert setup_py._find("cudnn.h", ("libcudnn.so.9",), [wheel, system]) == found[0]
    assert [f[0] for f in found] == [f"{wheel}/include", f"{system}/include"]


def test_versions_are_read_from_old_headers_and_missing_ones_are_zero(setup_py, tmp_path):
    toolkit = _install(tmp_path / "cuda", (8, 9, 7), header="cudnn.h", libname="libcudnn.so")
    assert setup_py.cudnn_version(f"{toolkit}/include") == (8, 9, 7)
    (tmp_path / "empty").mkdir()
    assert setup_py.cudnn_version(str(tmp_path / "empty")) == (0, 0, 0)
    assert setup_py._find("cudnn.h", ("libcudnn.so.9",), [str(tmp_path / "empty")]) is None


def test_a_root_without_a_library_is_not_a_cudnn(setup_py, tmp_path):
    headers_only = tmp_path / "headers"
    _install(headers_only, (9, 20, 0))
    (headers_only / "lib" / "libcudnn.so.9").unlink()
    wheel = _install(tmp_path / "wheel", (9, 19, 0))
    found = setup_py._find_all("cudnn.h", ("libcudnn.so.9",), [str(headers_only), wheel])
    assert found == [(f"{wheel}/include", f"{wheel}/lib", "libcudnn.so.9")]


def test_the_newest_is_chosen_unless_cudnn_root_names_one(setup_py, tmp_path):
    system = _install(tmp_path / "usr", (9, 14, 0), lib="lib64")
    wheel = _install(tmp_path / "nvidia" / "cudnn", (9, 19, 0))
    same = _install(tmp_path / "toolkit", (9, 19, 0))
    libs = ("libcudnn.so.9",)
    found = setup_py._find_all("cudnn.h", libs, [system, same, wheel])
    assert setup_py.choose_cudnn(found)[0] == f"{same}/include"       # newest; first on a tie
    named = setup_py._find_all("cudnn.h", libs, [system])
    assert setup_py.choose_cudnn(found, named)[0] == f"{system}/include"
    assert setup_py.choose_cudnn([]) is None
