"""The patched Caffe's gtest binary, run from the GPU tier."""
import subprocess

import pytest


def run_gtests(tools: dict, gtest_filter: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """``build/test/test.testbin`` of the Caffe that ``tools`` describes (the ``caffe`` and
    ``caffe_tools`` fixtures: its ``build`` folder and ``env``) with ``gtest_filter`` on GPU 0,
    output and errors together as text; skips where the tests were not built."""
    exe = tools["build"] / "test" / "test.testbin"
    if not exe.is_file():
        pytest.skip(f"{exe} not built (build_caffe.sh without --no-tests)")
    return subprocess.run([str(exe), f"--gtest_filter={gtest_filter}", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=tools["env"], timeout=timeout)
