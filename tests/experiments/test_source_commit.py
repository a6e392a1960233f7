"""The commit a study records: git's where the tree is a checkout, else $UCUDNN_COMMIT (a copy
of the tree without .git, as a GPU node gets it), else none."""
import subprocess

import pytest

from repo_paths import REPO
from ucudnn.experiments import reproduce


def test_a_checkout_names_its_head(monkeypatch):
    if not (REPO / ".git").exists():
        pytest.skip("the tests run from a copy without .git")
    monkeypatch.setattr(reproduce, "CHECKOUT", REPO)
    monkeypatch.setenv(reproduce.COMMIT_ENV, "not-this")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert reproduce.source_commit() == head


def test_a_copy_without_git_names_the_environment_s(monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "CHECKOUT", tmp_path)       # no .git here
    monkeypatch.setenv(reproduce.COMMIT_ENV, "9732955")
    assert reproduce.source_commit() == "9732955"
    monkeypatch.delenv(reproduce.COMMIT_ENV)
    assert reproduce.source_commit() is None
    monkeypatch.setattr(reproduce, "CHECKOUT", None)
    monkeypatch.setenv(reproduce.COMMIT_ENV, "")
    assert reproduce.source_commit() is None
