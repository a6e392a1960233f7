"""Where in the heuristics' order the graph family's winners stand: for every ResNet-18
kernel (batch 256, NCHW, fp32 default math, as scripts/cold_planning.py plans it) at a few
micro-batch sizes, every engine config the heuristics propose is benchmarked
(``max_graph_configs = 0``), and for the first K configs in the heuristics' order (K = 4,
8, 12, 16 and all) the fastest one within 64 MiB and without a limit is printed, with the
winner's rank. Says whether the pruned search could time fewer configs per size
(GRAPH_CONFIGS_DEFAULT in cython/ucudnn/_core.pyx) without losing time. One JSON line per
kernel and size:

    python3 -P results/h200/cudnn919/commands/graph_ranks.py > graph_ranks.jsonl
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "scripts"))
import bench_engines as be                                       # noqa: E402
from ucudnn.measure import bench                                 # noqa: E402

SIZES = (8, 32, 128, 256)
LIMIT = 64 << 20
KS = (4, 8, 12, 16)
UNLIMITED = 1 << 62


def fastest(order, timed, k, limit):
    """(time, engine) of the fastest config among the first ``k`` of ``order`` that ran and
    fits ``limit``; None where none does."""
    got = [(timed[e][0], e) for e in order[:k] if e in timed and timed[e][1] <= limit]
    return min(got) if got else None


core = bench.core()
for ks in be.suite_kernels("resnet18", 0):
    for op in ks.ops:
        kern = core.Kernel(ks.shape, op, ks.n, "float32", "default", f"{ks.name}/{op}")
        kern.max_graph_configs = 0
        result = kern.benchmark(SIZES, families=("graph",))
        beta = 1.0 if op == "bwd_filter" else 0.0
        for b in SIZES:
            order = [e for e, _ in kern._graph_configs(b, beta)]
            timed = {r[5]: (r[2], r[3]) for r in result[b] if r[1] == 0}
            row = {"kernel": ks.name, "op": op, "batch": b, "configs": len(order),
                   "ran": len(timed)}
            for name, limit in (("64MiB", LIMIT), ("unlimited", UNLIMITED)):
                best = fastest(order, timed, len(order), limit)
                row[f"best_{name}_ms"] = best and round(best[0], 5)
                row[f"rank_{name}"] = best and order.index(best[1]) + 1
                for k in KS:
                    top = fastest(order, timed, k, limit)
                    row[f"top{k}_{name}_ms"] = top and round(top[0], 5)
            print(json.dumps(row), flush=True)
