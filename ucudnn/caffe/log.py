"""Reading what ``caffe time`` prints: Caffe's timings (ucudnn's plans are in its records).

``caffe time`` (tools/caffe.cpp) times every layer's Forward and Backward with Caffe's
``Timer`` -- CUDA events in GPU mode -- and logs, through glog::

    I1129 21:02:03.123456  4242 caffe.cpp:404] Iteration: 3 forward-backward time: 61.2 ms.
    I1129 21:02:03.223456  4242 caffe.cpp:407] Average time per layer:
    I1129 21:02:03.223456  4242 caffe.cpp:410]      conv1	forward: 2.51 ms.
    I1129 21:02:03.223456  4242 caffe.cpp:413]      conv1	backward: 4.02 ms.
    I1129 21:02:03.323456  4242 caffe.cpp:418] Average Forward pass: 20.1 ms.
    I1129 21:02:03.323456  4242 caffe.cpp:420] Average Backward pass: 40.9 ms.
    I1129 21:02:03.323456  4242 caffe.cpp:422] Average Forward-Backward: 61.1 ms.

Its per-layer timer waits for the GPU at every layer, so those iterations also hold the idle
gaps while the host starts each next layer. With caffe_patch/0006 (Note [Whole iterations]
in ``tools/caffe.cpp``) it then times as many whole iterations, as training runs them and as
PyTorch is timed, and logs::

    I1129 21:02:04.123456  4242 caffe.cpp:424] Whole iteration: 3 forward-backward time: 55.0 ms.
    I1129 21:02:04.423456  4242 caffe.cpp:441] Median whole Forward-Backward: 55.1 ms.

What ucudnn planned -- kernels, predicted times, workspace, benchmark, planning and ILP times
-- is not read from the log: the core writes it as plan records to ``$UCUDNN_RECORDS``
(:mod:`ucudnn.caffe.records`). Its log lines (``ucudnn INFO: ...`` with ``UCUDNN_LOG=INFO``)
are for people.

:func:`parse_caffe_time` turns such a log into a :class:`CaffeTime`; lines it does not know
are skipped, so logs with other messages interleaved parse the same.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
# glog's prefix: severity+date, time, thread, file:line]
_GLOG = re.compile(r"^[IWEF]\d{4}(?:\d{4})? [\d:.]+\s+\d+ [^\]]+\] ?(.*)$")
_ITER = re.compile(r"^Iteration: (\d+) forward-backward time: " + _NUM + r" ms\.$")
_LAYER = re.compile(r"^\s*(\S+)\s+(forward|backward): " + _NUM + r" ms\.$")
_WHOLE = re.compile(r"^Whole iteration: (\d+) forward-backward time: " + _NUM + r" ms\.$")
_AVG = re.compile(r"^Average (Forward pass|Backward pass|Forward-Backward): " + _NUM + r" ms\.$")
_TOTAL = re.compile(r"^Total Time: " + _NUM + r" ms\.$")
_TESTING = re.compile(r"^Testing for (\d+) iterations\.$")
_GPU = re.compile(r"^Use GPU with device ID (\d+)$")


class CaffeLogError(ValueError):
    """The log is not one of a finished ``caffe time`` run."""


@dataclass
class CaffeTime:
    """What one ``caffe time`` run measured, in milliseconds (per iteration).
    ``iteration_ms``: the iterations of the per-layer timer; ``whole_iteration_ms``: the whole
    iterations (empty where Caffe has no caffe_patch/0006)."""
    iterations: int
    iteration_ms: List[float]
    forward_ms: float
    backward_ms: float
    forward_backward_ms: float
    # name -> {"forward": ms, "backward": ms}
    layers: Dict[str, Dict[str, float]] = field(default_factory=dict)
    gpu: Optional[int] = None
    whole_iteration_ms: List[float] = field(default_factory=list)

    @property
    def timing(self) -> str:
        """How :attr:`median_ms` was timed: ``whole iterations`` or ``per layer``."""
        return "whole iterations" if self.whole_iteration_ms else "per layer"

    @property
    def median_ms(self) -> float:
        """Median forward-backward time: over the whole iterations where the log has them
        (the time training takes, comparable with PyTorch's), else over the per-layer
        timer's."""
        return statistics.median(self.whole_iteration_ms or self.iteration_ms)

    @property
    def per_layer_median_ms(self) -> float:
        """Median over the per-layer timer's iterations (idle gaps between layers
        included)."""
        return statistics.median(self.iteration_ms)


def _message(line: str) -> str:
    m = _GLOG.match(line)
    return m.group(1) if m else line.rstrip("\n")


def parse_caffe_time(text: str) -> CaffeTime:
    """Parse the output of ``caffe time`` (stdout and stderr together): Caffe's own lines
    only (ucudnn's plans are in its records)."""
    iters: Dict[int, float] = {}
    whole: Dict[int, float] = {}
    layers: Dict[str, Dict[str, float]] = {}
    avg: Dict[str, float] = {}
    testing = None
    gpu = None
    in_layers = False
    for raw in text.splitlines():
        msg = _message(raw)
        if msg.startswith("Average time per layer"):
            in_layers = True
            continue
        m = _ITER.match(msg)
        if m:
            iters[int(m.group(1))] = float(m.group(2))
            continue
        m = _WHOLE.match(msg)
        if m:
            whole[int(m.group(1))] = float(m.group(2))
            continue
        m = _LAYER.match(msg)
        if m and in_layers:
            layers.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
            continue
        m = _AVG.match(msg)
        if m:
            in_layers = False
            avg[m.group(1)] = float(m.group(2))
            continue
        m = _TESTING.match(msg)
        if m:
            testing = int(m.group(1))
            continue
        m = _GPU.match(msg)
        if m:
            gpu = int(m.group(1))
    missing = [k for k in ("Forward pass", "Backward pass", "Forward-Backward") if k not in avg]
    if missing or not iters:
        raise CaffeLogError("not the log of a finished 'caffe time' run (no "
                            + ", ".join(f"'Average {k}'" for k in missing or ["Iteration:"])
                            + " line)")
    n = testing if testing is not None else max(iters)
    if sorted(iters) != list(range(1, n + 1)):
        raise CaffeLogError(f"'caffe time' ran {n} iterations but the log has iteration "
                            f"lines {sorted(iters)[:5]}...")
    if whole and sorted(whole) != list(range(1, n + 1)):
        raise CaffeLogError(f"'caffe time' ran {n} iterations but the log has whole-iteration "
                            f"lines {sorted(whole)[:5]}...")
    return CaffeTime(iterations=n, iteration_ms=[iters[i] for i in range(1, n + 1)],
                     forward_ms=avg["Forward pass"], backward_ms=avg["Backward pass"],
                     forward_backward_ms=avg["Forward-Backward"], layers=layers, gpu=gpu,
                     whole_iteration_ms=[whole[i] for i in sorted(whole)])
