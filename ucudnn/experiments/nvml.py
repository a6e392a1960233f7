"""NVML, the one way both sides of a comparison read the GPU: its clocks, power and temperature
while a process runs (Note [GPU state of a process]), and the driver's versions.

Note [GPU state of a process]
    A kernel's time follows the SM clock, and the clock follows power and temperature. So that
    a run can say whether the GPU was in the same state for the Caffe and the PyTorch
    processes it compares, each process's sampler (:func:`.gpu_memory.run_watched` with
    ``states``, which also measures its peak memory) reads the SM clock, the power draw and
    the temperature of the GPU the process runs on at every sample where NVML lists the
    process: ``start`` is the first such sample, ``end`` the last, and the lowest clock, the
    highest power and the highest temperature over all of them are kept
    (:class:`StateLog`). Both sides are read by the same code in the parent, never by the
    process itself, so that neither side's numbers depend on how its process is written.
    Without NVML (no ``nvidia-ml-py``, no driver) nothing is read and :func:`load` says why,
    in one line (:data:`MISSING`).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

#: what a run says where NVML cannot be used; ``{why}``: the import's or nvmlInit's error
MISSING = ("NVML unavailable ({why}): no clocks, power, temperature or whole-process memory "
           "(pip install nvidia-ml-py, and a driver)")


class NvmlMissing(RuntimeError):
    """NVML cannot be used here; the message is :data:`MISSING`'s line."""


def load():
    """The ``pynvml`` module, initialised (the caller shuts it down); :class:`NvmlMissing`
    where it cannot be imported or initialised."""
    try:
        import pynvml
    except ImportError as e:
        raise NvmlMissing(MISSING.format(why=f"ImportError: {e}")) from None
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError of any kind: no driver, no GPU
        raise NvmlMissing(MISSING.format(why=f"{type(e).__name__}: {e}")) from None
    return pynvml


def read_state(nv, handle) -> Dict[str, Any]:
    """The SM clock (MHz), power draw (W) and temperature (C) of the GPU at ``handle``; a
    reading NVML refuses is None."""
    def get(f):
        try:
            return f()
        except Exception:  # noqa: BLE001 - one counter unsupported on this GPU
            return None
    power = get(lambda: nv.nvmlDeviceGetPowerUsage(handle))
    return {"sm_clock_mhz": get(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            "power_w": None if power is None else power / 1000.0,
            "temperature_c": get(lambda: nv.nvmlDeviceGetTemperature(handle,
                                                                      nv.NVML_TEMPERATURE_GPU))}


class StateLog:
    """The states of a process's samples (Note [GPU state of a process])."""

    def __init__(self):
        self.start: Optional[Dict[str, Any]] = None
        self.end: Optional[Dict[str, Any]] = None
        self.samples = 0
        self.sm_clock_min_mhz: Optional[int] = None
        self.power_max_w: Optional[float] = None
        self.temperature_max_c: Optional[int] = None

    def add(self, state: Dict[str, Any]) -> None:
        if self.start is None:
            self.start = state
        self.end = state
        self.samples += 1
        for key, field, pick in (("sm_clock_mhz", "sm_clock_min_mhz", min),
                                 ("power_w", "power_max_w", max),
                                 ("temperature_c", "temperature_max_c", max)):
            v, seen = state.get(key), getattr(self, field)
            if v is not None:
                setattr(self, field, v if seen is None else pick(seen, v))

    def record(self) -> Optional[Dict[str, Any]]:
        """The JSON form; None where no sample was taken."""
        if self.start is None:
            return None
        return {"start": self.start, "end": self.end, "samples": self.samples,
                "sm_clock_min_mhz": self.sm_clock_min_mhz, "power_max_w": self.power_max_w,
                "temperature_max_c": self.temperature_max_c}


def versions(index: int = 0) -> Dict[str, Any]:
    """The GPU's name and the driver's version and CUDA version, from NVML; ``{"error":
    line}`` without it."""
    try:
        nv = load()
    except NvmlMissing as e:
        return {"error": str(e)}
    try:
        def text(v):
            return v.decode() if isinstance(v, bytes) else v
        cuda = nv.nvmlSystemGetCudaDriverVersion()
        return {"gpu_name": text(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(index))),
                "driver_version": text(nv.nvmlSystemGetDriverVersion()),
                "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}"}
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        return {"error": f"NVML: {type(e).__name__}: {e}"}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
