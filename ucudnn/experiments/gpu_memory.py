"""Peak GPU memory of a process, sampled from NVML while it runs (``peak_gpu_memory_bytes`` of a
reproduce point, Note [Measured memory]).

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
    of a process] in :mod:`.nvml`).
"""
from __future__ import annotations

import threading
from typing import Optional

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
