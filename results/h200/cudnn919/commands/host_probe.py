"""Whether a legacy half-precision call's host cost depends on its workspace's address: one
plan timed 12 times with one workspace, then 12 times with a fresh workspace each time
(time_run, median of 10 after 3 warm-ups), the host's wall time per run beside each; the
same kernel in fp32 for comparison.

    python3 -P results/h200/cudnn919/commands/host_probe.py > host_probe.json
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
         ("resnet50", "res3b_branch2a", "bwd_filter", "NHWC", "float32"),
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
    esize = DTYPES[dtype][1]
    bufs = [core.DeviceBuffer(kern.extent_bytes(0, ks.n)),
            core.DeviceBuffer(kern.extent_bytes(1, ks.n)), core.DeviceBuffer(kern.filter_bytes)]
    for i, b in enumerate(bufs):
        b.fill_random(esize, 5 + i, dtype == "bfloat16")
    xb, yb, wb = bufs
    a, b, o = {"fwd": (xb, wb, yb), "bwd_data": (wb, yb, xb), "bwd_filter": (xb, yb, wb)}[op]
    handle = core.Handle(0)
    beta = 1.0 if op == "bwd_filter" else 0.0
    row = {"kernel": kern.name, "layout": layout, "dtype": dtype, "plan": plan.describe(op),
           "predicted_ms": round(plan.time_ms, 4)}
    fixed = core.DeviceBuffer(max(1, kern.workspace_size))
    for mode in ("one_workspace", "fresh_workspace"):
        meds, walls = [], []
        for _ in range(12):
            ws = fixed if mode == "one_workspace" else core.DeviceBuffer(max(1, kern.workspace_size))
            t0 = time.perf_counter()
            times = core.time_run(kern, handle, a.ptr, b.ptr, o.ptr, ws.ptr, kern.workspace_size,
                                  10, 3, beta=beta)
            walls.append(round((time.perf_counter() - t0) / 13 * 1e3, 4))
            meds.append(round(statistics.median(times), 4))
        row[mode] = {"medians_ms": meds, "host_wall_ms_per_run": walls}
    out.append(row)
    print(json.dumps(row), file=sys.stderr, flush=True)
print(json.dumps(out, indent=1))
