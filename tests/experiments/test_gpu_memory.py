"""A child process watched (ucudnn/experiments/gpu_memory.py) on a machine without a GPU: real
child interpreters that exit, write, read no stdin, outlive their timeout or cannot start; NVML's
absence said in one line (nvml.py); the GPU's states of a process's samples. The GPU side,
NVML measuring a child that holds GPU memory, is tests/gpu/test_gpu_memory_gpu.py."""
import builtins
import os
import signal
import sys

import pytest

from ucudnn.experiments import nvml
from ucudnn.experiments.caffe_run import run_caffe_time
from ucudnn.experiments.gpu_memory import PeakGpuMemory, run_watched

#: a child that says what it was given and exits with status 3
TALKS = r"""
import os, sys
print("env", os.environ["WATCH_X"], "stdin", repr(sys.stdin.read()), flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.stdout.buffer.write(b"not utf-8: \xff\n")
sys.exit(3)
"""


@pytest.fixture
def no_pynvml(monkeypatch):
    real = builtins.__import__

    def imp(name, *a, **k):
        if name == "pynvml":
            raise ImportError("no pynvml here")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", imp)


def _nvml_here() -> bool:
    try:
        nvml.load().nvmlShutdown()
    except nvml.NvmlMissing:
        return False
    return True


def test_exit_status_output_and_environment(tmp_path):
    log = tmp_path / "new" / "folder" / "child.log"
    run = run_watched([sys.executable, "-c", TALKS], timeout=120, log_path=log,
                      env=dict(os.environ, WATCH_X="42"))
    assert (run.rc, run.timed_out, run.log_path) == (3, False, log)
    assert run.pid not in (0, os.getpid()) and 0 < run.wall_s < 120
    text = run.log_text()
    assert "env 42 stdin ''" in text and "to stderr" in text and "not utf-8: \ufffd" in text
    # a process on no GPU: no peak; NVML's absence said, or nothing to say where it runs
    assert run.peak_gpu_memory_bytes is None and run.gpu_state is None
    if _nvml_here():
        assert run.nvml_error is None
    else:
        assert run.nvml_error.startswith("NVML unavailable (")


def test_timeout_kills_the_process(tmp_path):
    child = "import time; print('started', flush=True); time.sleep(120)"
    run = run_watched([sys.executable, "-c", child], timeout=3, log_path=tmp_path / "c.log",
                      states=True)
    assert run.timed_out and run.rc == -signal.SIGKILL
    assert 3 <= run.wall_s < 60
    assert run.log_text() == "started\n"


def test_without_nvml_the_run_says_why(no_pynvml, tmp_path):
    with pytest.raises(nvml.NvmlMissing) as e:
        nvml.load()
    line = str(e.value)
    run = run_watched([sys.executable, "-c", "pass"], timeout=120, log_path=tmp_path / "c.log",
                      interval=0.005, states=True)
    assert (run.rc, run.timed_out) == (0, False)
    assert run.nvml_error == line and run.peak_gpu_memory_bytes is None
    assert run.gpu_state is None
    # memory not watched: NVML is not asked, so there is nothing to say
    quiet = run_watched([sys.executable, "-c", "pass"], timeout=120,
                        log_path=tmp_path / "q.log", memory=False)
    assert quiet.rc == 0 and quiet.nvml_error is None and quiet.peak_gpu_memory_bytes is None


def test_a_command_that_cannot_start_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        run_watched([str(tmp_path / "no-such-program")], timeout=10,
                    log_path=tmp_path / "c.log")


def test_caffe_time_that_outlives_its_timeout_is_a_failed_point(tmp_path):
    """The stand-in writes a line and sleeps: the point fails, naming the timeout, with what the
    process wrote before it was killed."""
    exe = tmp_path / "caffe"
    exe.write_text("#!/bin/sh\necho 'I1206 caffe.cpp] Use GPU with device ID 0'\nexec sleep 120\n")
    exe.chmod(0o755)
    log = tmp_path / "logs" / "p.log"
    rec = run_caffe_time(str(exe), tmp_path / "net.prototxt", 5, 0, log, timeout=2,
                         gpu_states=True)
    assert rec["status"] == "failed" and rec["error"] == "caffe time: timed out after 2 s"
    assert "Use GPU with device ID 0" in rec["log_tail"] and rec["log"] == "p.log"
    assert log.read_text() == rec["log_tail"]
    assert 2 <= rec["wall_s"] < 60 and rec["peak_gpu_memory_bytes"] is None
    assert rec["gpu_state"] is None
    assert ("peak_gpu_memory_error" in rec) != _nvml_here()


# -- NVML --------------------------------------------------------------------------------------

def test_without_nvml_one_line_says_why(no_pynvml):
    with pytest.raises(nvml.NvmlMissing) as e:
        nvml.load()
    line = str(e.value)
    assert "\n" not in line and "no pynvml here" in line and "nvidia-ml-py" in line
    assert nvml.versions() == {"error": line}
    with PeakGpuMemory(states=True) as m:
        m.watch(1)
    assert m.error == line and m.peak_bytes is None and m.states.record() is None


def test_state_log():
    log = nvml.StateLog()
    assert log.record() is None
    states = [{"sm_clock_mhz": 1980, "power_w": 300.0, "temperature_c": 40},
              {"sm_clock_mhz": 1755, "power_w": 650.5, "temperature_c": 61},
              {"sm_clock_mhz": None, "power_w": 500.0, "temperature_c": 58}]
    for s in states:
        log.add(s)
    rec = log.record()
    assert rec["start"] == states[0] and rec["end"] == states[-1] and rec["samples"] == 3
    assert rec["sm_clock_min_mhz"] == 1755 and rec["power_max_w"] == 650.5
    assert rec["temperature_max_c"] == 61
