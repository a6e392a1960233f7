"""What a short kernel's time depends on, beside its plan: beta (backward-filter) and the
workspace size passed to a legacy call. Each case: the kernel benchmarked by the core
(powerOfTwo sizes), its undivided plan predicted, then timed with time_run (median of 20
after 3 warm-ups) at beta 0 and 1 and with the plan's workspace and with 8 GiB.

    python3 -P results/h200/timing/commands/probe.py > probe.json
"""
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "scripts"))
import bench_engines as be                                       # noqa: E402
from ucudnn.measure import bench                                 # noqa: E402
from ucudnn.plan.dp import plan_kernel                           # noqa: E402
from ucudnn.plan.settings import candidate_sizes                 # noqa: E402
from ucudnn.vocab import DTYPES, UNLIMITED, default_math         # noqa: E402

CASES = [("resnet50", "res5a_branch2c", "bwd_filter", "graph", "NCHW", "float16"),
         ("resnet50", "res5a_branch2c", "bwd_filter", "legacy", "NCHW", "float16"),
         ("resnet50", "res4b_branch2a", "bwd_data", "legacy", "NHWC", "bfloat16"),
         ("resnet50", "res4b_branch2a", "bwd_filter", "legacy", "NHWC", "bfloat16"),
         ("resnet50", "res4b_branch2a", "fwd", "legacy", "NHWC", "float16"),
         ("resnet18", "res5a_branch2b", "fwd", "legacy", "NCHW", "bfloat16")]
core = bench.core()
big = core.DeviceBuffer(8 << 30)
out = []
for suite, name, op, family, layout, dtype in CASES:
    ks = next(k for k in be.suite_kernels(suite, 0) if k.name == name)
    shape = dataclasses.replace(ks.shape, layout=layout)
    kern = core.Kernel(shape, op, ks.n, dtype, default_math(dtype), f"{name}/{op}")
    data = bench.measure_kernel(kern, candidate_sizes("powerOfTwo", ks.n), repeats=1,
                                engines=family)
    esize = DTYPES[dtype][1]
    bufs = [core.DeviceBuffer(kern.extent_bytes(0, ks.n)),
            core.DeviceBuffer(kern.extent_bytes(1, ks.n)), core.DeviceBuffer(kern.filter_bytes)]
    for i, b in enumerate(bufs):
        b.fill_random(esize, 5 + i, dtype == "bfloat16")
    xb, yb, wb = bufs
    a, b, o = {"fwd": (xb, wb, yb), "bwd_data": (wb, yb, xb), "bwd_filter": (xb, yb, wb)}[op]
    handle = core.Handle(0)
    for policy, limit in (("undivided", UNLIMITED), ("powerOfTwo", 8 << 20)):
        plan = plan_kernel(data, ks.n, policy, limit, name=kern.name)
        kern.set_plan(plan)
        ws = core.DeviceBuffer(max(1, kern.workspace_size))
        row = {"kernel": kern.name, "family": family, "layout": layout, "dtype": dtype,
               "plan": plan.describe(op), "predicted_ms": round(plan.time_ms, 4)}
        for label, wptr, wsize in (("own_ws", ws.ptr, kern.workspace_size),
                                   ("8GiB_ws", big.ptr, big.nbytes)):
            for beta in ((0.0, 1.0) if op == "bwd_filter" else (0.0,)):
                t = core.time_run(kern, handle, a.ptr, b.ptr, o.ptr, wptr, wsize, 20, 3,
                                  beta=beta)
                row[f"{label}_beta{int(beta)}_ms"] = round(statistics.median(t), 4)
        out.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
print(json.dumps(out, indent=1))
