"""The per-kind table of this folder's README: `caffe time`'s forward + backward per layer
(each grid's layers.csv: medians over its processes), summed by the layer's type in the
prototxt; the layers Caffe inserts are Split and LayoutConversion (named *_to_nhwc,
*_to_nchw). BatchNorm's backward runs at its folded Scale layer's turn ("Scale").
Arguments: other grid folders (each with a layers.csv) instead of this folder's:

    python results/h200/nhwc/commands/by_kind.py [GRID ...]
"""
import csv
import sys
from collections import defaultdict
from pathlib import Path

from ucudnn.caffe.proto import load_caffe_pb2, read_net

HERE = Path(__file__).resolve().parent.parent
NETS = HERE.parents[2] / "prototxt"
KINDS = ("Convolution", "BatchNorm", "Scale", "ReLU", "Eltwise", "Split", "Pooling",
         "LayoutConversion")
pb2 = load_caffe_pb2()
print("| grid | " + " | ".join(KINDS) + " | other | all but convolutions |")
print("| --- " * (len(KINDS) + 3) + "|")
types_of = {}                   # net -> {layer name: type}
grids = sys.argv[1:] or [str(HERE / g) for g in ("r18_nchw_callR", "r18_nhwc_callR",
                                                 "r18_nhwc_callT", "r50_nchw_callS",
                                                 "r50_nhwc_callS")]
for grid in grids:
    sums = defaultdict(float)
    with open(Path(grid) / "layers.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["net"] not in types_of:
                net = read_net(pb2, str(NETS / f"{row['net']}.prototxt"))
                types_of[row["net"]] = {l.name: l.type for l in net.layer}
            types = types_of[row["net"]]
            name = row["layer"]
            kind = types.get(name) or ("LayoutConversion" if "_to_nh" in name or
                                       "_to_nc" in name else "Split")
            sums[kind if kind in KINDS else "other"] += (float(row["forward_ms"]) +
                                                        float(row["backward_ms"]))
    rest = sum(v for k, v in sums.items() if k != "Convolution")
    print(f"| {Path(grid).name if grid.startswith(str(HERE)) else grid} | " + " | ".join(f"{sums[k]:.2f}" for k in KINDS) +
          f" | {sums['other']:.2f} | {rest:.2f} |")
