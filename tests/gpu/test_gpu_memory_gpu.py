"""NVML watching a child process on a GPU (ucudnn/experiments/gpu_memory.py): a child that
holds a buffer has a whole-process peak at least the buffer's size and the GPU's state logged,
and a child killed at its timeout keeps the peak it reached before the kill.

Needs NVML (``pip install '.[gpu]'``: nvidia-ml-py) and PyTorch for the child's buffer.
"""
import sys

import pytest

from ucudnn.experiments.gpu_memory import run_watched

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="the child holds its buffer through PyTorch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)

BUFFER = 512 << 20
#: holds BUFFER bytes on the GPU, says so, and sleeps for argv[1] seconds
HOLDS = f"""
import sys, time, torch
x = torch.empty({BUFFER}, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("holding", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _check(run):
    assert run.nvml_error is None, run.nvml_error
    assert run.peak_gpu_memory_bytes >= BUFFER, run.log_text()
    state = run.gpu_state
    assert state["samples"] >= 1 and state["start"]["sm_clock_mhz"] > 0
    assert state["sm_clock_min_mhz"] <= state["end"]["sm_clock_mhz"]
    assert state["temperature_max_c"] > 0


def test_peak_and_state_of_a_child_holding_gpu_memory(tmp_path):
    run = run_watched([sys.executable, "-c", HOLDS, "1"], timeout=300,
                      log_path=tmp_path / "child.log", interval=0.005, states=True)
    assert (run.rc, run.timed_out) == (0, False), run.log_text()
    _check(run)


def test_peak_kept_when_the_child_is_killed_at_its_timeout(tmp_path):
    run = run_watched([sys.executable, "-c", HOLDS, "600"], timeout=45,
                      log_path=tmp_path / "child.log", interval=0.005, states=True)
    assert run.timed_out and "holding" in run.log_text()
    _check(run)
