"""Tests for scripts/caffe_series.py, the patch series as a git branch.

* On a small made-up tree: `apply` makes one commit per patch, `export` gives the patches
  back byte for byte, and `check` counts the lines a patch removes that an earlier one
  added (and exits 1).
* On the pinned Caffe tree (the source test_series.py gets, skipping where it cannot be
  had): caffe_patch/ is its own export; the series rewrites none of its lines; and the
  final tree is the recorded one (data/final_tree.sha256: sha256 of every file the series
  touches).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO

TOOL = REPO / "scripts" / "caffe_series.py"
PATCH_DIR = REPO / "caffe_patch"
MANIFEST = Path(__file__).parent / "data" / "final_tree.sha256"


def _tool(*args, check=True):
    res = subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                         text=True, timeout=600)
    if check:
        assert res.returncode == 0, res.stderr + res.stdout
    return res


def _patch_files(d):
    return {p.name: p.read_bytes() for p in sorted(Path(d).glob("[0-9][0-9][0-9][0-9]-*.patch"))}


def _git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def toy(tmp_path):
    """A pristine tree of one file and two patches, the second of which removes one line the
    first added and one line of the pristine tree."""
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    (pristine / "CMakeLists.txt").write_text("project(toy)\n")
    (pristine / "a.cpp").write_text("one\ntwo\nthree\n")
    edit = tmp_path / "edit"
    subprocess.run(["cp", "-a", str(pristine), str(edit)], check=True)
    _git(edit, "init", "-q")
    _git(edit, "add", "-A")
    _git(edit, "commit", "-q", "-m", "base")
    (edit / "a.cpp").write_text("one\nadded A\nadded B\ntwo\nthree\n")
    _git(edit, "commit", "-q", "-am", "first: two lines")
    (edit / "a.cpp").write_text("added A\ntwo\nthree\nafter\n")
    _git(edit, "commit", "-q", "-am", "second: one of them and the pristine one go")
    patches = tmp_path / "patches"
    _git(edit, "format-patch", "-q", "-o", str(patches), "HEAD~2..HEAD")
    return pristine, patches, tmp_path / "repo"


def test_apply_export_round_trip_and_check(toy, tmp_path):
    pristine, patches, repo = toy
    _tool("--pristine", pristine, "--patches", patches, "--repo", repo, "apply")
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert log == ["second: one of them and the pristine one go", "first: two lines",
                   "BVLC Caffe 99bd997 (pristine)"], log
    assert (repo / "a.cpp").read_text() == "added A\ntwo\nthree\nafter\n"

    out = tmp_path / "out"
    out.mkdir()
    _tool("--repo", repo, "--patches", out, "export")
    first = _patch_files(out)
    assert list(first) == ["0001-first-two-lines.patch",
                           "0002-second-one-of-them-and-the-pristine-one-go.patch"], list(first)
    # the exported series applies to the same tree and exports to the same bytes
    _tool("--pristine", pristine, "--patches", out, "--repo", tmp_path / "repo2", "apply")
    again = tmp_path / "again"
    again.mkdir()
    _tool("--repo", tmp_path / "repo2", "--patches", again, "export")
    assert _patch_files(again) == first

    res = _tool("--repo", repo, "check", check=False)
    assert res.returncode == 1, res.stdout
    assert "0002 second-one-of-them-and-the-pristine-one-go removes 1 line(s) of 0001 " \
           "first-two-lines" in res.stdout, res.stdout
    assert "1 line(s) of the series removed by a later patch of it" in res.stdout


@pytest.fixture(scope="module")
def series_repo(patched_caffe_source, tmp_path_factory):
    """caffe_patch/ applied by `caffe_series.py apply` to the pristine tree."""
    repo = tmp_path_factory.mktemp("series") / "repo"
    _tool("--pristine", patched_caffe_source.parent / "pristine", "--repo", repo, "apply")
    return repo


def test_committed_series_is_its_export(series_repo, tmp_path):
    """caffe_patch/ is what `caffe_series.py export` writes: editing the series through its
    branch and exporting it changes the patches only where their content changes."""
    _tool("--repo", series_repo, "--patches", tmp_path, "export")
    exported, committed = _patch_files(tmp_path), _patch_files(PATCH_DIR)
    assert list(exported) == list(committed)
    differ = [name for name in committed if exported[name] != committed[name]]
    assert not differ, differ


def test_final_tree_is_the_recorded_one(series_repo, patched_caffe_source):
    """The series gives the recorded final tree: every file it touches has the recorded
    sha256, and it touches no other file. build_caffe.sh's tree (applied with patch) is the
    same."""
    got = _tool("--repo", series_repo, "manifest").stdout
    assert got == MANIFEST.read_text()
    for line in got.splitlines():
        _, path = line.split("  ", 1)
        assert (patched_caffe_source / path).read_bytes() == (series_repo / path).read_bytes()


def test_series_rewrites_none_of_its_lines(series_repo):
    """Each patch adds its feature in its final state: no patch removes a line an earlier
    one added. Where a later feature reaches into μ-cuDNN's code (NHWC's layout in
    UcudnnConvolution::Shape, the default stream's handle in CallHandle()), μ-cuDNN's patch
    leaves room for it and the later patch only adds lines."""
    res = _tool("--repo", series_repo, "check", "--lines", check=False)
    assert res.stdout == "0 line(s) of the series removed by a later patch of it\n", res.stdout
    assert res.returncode == 0
