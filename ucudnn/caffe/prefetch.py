"""What a Caffe net's convolution layers will benchmark, measured before they set up, spread
over the GPUs named in ``$UCUDNN_BENCH_DEVICES`` (Note [Benchmarks over several GPUs in one
process] in :mod:`ucudnn.measure.spread`). Caffe's ``Net::Init`` calls :func:`prefetch_net`
through the C API (``ucudnn_prefetch_net``) with the layers it has not set up yet and, as net
inputs, the blobs they read with the shapes Caffe gave them."""
from __future__ import annotations

import logging
import os
from typing import Callable, List, Optional

from ..measure.bench import FIND_REPEATS
from ..measure.spread import Job, measure_on_devices, parse_devices
from .prototxt import conv_layers, parse_net_text, ucudnn_settings

__all__ = ["ENV", "net_jobs", "prefetch_net"]

#: GPUs to spread a net's benchmarks over, e.g. ``0,1`` (unset or empty: none).
ENV = "UCUDNN_BENCH_DEVICES"

log = logging.getLogger("ucudnn")


def net_jobs(net, phase: str, dtype: str = "float32", source: str = "<prototxt>") -> List[Job]:
    """The kernels the net's ucudnn layers of ``phase`` will plan, each with the arguments the
    layer passes to ``prepare_kernel`` (caffe_patch/0002, ``UcudnnConv::Create``, and the C
    API's ``ucudnn_kernel_create``); layers without ucudnn_param run as stock Caffe."""
    layers = conv_layers(net, phase, source=source)
    _, per_layer = ucudnn_settings(net, phase, source)
    jobs = []
    for layer in layers:
        s = per_layer.get(layer.name)
        if s is None:
            continue
        options = {"policy": s.policy, "optimizer": s.optimizer, "limit": s.workspace_limit,
                   "sizes": list(s.micro_batch_sizes) or None,
                   "repeats": s.benchmark_repeats if s.benchmark_repeats > 0 else FIND_REPEATS,
                   "cache_path": s.cache_path or None,
                   "exclude_winograd": s.exclude_winograd}
        jobs += [Job(layer, op, dtype, s.math, options) for op in layer.ops]
    return jobs


def prefetch_net(text: str, dtype: str = "float32", devices: Optional[str] = None,
                 progress: Optional[Callable[[str], None]] = None) -> Optional[dict]:
    """Measure what the net in prototxt ``text`` will plan over the GPUs of ``devices``
    (default ``$UCUDNN_BENCH_DEVICES``; None when that is unset or empty); the summary of
    :func:`ucudnn.measure.spread.measure_on_devices`."""
    where = "devices"
    if devices is None:
        devices, where = os.environ.get(ENV, ""), f"${ENV}"
    if not devices.strip():
        return None
    gpus = parse_devices(devices, where)
    source = "Net::Init"
    net = parse_net_text(text, source)
    phase = net.state.DESCRIPTOR.fields_by_name["phase"].enum_type.values_by_number[
        net.state.phase].name
    jobs = net_jobs(net, phase, dtype, source)
    summary = measure_on_devices(jobs, gpus, where=where, progress=progress)
    per = ", ".join(f"GPU {d}: {s['kernels']} kernels, {s['sizes_benchmarked']} sizes measured, "
                    f"{s['seconds']:.1f} s" for d, s in summary["devices"].items())
    log.info("ucudnn: net %r: %d kernels measured over GPUs %s in %.1f s (%s)", net.name,
             len(jobs), devices, summary["seconds"], per)
    summary["kernels"] = len(jobs)
    return summary
