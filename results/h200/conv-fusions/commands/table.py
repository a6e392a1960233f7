"""The README's table from scripts/probe_conv_fusions.cu's JSON lines.

    python results/h200/conv-fusions/commands/table.py FILE.jsonl...

One row per shape and dtype: the fastest plan of each graph (ms) with how many engine configs
were built and timed of those the heuristics proposed (modes A and FALLBACK, repeats
counted), and one pass over y (a device-to-device copy: one read and one write) for the cost
of a separate pass. Then each fusion against the unfused passes it replaces, estimated from
that copy: conv+stats against the convolution and one read of y (half a copy), sbr+conv
against the convolution, one read and one write of x (a copy scaled by x's size over y's) and
one read of y.
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
    print()
    print("| dtype | N,C,H,W -> K, RxR | conv+stats / (conv + read y) | "
          "sbr+conv / (conv + copy x + read y) |")
    print("| --- | --- | --- | --- |")
    for (dtype, (n, c, h, w, k, r, s)), g in rows.items():
        conv, y_pass = g["conv"]["best_ms"], g["y_pass_ms"]
        oh, ow = ((d + 2 * (r // 2) - r) // s + 1 for d in (h, w))   # the probe's padding R/2
        x_over_y = (c * h * w) / (k * oh * ow)

        def ratio(name, unfused):
            got = g.get(name)
            return "-" if got is None or got["best_ms"] < 0 else f"{got['best_ms'] / unfused:.2f}x"
        print(f"| {dtype} | {n},{c},{h},{w} -> {k}, {r}x{r} | "
              f"{ratio('conv+stats', conv + y_pass / 2)} | "
              f"{ratio('sbr+conv', conv + y_pass * x_over_y + y_pass / 2)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
