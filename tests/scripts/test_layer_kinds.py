"""scripts/layer_kinds.py on a small grid of ResNet-18 rows: each layer summed under its
prototxt type or the kind Caffe inserted, and bad grids refused in one line."""
import subprocess
import sys

import pytest

from repo_paths import REPO

SCRIPT = REPO / "scripts" / "layer_kinds.py"
HEADER = "net,setting,limit_bytes,bn_engine,engines,layout,layer,forward_ms,backward_ms\n"


def _grid(tmp_path, rows, header=HEADER):
    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / "layers.csv").write_text(header + "".join(
        f"resnet18,shared,67108864,fused,both,NHWC,{name},{f},{b}\n" for name, f, b in rows))
    return grid


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_layers_are_summed_by_kind(tmp_path):
    grid = _grid(tmp_path, [("conv1", 1.5, 2.0), ("res2a_branch2a", 0.25, 0.25),
                            ("bn_conv1", 0.5, 0.0), ("scale_conv1", 0.0, 0.75),
                            ("data_to_nhwc", 0.125, 0.0), ("res2a_split", 0.0, 0.5),
                            ("data", 0.0625, 0.0)])
    got = _run(grid)
    assert got.returncode == 0, got.stderr
    head, rule, row = got.stdout.splitlines()
    assert head.split(" | ")[1:3] == ["Convolution", "BatchNorm"]
    cells = [c.strip() for c in row.strip("|").split("|")]
    # Convolution, BatchNorm, Scale, ReLU, Eltwise, Split, Pooling, LayoutConversion, other, rest
    assert cells[1:] == ["4.00", "0.50", "0.75", "0.00", "0.00", "0.50", "0.00", "0.12",
                         "0.06", "1.94"]


@pytest.mark.parametrize("header, rows, message", [
    (HEADER.replace("backward_ms", "bwd"), [("conv1", 1, 1)], "no column backward_ms"),
    (HEADER, [("conv1", "fast", 1)], "layers.csv:2: layer conv1: a time is not a number"),
])
def test_a_bad_grid_is_one_line(tmp_path, header, rows, message):
    got = _run(_grid(tmp_path, rows, header))
    assert got.returncode == 2
    assert got.stdout == "" and "Traceback" not in got.stderr
    assert got.stderr.count("\n") == 1 and message in got.stderr


def test_a_missing_grid_is_one_line(tmp_path):
    got = _run(tmp_path / "nowhere")
    assert got.returncode == 2 and got.stderr.count("\n") == 1
    assert "nowhere/layers.csv" in got.stderr and "Traceback" not in got.stderr
