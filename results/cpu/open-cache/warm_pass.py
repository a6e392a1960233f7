"""A warm pass of scripts/cold_planning.py on a CPU, with a net's kernels sharing one open
benchmark cache (Note [One open cache per net] in ucudnn/measure/runtime.py) and with each
kernel opening its own, alternating, in one process. The fake core of the tests replays the
H200's recorded ResNet-18 tables (tests/data/h200_all_sizes) as cudnnFind, so only the
Python side runs: the cache reads, the pruned search, the DP. Prints one JSON line.

    python3 results/cpu/open-cache/warm_pass.py [--passes 9]
"""
import argparse
import contextlib
import json
import lzma
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tests" / "support"), str(ROOT / "scripts")]

import fake_core  # noqa: E402
from ucudnn.plan.table import group_by_kernel, parse_table  # noqa: E402


class Patch:
    """monkeypatch's setitem/setattr, undone never (one process, one run)."""
    def setitem(self, d, k, v):
        d[k] = v

    def setattr(self, obj, name, value, raising=True):
        setattr(obj, name, value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=9, help="warm passes per variant")
    args = ap.parse_args()
    with lzma.open(ROOT / "tests/data/h200_all_sizes/resnet18_bench.csv.xz", "rt") as f:
        tables = group_by_kernel(parse_table(f.read(), source="resnet18_bench.csv.xz"))
    core = fake_core.install(Patch(), fake_core.FakeCore())
    core.gpus, core.model = ["replayed H200"], fake_core.replay(tables)
    import cold_planning
    from ucudnn.measure import runtime
    shared = runtime.open_caches

    @contextlib.contextmanager
    def own_per_kernel():                   # every kernel opens the cache itself
        yield lambda path: None
    times = {"shared": [], "per_kernel": []}
    with tempfile.TemporaryDirectory() as d:
        cache, records = Path(d) / "bench.sqlite", Path(d) / "records.jsonl"
        cold_planning.plan_net("resnet18", "all", "pruned", 64 << 20, cache, records)
        for _ in range(args.passes):
            for name, opener in (("shared", shared), ("per_kernel", own_per_kernel)):
                runtime.open_caches = opener
                t0 = time.perf_counter()
                _, again, _, _ = cold_planning.plan_net("resnet18", "all", "pruned", 64 << 20,
                                                        cache, records)
                times[name].append(time.perf_counter() - t0)
                assert again == 0, "a warm pass benchmarked"
    print(json.dumps({"cpu": platform.processor() or platform.machine(),
                      "python": platform.python_version(), "passes": args.passes,
                      **{f"{k}_median_s": round(statistics.median(v), 3) for k, v in times.items()},
                      **{f"{k}_s": [round(x, 3) for x in v] for k, v in times.items()}}))


if __name__ == "__main__":
    main()
