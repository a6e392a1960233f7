#!/usr/bin/env python3
"""Time per kind of layer from reproduce grids: ``caffe time``'s forward + backward per layer
(each grid's ``layers.csv``, medians over its processes), summed by the layer's type in the
net's prototxt (``prototxt/NET.prototxt``). The layers Caffe inserts are Split and
LayoutConversion (named ``*_to_nhwc``, ``*_to_nchw``); a FUSED BatchNorm's backward runs at
its folded Scale layer's turn, so it counts as "Scale". Prints a Markdown table, a row a grid:

    python scripts/layer_kinds.py GRID [GRID ...]
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, Mapping

from ucudnn.caffe.proto import load_caffe_pb2, read_net

NETS = Path(__file__).resolve().parent.parent / "prototxt"
KINDS = ("Convolution", "BatchNorm", "Scale", "ReLU", "Eltwise", "Split", "Pooling",
         "LayoutConversion")
COLUMNS = ("net", "layer", "forward_ms", "backward_ms")


class GridError(Exception):
    """A grid folder that cannot be read; the message names the file."""


def kind_of(name: str, types: Mapping[str, str]) -> str:
    """The kind of layer ``name``: its prototxt type, else one Caffe inserted."""
    kind = types.get(name)
    if kind is None:
        kind = "LayoutConversion" if "_to_nh" in name or "_to_nc" in name else "Split"
    return kind if kind in KINDS else "other"


def sums_of(grid: Path, nets: Path = NETS) -> Dict[str, float]:
    """Milliseconds per kind (forward + backward) of the rows of ``grid/layers.csv``."""
    path = grid / "layers.csv"
    pb2, types_of, sums = None, {}, defaultdict(float)
    try:
        with open(path, newline="") as f:
            rows = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (rows.fieldnames or ())]
            if missing:
                raise GridError(f"{path}: no column {', '.join(missing)}")
            for line, row in enumerate(rows, start=2):
                net = row["net"]
                if net not in types_of:
                    pb2 = pb2 or load_caffe_pb2()
                    prototxt = nets / f"{net}.prototxt"
                    if not prototxt.is_file():
                        raise GridError(f"{path}:{line}: net {net!r}: no {prototxt}")
                    types_of[net] = {l.name: l.type for l in read_net(pb2, str(prototxt)).layer}
                try:
                    ms = float(row["forward_ms"]) + float(row["backward_ms"])
                except ValueError:
                    raise GridError(f"{path}:{line}: layer {row['layer']}: a time is not a "
                                    "number") from None
                sums[kind_of(row["layer"], types_of[net])] += ms
    except OSError as e:
        raise GridError(f"{path}: {e.strerror or e}") from None
    return sums


def table(grids) -> str:
    lines = ["| grid | " + " | ".join(KINDS) + " | other | all but convolutions |",
             "| --- " * (len(KINDS) + 3) + "|"]
    for grid in grids:
        sums = sums_of(Path(grid))
        rest = sum(v for k, v in sums.items() if k != "Convolution")
        lines.append(f"| {grid} | " + " | ".join(f"{sums[k]:.2f}" for k in KINDS)
                     + f" | {sums['other']:.2f} | {rest:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grids", nargs="+", metavar="GRID",
                        help="a folder of `ucudnn reproduce --out` with a layers.csv")
    args = parser.parse_args(argv)
    try:
        print(table(args.grids))
    except GridError as e:
        print(f"layer_kinds: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
