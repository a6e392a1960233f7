"""scripts/node_wheels.py's slim PuLP wheel (Note [Slim PuLP wheel]) on a wheel made here:
the other platforms' CBC and PuLP's tests left out, RECORD without their lines, and pip
installing what is left with the binary still executable. (Its download needs the network
and is not tested here.)"""
import base64
import hashlib
import os
import stat
import subprocess
import sys
import zipfile

import pytest

from repo_paths import load_script

CBC = "pulp/solverdir/cbc/linux/i64/"


@pytest.fixture(scope="module")
def nw():
    return load_script("node_wheels")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _wheel(path, with_linux=True):
    """A PuLP-like wheel: the package, CBC for three platforms, tests, and dist-info."""
    files = {"pulp/__init__.py": b"VALUE = 42\n",
             "pulp/solverdir/__init__.py": b"",
             "pulp/solverdir/cbc/win/i64/cbc.exe": b"MZ" + b"w" * 500,
             "pulp/solverdir/cbc/osx/i64/cbc": b"\xcf\xfa" + b"o" * 500,
             "pulp/tests/__init__.py": b"",
             "pulp/tests/test_pulp.py": b"def test(): pass\n",
             "pulp-9.9.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pulp\nVersion: 9.9\n",
             "pulp-9.9.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
                                         b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    if with_linux:
        files[CBC + "cbc"] = b"#!/bin/sh\necho cbc\n"
        files[CBC + "__init__.py"] = b""
    record = "".join(_record_line(n, d) for n, d in files.items())
    record += "pulp-9.9.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            mode = 0o755 if name.endswith(("cbc", "cbc.exe")) else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            z.writestr(info, data)
        z.writestr("pulp-9.9.dist-info/RECORD", record)
    return path


def test_slim_members_leave_out_other_platforms_and_the_tests(nw):
    names = ["pulp/pulp.py", CBC + "cbc", "pulp/solverdir/cbc/linux/arm64/cbc",
             "pulp/solverdir/cbc/win/i32/cbc.exe", "pulp/tests/test_pulp.py",
             "pulp/solverdir/__init__.py"]
    assert nw.slim_members(names, CBC) == ["pulp/solverdir/cbc/linux/arm64/cbc",
                                           "pulp/solverdir/cbc/win/i32/cbc.exe",
                                           "pulp/tests/test_pulp.py"]


def test_slim_wheel_installs_with_its_platforms_cbc_only(nw, tmp_path):
    src = _wheel(tmp_path / "pulp-9.9-py3-none-any.whl")
    dst = tmp_path / "out" / src.name
    dst.parent.mkdir()
    dropped, size = nw.slim_wheel(src, dst, CBC)
    assert dropped == 4 and size == 502 + 502 + 0 + len(b"def test(): pass\n")
    with zipfile.ZipFile(dst) as z:
        names = set(z.namelist())
        record = z.read("pulp-9.9.dist-info/RECORD").decode()
    assert CBC + "cbc" in names and "pulp/__init__.py" in names
    assert not any(n.startswith(("pulp/solverdir/cbc/win", "pulp/solverdir/cbc/osx",
                                 "pulp/tests")) for n in names)
    assert {l.split(",")[0] for l in record.splitlines()} == names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(dst)], check=True)
    cbc = target / CBC / "cbc"
    assert cbc.is_file() and os.access(cbc, os.X_OK)
    assert not (target / "pulp" / "tests").exists()
    assert not (target / "pulp/solverdir/cbc/win").exists()


def test_slim_wheel_in_place_and_refusing_a_wheel_without_the_platform(nw, tmp_path):
    whl = _wheel(tmp_path / "pulp-9.9-py3-none-any.whl")
    nw.slim_wheel(whl, whl, CBC)
    with zipfile.ZipFile(whl) as z:
        assert z.testzip() is None and CBC + "cbc" in z.namelist()
    (tmp_path / "bare").mkdir()
    bare = _wheel(tmp_path / "bare" / "pulp-9.9-py3-none-any.whl", with_linux=False)
    before = bare.read_bytes()
    with pytest.raises(SystemExit, match="has no pulp/solverdir/cbc/linux/i64/"):
        nw.slim_wheel(bare, bare, CBC)
    assert bare.read_bytes() == before
