"""The README's table from scripts/probe_conv_fusions.cu's JSON lines.

    python results/h200/conv-fusions/commands/table.py FILE.jsonl...

One row per shape and dtype: the fastest plan of each graph (ms) with how many distinct
engine configs the heuristics proposed and how many were built and timed, and one pass
over y (a device-to-device copy: one read and one write) for the cost of a separate pass.
"""
import json
import sys

GRAPHS = ("conv", "conv+stats", "sbr+conv", "wgrad", "sbr+wgrad")


def cell(d):
    if d is None:
        return "-"
    if d["best_ms"] < 0:
        return f"none ({d['proposed']} proposed)"
    return f"{d['best_ms']:.3f} ({d['built']}/{d['proposed']}, engine {d['best_engine']})"


def main(paths):
    rows = {}
    for path in paths:
        for line in open(path, encoding="utf-8"):
            d = json.loads(line)
            key = (d["dtype"], tuple(d["shape"]))
            rows.setdefault(key, {"y_pass_ms": d["y_pass_ms"]})[d["graph"]] = d
    print("| dtype | N,C,H,W -> K, RxR | " + " | ".join(GRAPHS) + " | one pass over y |")
    print("| --- " * (len(GRAPHS) + 3) + "|")
    for (dtype, (n, c, h, w, k, r, s)), g in rows.items():
        cells = " | ".join(cell(g.get(name)) for name in GRAPHS)
        print(f"| {dtype} | {n},{c},{h},{w} -> {k}, {r}x{r}{'' if s == 1 else f' /{s}'} | "
              f"{cells} | {g['y_pass_ms']:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
