"""A child process run with a timeout while NVML samples its peak GPU memory
(:func:`run_watched`: ``caffe time`` of a reproduce or baseline point, a PyTorch worker of
scripts/time_pytorch.py, a model process of scripts/bench_torch.py; Note [Measured memory]).

Note [Measured memory]
    A point's ``workspace_bytes`` is what its plans say the net holds (plan records); the
    memory the Caffe process really holds on the GPU -- weights, blobs, cuDNN's and cuBLAS's
    handles, the workspace, the CUDA context -- is sampled here: NVML's per-process used
    memory (``nvmlDeviceGetComputeRunningProcesses``, what ``nvidia-smi`` shows), every
    ``interval`` seconds from another thread while the process runs, and the largest sample
    kept. It includes the CUDA context (~500 MiB on an H200) and is the same measure for
    stock Caffe and every ucudnn setting, so settings compare by it. A peak shorter than the
    interval can be missed; Caffe's allocations live for the whole run (blobs, workspace),
    the benchmarking buffers of the core for seconds. NVML comes from ``nvidia-ml-py``
    (``pip install ucudnn[gpu]``); without it, or without a GPU, the peak is None. With
    ``states`` the same samples log the GPU's clock, power and temperature (Note [GPU state
    of a process] in :mod:`.nvml`). Every process that a comparison times is run by
    :func:`run_watched`, so that Caffe's and PyTorch's processes are measured by the same code.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from .nvml import NvmlMissing, StateLog, load, read_state


class PeakGpuMemory:
    """``with PeakGpuMemory(pid) as m: ...``; then ``m.peak_bytes`` (None: NVML unusable or
    the process never showed up on a GPU); with ``states``, ``m.states.record()``, the GPU's
    state over the process's samples (Note [GPU state of a process])."""

    def __init__(self, pid: Optional[int] = None, interval: float = 0.02, states: bool = False):
        self.pid = pid
        self.interval = interval
        self.peak_bytes: Optional[int] = None
        self.error: Optional[str] = None
        self.states: Optional[StateLog] = StateLog() if states else None
        self._handle = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._nvml = None

    def __enter__(self) -> "PeakGpuMemory":
        try:
            self._nvml = load()
        except NvmlMissing as e:             # no measurement, said so
            self.error = str(e)
            return self
        self._thread = threading.Thread(target=self._run, name="gpu-memory", daemon=True)
        self._thread.start()
        return self

    def watch(self, pid: int) -> None:
        """The process to measure (known only once it has been started)."""
        self.pid = pid

    def sample(self) -> Optional[int]:
        """The process's GPU memory now, summed over the GPUs it uses."""
        nv = self._nvml
        if nv is None or self.pid is None:
            return None
        total, seen = 0, False
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid == self.pid and p.usedGpuMemory is not None:
                    total += int(p.usedGpuMemory)
                    if not seen:
                        self._handle = h         # the first GPU it uses: the one states read
                    seen = True
        return total if seen else None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = self.sample()
            except Exception as e:  # noqa: BLE001 - keep what was measured
                self.error = f"NVML: {type(e).__name__}: {e}"
                return
            if now is not None and (self.peak_bytes is None or now > self.peak_bytes):
                self.peak_bytes = now
            if now is not None and self.states is not None:
                self.states.add(read_state(self._nvml, self._handle))
            self._stop.wait(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


@dataclasses.dataclass(frozen=True)
class WatchedRun:
    """What :func:`run_watched` saw of a process: ``rc`` its exit status (a process killed at
    its timeout: the kill's, -9 on POSIX), ``wall_s`` from its start to its exit,
    ``peak_gpu_memory_bytes`` and ``nvml_error`` as :class:`PeakGpuMemory` has them (both None
    where memory was not watched), ``gpu_state`` the GPU's state over its samples (``states``
    only; Note [GPU state of a process]); its output, stdout and stderr together, is in
    ``log_path``."""
    rc: int
    timed_out: bool
    wall_s: float
    pid: int
    log_path: Path
    peak_gpu_memory_bytes: Optional[int]
    nvml_error: Optional[str]
    gpu_state: Optional[Dict[str, Any]]

    def log_text(self) -> str:
        """The process's output (bytes that are not UTF-8 replaced)."""
        return self.log_path.read_bytes().decode("utf-8", errors="replace")


def run_watched(cmd: Sequence[str], *, timeout: Optional[float],
                log_path: Union[str, os.PathLike], env: Optional[Mapping[str, str]] = None,
                interval: float = 0.02, states: bool = False,
                memory: bool = True) -> WatchedRun:
    """Run ``cmd`` (no stdin; stdout and stderr into ``log_path``, its folder made) until it
    exits or ``timeout`` seconds have passed (then it is killed), its whole-process GPU memory
    sampled by NVML every ``interval`` seconds (Note [Measured memory]); ``states``: the same
    samples log the GPU's state; ``memory`` False: NVML is not asked at all. A command that
    cannot be started raises OSError."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    timed_out = False
    with open(log_path, "wb") as log, (PeakGpuMemory(interval=interval, states=states)
                                       if memory else contextlib.nullcontext()) as mem:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=None if env is None else dict(env))
        if mem is not None:
            mem.watch(proc.pid)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            timed_out = True
        wall = time.perf_counter() - t0
    return WatchedRun(
        rc=rc, timed_out=timed_out, wall_s=wall, pid=proc.pid, log_path=log_path,
        peak_gpu_memory_bytes=None if mem is None else mem.peak_bytes,
        nvml_error=None if mem is None else mem.error,
        gpu_state=None if mem is None or mem.states is None else mem.states.record())
