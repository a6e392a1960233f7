"""(Needs commands/batched_heater_experiment.diff applied: the core's HEAT_BYTES.) Note [Timing at
full clocks], measured: a short kernel's runs timed one by one after the
GPU idled, with and without the core's heater, and the SM clock (NVML) around them.

    python3 -P results/h200/timing/commands/ramp.py > ramp.json
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "scripts"))
import bench_engines as be                                       # noqa: E402
from ucudnn.measure import bench                                 # noqa: E402
from ucudnn.plan.dp import plan_kernel                           # noqa: E402
from ucudnn.plan.settings import candidate_sizes                 # noqa: E402
from ucudnn.vocab import DTYPES, UNLIMITED, default_math         # noqa: E402

try:
    import pynvml
    pynvml.nvmlInit()
    _nv = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock = lambda: pynvml.nvmlDeviceGetClockInfo(_nv, pynvml.NVML_CLOCK_SM)
except Exception:                                                # no NVML: no clocks
    clock = lambda: None

CASES = [("resnet50", "res5a_branch2c", "bwd_filter", "graph", "NCHW", "float16"),
         ("resnet18", "res5a_branch2b", "fwd", "legacy", "NCHW", "bfloat16")]
core = bench.core()
default_heat = core.HEAT_BYTES
out = []
for suite, name, op, family, layout, dtype in CASES:
    ks = next(k for k in be.suite_kernels(suite, 0) if k.name == name)
    kern = core.Kernel(ks.shape, op, ks.n, dtype, default_math(dtype), f"{name}/{op}")
    data = bench.measure_kernel(kern, candidate_sizes("powerOfTwo", ks.n), repeats=1,
                                engines=family)
    plan = plan_kernel(data, ks.n, "undivided", UNLIMITED, name=kern.name)
    kern.set_plan(plan)
    esize = DTYPES[dtype][1]
    bufs = [core.DeviceBuffer(kern.extent_bytes(0, ks.n)), core.DeviceBuffer(kern.extent_bytes(1, ks.n)),
            core.DeviceBuffer(kern.filter_bytes)]
    for i, b in enumerate(bufs):
        b.fill_random(esize, 5 + i, dtype == "bfloat16")
    xb, yb, wb = bufs
    a, b, o = {"fwd": (xb, wb, yb), "bwd_data": (wb, yb, xb), "bwd_filter": (xb, yb, wb)}[op]
    ws = core.DeviceBuffer(max(1, kern.workspace_size))
    handle = core.Handle(0)
    for heat in (0, 512 << 20, default_heat, 8 << 30, 0, default_heat):
        core.HEAT_BYTES = heat
        time.sleep(0.3)                                          # let the GPU idle
        before = clock()
        times = core.time_run(kern, handle, a.ptr, b.ptr, o.ptr, ws.ptr, kern.workspace_size,
                              60, 0)
        after = clock()
        out.append({"kernel": kern.name, "family": family, "dtype": dtype, "plan": plan.describe(op),
                    "heat_bytes": heat, "sm_mhz_before": before, "sm_mhz_after": after,
                    "first10_ms": [round(t, 4) for t in times[:10]],
                    "median_first10_ms": round(statistics.median(times[:10]), 4),
                    "median_last30_ms": round(statistics.median(times[30:]), 4),
                    "predicted_ms": round(plan.time_ms, 4)})
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    core.HEAT_BYTES = default_heat
print(json.dumps(out, indent=1))
