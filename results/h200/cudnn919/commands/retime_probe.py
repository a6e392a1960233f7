"""Where a legacy half-precision benchmark time and the same chunks run as a plan part: for each
case, the core's benchmark (cudnnFind, then re-timing near the front) three times with its
default 5 timed runs and once with 20, each time ALGO_1's time at each size; then the plan of
that size's chunks (b x n/b, ALGO_1) timed by ``time_run`` as the benchmark re-times (1 warm-up,
5 runs) and as bench_engines times plans (3 warm-ups, 20 runs), alternating over 5 rounds, per
chunk, with the host's wall time per chunk and the process's thread count beside each.

    python3 -P results/h200/cudnn919/commands/retime_probe.py > retime_probe.json

(Run in call F, on the core before Note [Re-timing after the Finds].)
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
from ucudnn.plan.dp import Chunk, Plan                           # noqa: E402
from ucudnn.vocab import DTYPES, default_math                    # noqa: E402

CASES = [("deepbench", "db30", "bwd_data", "NHWC", "float16", (64, 256)),
         ("resnet50", "res3b_branch2a", "bwd_filter", "NHWC", "float16", (32, 128)),
         ("resnet50", "res3b_branch2a", "bwd_filter", "NHWC", "float32", (32, 128))]
ALGO = 1


def threads():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("Threads:"))


core = bench.core()
out = []
for suite, name, op, layout, dtype, sizes in CASES:
    ks = next(k for k in be.suite_kernels(suite, 0) if k.name == name)
    shape = dataclasses.replace(ks.shape, layout=layout, x_strides=None, y_strides=None)
    kern = core.Kernel(shape, op, ks.n, dtype, default_math(dtype), f"{name}/{op}")
    row = {"kernel": kern.name, "n": ks.n, "layout": layout, "dtype": dtype, "benchmarks": []}
    perf = {}
    for iters in (5, 5, 5, 20):
        got = kern.benchmark(list(sizes), time_iters=iters)
        entry = {"time_iters": iters, "threads": threads()}
        for b in sizes:
            rec = next((r for r in got[b] if r[0] == ALGO and r[1] == 0), None)
            entry[str(b)] = None if rec is None else round(rec[2], 4)
            if rec is not None:
                perf[b] = rec
        row["benchmarks"].append(entry)
    esize = DTYPES[dtype][1]
    bufs = [core.DeviceBuffer(kern.extent_bytes(0, ks.n)),
            core.DeviceBuffer(kern.extent_bytes(1, ks.n)), core.DeviceBuffer(kern.filter_bytes)]
    for i, buf in enumerate(bufs):
        buf.fill_random(esize, 5 + i, dtype == "bfloat16")
    xb, yb, wb = bufs
    a, b_, o = {"fwd": (xb, wb, yb), "bwd_data": (wb, yb, xb), "bwd_filter": (xb, yb, wb)}[op]
    beta = 1.0 if op == "bwd_filter" else 0.0
    handle = core.Handle(0)
    row["plans"] = {}
    for b, rec in sorted(perf.items()):
        _, _, t, mem, mt = rec[:5]
        kern.set_plan(Plan(ks.n, tuple(Chunk(b, ALGO, mt, t, mem) for _ in range(ks.n // b))))
        ws = core.DeviceBuffer(max(1, kern.workspace_size))
        chunks = ks.n // b
        res = {"like_benchmark": [], "like_plans": [], "host_ms_per_chunk": [],
               "threads": threads()}
        for r in range(5):
            for mode, (warm, iters) in (("like_benchmark", (1, 5)), ("like_plans", (3, 20))):
                t0 = time.perf_counter()
                times = core.time_run(kern, handle, a.ptr, b_.ptr, o.ptr, ws.ptr,
                                      kern.workspace_size, iters, warm, beta=beta)
                wall = (time.perf_counter() - t0) / (warm + iters) / chunks * 1e3
                res[mode].append(round(statistics.median(times) / chunks, 4))
                if mode == "like_plans":
                    res["host_ms_per_chunk"].append(round(wall, 4))
        row["plans"][str(b)] = res
        del ws
    out.append(row)
    print(json.dumps(row), file=sys.stderr, flush=True)
print(json.dumps(out, indent=1))
