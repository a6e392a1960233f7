"""The per-kind table of this folder's README: `caffe time`'s forward + backward per layer
(each grid's layers.csv: medians over its processes), summed by the layer's type in the
prototxt; the layers Caffe inserts are Split and LayoutConversion (named *_to_nhwc,
*_to_nchw). BatchNorm's backward runs at its folded Scale layer's turn ("Scale").

    python results/h200/whole-iterations/commands/by_kind.py
"""
import csv
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
for grid in ("call_n/grid", "call_o/grid"):
    net = "resnet18" if grid.startswith("call_n") else "resnet50"
    types = {l.name: l.type for l in read_net(pb2, str(NETS / f"{net}.prototxt")).layer}
    sums = defaultdict(float)
    with open(HERE / grid / "layers.csv", newline="") as f:
        for row in csv.DictReader(f):
            name = row["layer"]
            kind = types.get(name) or ("LayoutConversion" if "_to_nh" in name or
                                       "_to_nc" in name else "Split")
            sums[kind if kind in KINDS else "other"] += (float(row["forward_ms"]) +
                                                        float(row["backward_ms"]))
    rest = sum(v for k, v in sums.items() if k != "Convolution")
    print(f"| {grid} | " + " | ".join(f"{sums[k]:.2f}" for k in KINDS) +
          f" | {sums['other']:.2f} | {rest:.2f} |")
