"""DeepBench half precision at 128 MiB over every layer measured on cuDNN 9.19: for each layer
the call that measured most of its rows (the latest of equals), its points and side-by-side
rows together, summarised as scripts/bench_engines.py summarises one run. Run from the
repository root: python3 results/h200/cudnn919/commands/deepbench_latest.py"""
import collections
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE.parents[2] / "scripts"))
from bench_engines import print_versus, read_points, read_versus  # noqa: E402

CALLS = ("d", "e", "f", "g", "j", "k", "l", "r", "r2")    # in the order they ran

points, versus = {}, {}
for call in CALLS:
    folder = HERE / f"call_{call}" / "deepbench_half"
    if not folder.exists():
        continue
    by_kernel = collections.defaultdict(list)
    for r in read_points(folder / "points.csv"):
        by_kernel[r["kernel"]].append(r)
    v_by_kernel = collections.defaultdict(list)
    for v in read_versus(folder / "versus_undivided.csv"):
        v_by_kernel[v["kernel"]].append(v)
    for kernel, rows in by_kernel.items():
        if len(rows) >= len(points.get(kernel, (None, []))[1]):
            points[kernel] = (call, rows)
            versus[kernel] = v_by_kernel[kernel]
print("layers:", " ".join(f"{k}({c})" for k, (c, _) in sorted(
    points.items(), key=lambda kv: int(kv[0][2:]))))
print_versus([r for _, rows in points.values() for r in rows],
             [v for vs in versus.values() for v in vs])
