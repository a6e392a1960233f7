"""The test tiers of tests/conftest.py (Note [Test tiers]), run on a small suite of their own:
GPU tests that skip fail under --require-gpu; a test that needs more GPUs than are visible
skips with "needs N GPUs (found M)", is listed apart and does not fail unless --require-gpus
asks for that many."""
import re

import pytest

from repo_paths import REPO

pytest_plugins = ["pytester"]

SUITE = '''
import pytest

pytestmark = pytest.mark.gpu


def test_one_gpu():
    pytest.skip("no GPU visible")


@pytest.mark.gpus(64)
def test_many_gpus():
    pass
'''


@pytest.fixture
def suite(pytester):
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text())
    pytester.makeini(f"""[pytest]
pythonpath = {REPO / "tests" / "support"}
markers =
    gpu: a GPU test
    gpus(n): needs n GPUs
    caffe_build: builds Caffe
""")
    pytester.makepyfile(test_tier_gpu=SUITE)
    return pytester


def test_without_require_gpu_skips_are_listed(suite):
    r = suite.runpytest_subprocess("-rs")
    r.assert_outcomes(skipped=2)
    out = r.stdout.str()
    assert re.search(r"SKIPPED \[1\] .*: needs 64 GPUs \(found \d+\)$", out, re.M)
    assert "GPU tier NOT run" in out and "1 GPU test(s) skipped: Skipped: no GPU visible" in out
    assert "GPU tests needing more hardware (not run)" in out
    assert re.search(r"test_tier_gpu.py::test_many_gpus: Skipped: needs 64 GPUs \(found \d+\)",
                     out)


def test_require_gpu_fails_one_gpu_skips_and_lists_the_rest(suite):
    r = suite.runpytest_subprocess("--require-gpu")
    r.assert_outcomes(failed=1, skipped=1)
    out = r.stdout.str()
    assert "GPU test skipped under --require-gpu: Skipped: no GPU visible" in out
    assert "GPU tests needing more hardware (not run)" in out
    assert "GPU tier NOT run" not in out


def test_require_gpus_counts_tests_needing_that_many(suite):
    r = suite.runpytest_subprocess("--require-gpus", "64")
    # the 64-GPU test's skip happens at its set-up: reported as an error there
    r.assert_outcomes(failed=1, errors=1)
    out = r.stdout.str()
    assert re.search(r"GPU test skipped under --require-gpus 64: Skipped: needs 64 GPUs "
                     r"\(found \d+\)", out)
    assert "needing more hardware" not in out
    r = suite.runpytest_subprocess("--require-gpus", "2")
    r.assert_outcomes(failed=1, skipped=1)
    assert "GPU tests needing more hardware (not run)" in r.stdout.str()
