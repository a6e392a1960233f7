"""How stable a short legacy half-precision kernel's time is: one plan timed again and again
(time_run, median of 10 after 3 warm-ups, a fresh workspace each time), its benchmark
records at the same size three times, and the host's wall time per run beside the events'.

    python3 -P results/h200/timing/commands/noise.py > noise.json   (one JSON line per case on stderr)
"""
import dataclasses
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "scripts"))
import bench_engines as be                                       # noqa: E402
from ucudnn.measure import bench                                 # noqa: E402
from ucudnn.plan.dp import plan_kernel                           # noqa: E402
from ucudnn.vocab import DTYPES, UNLIMITED, default_math         # noqa: E402

CASES = [("resnet50", "res3b_branch2a", "bwd_filter", "NHWC", "float16"),
         ("resnet50", "res3a_branch2c", "fwd", "NHWC", "float16"),
         ("resnet18", "res2a_branch2a", "bwd_data", "NCHW", "float16")]
core = bench.core()
out = []
for suite, name, op, layout, dtype in CASES:
    ks = next(k for k in be.suite_kernels(suite, 0) if k.name == name)
    shape = dataclasses.replace(ks.shape, layout=layout)
    kern = core.Kernel(shape, op, ks.n, dtype, default_math(dtype), f"{name}/{op}")
    data = bench.measure_kernel(kern, [ks.n], repeats=1, engines="legacy")
    plan = plan_kernel(data, ks.n, "undivided", UNLIMITED, name=kern.name)
    kern.set_plan(plan)
    algo = plan.describe(op)
    bench_ms = []
    for _ in range(3):
        recs = kern.benchmark([ks.n], families=("legacy",))[ks.n]
        bench_ms.append(round(min(r[2] for r in recs if r[1] == 0), 4))
    esize = DTYPES[dtype][1]
    bufs = [core.DeviceBuffer(kern.extent_bytes(0, ks.n)),
            core.DeviceBuffer(kern.extent_bytes(1, ks.n)), core.DeviceBuffer(kern.filter_bytes)]
    for i, b in enumerate(bufs):
        b.fill_random(esize, 5 + i, dtype == "bfloat16")
    xb, yb, wb = bufs
    a, b, o = {"fwd": (xb, wb, yb), "bwd_data": (wb, yb, xb), "bwd_filter": (xb, yb, wb)}[op]
    handle = core.Handle(0)
    beta = 1.0 if op == "bwd_filter" else 0.0
    reps = []
    for _ in range(8):
        ws = core.DeviceBuffer(max(1, kern.workspace_size))
        reps.append(round(statistics.median(core.time_run(
            kern, handle, a.ptr, b.ptr, o.ptr, ws.ptr, kern.workspace_size, 10, 3,
            beta=beta)), 4))
    t0 = time.perf_counter()
    long = core.time_run(kern, handle, a.ptr, b.ptr, o.ptr, ws.ptr, kern.workspace_size, 200, 3,
                         beta=beta)
    wall = (time.perf_counter() - t0) / 203 * 1e3
    row = {"kernel": kern.name, "layout": layout, "dtype": dtype, "plan": algo,
           "predicted_ms": round(plan.time_ms, 4), "benchmark_best_ms_3x": bench_ms,
           "time_run_medians_8x": reps, "long_median_ms": round(statistics.median(long), 4),
           "long_min_ms": round(min(long), 4), "long_max_ms": round(max(long), 4),
           "host_wall_ms_per_run": round(wall, 4)}
    out.append(row)
    print(json.dumps(row), file=sys.stderr, flush=True)
print(json.dumps(out, indent=1))
