"""Benchmarks of many kernels spread over the GPUs of a node, in one process.

Note [Benchmarks over several GPUs in one process]
    A net planned through the C API (:func:`ucudnn.measure.runtime.plan_net`, which Caffe's
    net calls once) measures its kernels on the net's GPU. With ``$UCUDNN_BENCH_DEVICES``
    (e.g. ``0,1``) :func:`measure_on_devices` first measures them over those GPUs, with the
    settings each kernel will be planned with: one thread per GPU
    (``_core.set_device``; the core keeps cuDNN handles per thread and device and one
    benchmark lock per device, and its cudnnFind calls run without the GIL, so the GPUs
    measure at once), each taking the costliest kernel left (largest first,
    :func:`ucudnn.measure.sources.kernel_cost`; kernels identical for the cache -- layers of
    one shape and settings -- once, since two threads would both miss it), all through
    :func:`~ucudnn.measure.runtime.measure_for_plan` into the one benchmark cache. The net's
    planning then finds everything there. The GPUs must be of one model: the cache keys measurements on
    it. Threads rather than the processes of ``ucudnn bench --devices`` (Note [Benchmarks over
    several GPUs] in :mod:`ucudnn.cli.bench`): inside Caffe's embedded interpreter
    ``sys.executable`` is not a Python to start, and the GIL-bound part of a benchmark (the
    pruned search's bookkeeping) is small next to cudnnFind.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from ..plan.conv import ConvShape
from ..plan.layers import LayerSpec
from ..plan.settings import PlanSettings
from ..vocab import InputError

__all__ = ["Job", "parse_devices", "measure_on_devices"]


@dataclass(frozen=True)
class Job:
    """One kernel to measure: ``layer``'s ``op`` with the settings it will be planned with and
    the workspace its benchmark offers (None: the core's default; Note [Workspace a plan may
    use] in :mod:`ucudnn.plan.settings`)."""
    layer: LayerSpec
    op: str
    settings: PlanSettings = field(default_factory=PlanSettings)
    workspace_cap: Optional[int] = None

    def identity(self) -> tuple:
        """What the benchmark cache sees of the job (the layer's name aside)."""
        return (ConvShape.from_layer(self.layer), self.op, self.layer.n, self.settings,
                self.workspace_cap)

    def cost(self) -> float:
        from .sources import kernel_cost
        return kernel_cost(self.layer, self.op,
                           self.settings.candidate_sizes(self.layer.n, self.layer.name))


def parse_devices(text: str, where: str) -> List[int]:
    """GPU indices from ``0,1``; :class:`InputError` naming ``where`` otherwise."""
    out: List[int] = []
    for part in str(text).split(","):
        try:
            v = int(part.strip())
        except ValueError:
            v = -1
        if v < 0 or v in out:
            raise InputError(f"{where}: expected distinct GPU indices such as 0,1, got {text!r}")
        out.append(v)
    return out


def measure_on_devices(jobs: Sequence[Job], devices: Sequence[int], *,
                       where: str = "devices",
                       progress: Optional[Callable[[str], None]] = None) -> dict:
    """Measure ``jobs`` over ``devices`` (Note [Benchmarks over several GPUs in one process]),
    identical kernels once; returns ``{"devices": {device: {"gpu", "kernels",
    "sizes_benchmarked", "seconds"}}, "seconds", "distinct"}``. Raises :class:`InputError`
    naming ``where`` for a device that does not exist or GPUs of different models; a failure
    on a device is raised after every thread ended (what was measured is in the cache)."""
    from . import bench, runtime
    from .sources import core_kernel
    if not devices:
        raise InputError(f"{where}: no GPU given")
    count = bench.core().device_count()
    missing = [d for d in devices if d >= count]
    if missing:
        raise InputError(f"{where}: no GPU {missing[0]} ({count} visible)")
    gpus: Dict[int, str] = {}
    errors: List[tuple] = []

    def run_each(target):
        threads = [threading.Thread(target=target, args=(d,), name=f"ucudnn-bench-gpu{d}")
                   for d in devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def identify(device):
        try:
            bench.set_device(device)
            gpus[device] = bench.device_info()["gpu"]
        except BaseException as e:    # noqa: BLE001 - reported after the join
            errors.append((device, e))

    run_each(identify)
    if errors:
        device, e = errors[0]
        raise InputError(f"{where}: GPU {device}: {e}") from e
    if len(set(gpus.values())) > 1:
        raise InputError(f"{where}: the GPUs differ ("
                         + ", ".join(f"{d}: {gpus[d]}" for d in devices)
                         + "); the benchmark cache keys measurements on the GPU model")
    # identical kernels (layers of one shape and settings) are measured once: two threads
    # would both miss the cache and measure the same sizes
    distinct: Dict[tuple, Job] = {}
    for job in jobs:
        distinct.setdefault(job.identity(), job)
    queue = sorted(distinct.values(), key=lambda j: (-j.cost(), j.layer.name, j.op))
    lock = threading.Lock()
    done = {d: {"gpu": gpus[d], "kernels": 0, "sizes_benchmarked": 0, "seconds": 0.0}
            for d in devices}
    t0 = time.perf_counter()

    def work(device):
        try:
            bench.set_device(device)
            while True:
                with lock:
                    if not queue or errors:
                        return
                    job = queue.pop(0)
                t = time.perf_counter()
                kern = core_kernel(job.layer, job.op, job.settings.dtype, job.settings.math)
                m = runtime.measure_for_plan(kern, job.settings,
                                             workspace_cap=job.workspace_cap)
                with lock:
                    d = done[device]
                    d["kernels"] += 1
                    d["sizes_benchmarked"] += m["sizes_benchmarked"]
                    d["seconds"] += time.perf_counter() - t
                if progress is not None:
                    progress(f"GPU {device}: {job.layer.name} {job.op}: "
                             f"{m['sizes_benchmarked']} of {m['sizes']} sizes measured")
        except BaseException as e:    # noqa: BLE001 - reported after the join
            with lock:
                errors.append((device, e))

    run_each(work)
    if errors:
        device, e = errors[0]
        raise type(e)(f"{where}: GPU {device}: {e}") if isinstance(e, InputError) else e
    return {"devices": done, "seconds": time.perf_counter() - t0, "distinct": len(distinct)}
