"""Reading what ``caffe time`` prints: timings, ucudnn's plans and its planning times.

``caffe time`` (tools/caffe.cpp) times every layer's Forward and Backward with Caffe's
``Timer`` -- CUDA events in GPU mode -- and logs, through glog::

    I1129 21:02:03.123456  4242 caffe.cpp:404] Iteration: 3 forward-backward time: 61.2 ms.
    I1129 21:02:03.223456  4242 caffe.cpp:407] Average time per layer:
    I1129 21:02:03.223456  4242 caffe.cpp:410]      conv1	forward: 2.51 ms.
    I1129 21:02:03.223456  4242 caffe.cpp:413]      conv1	backward: 4.02 ms.
    I1129 21:02:03.323456  4242 caffe.cpp:418] Average Forward pass: 20.1 ms.
    I1129 21:02:03.323456  4242 caffe.cpp:420] Average Backward pass: 40.9 ms.
    I1129 21:02:03.323456  4242 caffe.cpp:422] Average Forward-Backward: 61.1 ms.

The patched convolution layer (caffe_patch/0002, util/ucudnn.cpp) adds one line per planned
kernel, and the core's Python side (with ``UCUDNN_LOG=INFO``) its benchmark/planning times
and the ILP's solve time::

    I... ucudnn.cpp:128] ucudnn: layer conv2 fwd: 128x2:algo1, 1.23 ms predicted, 123 B workspace,
        2 groups
    ucudnn INFO: layer 'conv1' fwd: 9 micro-batch sizes benchmarked (or read from the cache)
        in 0.412 s, planned in 0.003 s
    ucudnn INFO: ILP: 15 kernels (21 instances), budget 1.31 GiB, ... solved in 0.210 s

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
_AVG = re.compile(r"^Average (Forward pass|Backward pass|Forward-Backward): " + _NUM + r" ms\.$")
_TOTAL = re.compile(r"^Total Time: " + _NUM + r" ms\.$")
_TESTING = re.compile(r"^Testing for (\d+) iterations\.$")
_PLAN = re.compile(r"^ucudnn: layer (\S+) (fwd|bwd_data|bwd_filter): (.*), " + _NUM +
                   r" ms predicted, (\d+) B workspace(?:, (\d+) groups?)?$")
_PLAN_PART = re.compile(r"(\d+)x(\d+):algo")
_REPLAN = re.compile(r"^layer (\S+): ucudnn: cannot allocate (\d+) B of workspace")
_BENCH = re.compile(r"^ucudnn INFO: layer '([^']+)' (fwd|bwd_data|bwd_filter): (\d+) micro-batch "
                    r"sizes benchmarked \(or read from the cache\) in " + _NUM +
                    r" s, planned in " + _NUM + r" s$")
_ILP = re.compile(r"^ucudnn INFO: ILP: (\d+) kernels \((\d+) instances\).* solved in " + _NUM +
                  r" s$")
_ILP_NET = re.compile(r"^ucudnn: net (\S+): ILP divided (\d+) B among (\d+) kernels: (\d+) B "
                      r"used, " + _NUM + r" ms predicted$")
_GPU = re.compile(r"^Use GPU with device ID (\d+)$")


class CaffeLogError(ValueError):
    """The log is not one of a finished ``caffe time`` run."""


@dataclass
class KernelPlanLog:
    """One ``ucudnn: layer ... predicted ...`` line (the last one of a kernel wins: the ILP
    and a re-plan after a failed allocation log the new plan). ``groups``: instances of the
    kernel per pass (Caffe's group count; logs before 2026-11-29 do not say: 1)."""
    layer: str
    op: str
    plan: str
    predicted_ms: float
    ws_bytes: int
    groups: int = 1
    bench_s: Optional[float] = None
    plan_s: Optional[float] = None
    sizes: Optional[int] = None

    @property
    def batch(self) -> int:
        """The samples the plan covers: its parts' micro-batch size x count, summed."""
        return sum(int(b) * int(n) for b, n in _PLAN_PART.findall(self.plan))


@dataclass
class CaffeTime:
    """What one ``caffe time`` run measured, in milliseconds (per iteration)."""
    iterations: int
    iteration_ms: List[float]
    forward_ms: float
    backward_ms: float
    forward_backward_ms: float
    layers: Dict[str, Dict[str, float]]           # name -> {"forward": ms, "backward": ms}
    kernels: Dict[str, KernelPlanLog] = field(default_factory=dict)   # "layer/op"
    ilp_solve_s: Optional[float] = None
    ilp_budget_bytes: Optional[int] = None
    ilp_used_bytes: Optional[int] = None
    replans: int = 0                              # failed workspace allocations
    gpu: Optional[int] = None

    @property
    def median_ms(self) -> float:
        """Median forward-backward time over the timed iterations."""
        return statistics.median(self.iteration_ms)

    @property
    def bench_s(self) -> float:
        return sum(k.bench_s or 0.0 for k in self.kernels.values())

    @property
    def plan_s(self) -> float:
        return sum(k.plan_s or 0.0 for k in self.kernels.values())

    def predicted_conv_ms(self) -> Optional[float]:
        """Predicted time of one pass's convolutions (every group), when ucudnn planned."""
        if not self.kernels:
            return None
        return sum(k.predicted_ms * k.groups for k in self.kernels.values())


def _message(line: str) -> str:
    m = _GLOG.match(line)
    return m.group(1) if m else line.rstrip("\n")


def _kernel_plan(msg: str) -> Optional[KernelPlanLog]:
    m = _PLAN.match(msg)
    if not m:
        return None
    return KernelPlanLog(m.group(1), m.group(2), m.group(3), float(m.group(4)),
                         int(m.group(5)), int(m.group(6) or 1))


def kernel_plans(text: str) -> List[KernelPlanLog]:
    """Every plan line of a Caffe log, in order: a log of ``caffe train`` (train and test
    nets) or of a re-plan has several per kernel, where :func:`parse_caffe_time` keeps the
    last."""
    return [k for k in map(_kernel_plan, map(_message, text.splitlines())) if k is not None]


def parse_caffe_time(text: str) -> CaffeTime:
    """Parse the output of ``caffe time`` (stdout and stderr together)."""
    iters: Dict[int, float] = {}
    layers: Dict[str, Dict[str, float]] = {}
    avg: Dict[str, float] = {}
    kernels: Dict[str, KernelPlanLog] = {}
    timing: Dict[str, tuple] = {}
    testing = None
    out = {"ilp_solve_s": None, "ilp_budget_bytes": None, "ilp_used_bytes": None, "gpu": None}
    replans = 0
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
        m = _LAYER.match(msg)
        if m and in_layers:
            layers.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
            continue
        m = _AVG.match(msg)
        if m:
            in_layers = False
            avg[m.group(1)] = float(m.group(2))
            continue
        k = _kernel_plan(msg)
        if k:
            kernels[f"{k.layer}/{k.op}"] = k
            continue
        if _REPLAN.match(msg):
            replans += 1
            continue
        m = _BENCH.match(msg)
        if m:
            timing[f"{m.group(1)}/{m.group(2)}"] = (int(m.group(3)), float(m.group(4)),
                                                    float(m.group(5)))
            continue
        m = _ILP.match(msg)
        if m:
            out["ilp_solve_s"] = float(m.group(3))
            continue
        m = _ILP_NET.match(msg)
        if m:
            out["ilp_budget_bytes"], out["ilp_used_bytes"] = int(m.group(2)), int(m.group(4))
            continue
        m = _TESTING.match(msg)
        if m:
            testing = int(m.group(1))
            continue
        m = _GPU.match(msg)
        if m:
            out["gpu"] = int(m.group(1))
    missing = [k for k in ("Forward pass", "Backward pass", "Forward-Backward") if k not in avg]
    if missing or not iters:
        raise CaffeLogError("not the log of a finished 'caffe time' run (no "
                            + ", ".join(f"'Average {k}'" for k in missing or ["Iteration:"])
                            + " line)")
    n = testing if testing is not None else max(iters)
    if sorted(iters) != list(range(1, n + 1)):
        raise CaffeLogError(f"'caffe time' ran {n} iterations but the log has iteration "
                            f"lines {sorted(iters)[:5]}...")
    for key, (sizes, bench_s, plan_s) in timing.items():
        if key in kernels:
            k = kernels[key]
            k.sizes, k.bench_s, k.plan_s = sizes, bench_s, plan_s
    return CaffeTime(iterations=n, iteration_ms=[iters[i] for i in range(1, n + 1)],
                     forward_ms=avg["Forward pass"], backward_ms=avg["Backward pass"],
                     forward_backward_ms=avg["Forward-Backward"], layers=layers,
                     kernels=kernels, replans=replans, **out)
