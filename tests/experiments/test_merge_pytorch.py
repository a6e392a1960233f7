"""`ucudnn reproduce --merge-pytorch`: scripts/time_pytorch.py's JSON into a grid (Note
[Merging PyTorch's points] in ucudnn/experiments/reproduce.py)."""
import csv
import json

import pytest

import cli_run
from ucudnn.experiments import results, summary

MIB = 1 << 20


def _merge_grid(tmp_path):
    """A measured grid (schema 2) of alexnet at its prototxt's batch, ResNet-50 at 128 and at
    256, and a PyTorch JSON as scripts/time_pytorch.py writes it."""
    def point(net, batch, ms):
        return {"net": net, "setting": "undivided", "limit_bytes": 64 * MIB, "status": "ok",
                "median_ms": ms, "kernels": {"conv1/fwd": {"batch": batch, "ws_bytes": 0}}}
    doc = results.new_results()
    doc["points"] = {f"{n}/undivided/64.0MiB": point(n, b, ms) for n, b, ms in (
        ("alexnet", 256, 30.0), ("resnet50", 128, 90.0), ("resnet50@256", 256, 170.0))}
    out = tmp_path / "grid"
    results.save_results(out / "reproduce.json", doc)
    got = {"meta": {"command_line": "python scripts/time_pytorch.py --net resnet50 --batch 256",
                    "options": {"batch": 256}},
           "nets": {"resnet50": {"batch": 256, "median_ms": 85.0, "pytorch_mode": "compile",
                                 "pytorch_ms": 85.0, "peak_gpu_memory_bytes": 10 << 30,
                                 "modes": {"compile": {"median_ms": 85.0}}}}}
    return out, got


def test_merge_pytorch_puts_its_nets_into_the_grid_by_name_and_batch(tmp_path):
    out, got = _merge_grid(tmp_path)
    (tmp_path / "r50.json").write_text(json.dumps(got))
    alex = {"meta": {"command_line": "python scripts/time_pytorch.py --net alexnet",
                     "options": {"batch": None}},
            "nets": {"alexnet": {"batch": 256, "median_ms": 20.0, "pytorch_mode": "eager"}}}
    (tmp_path / "alex.json").write_text(json.dumps(alex))
    p = cli_run.run(tmp_path, "reproduce", "--out", out, "--merge-pytorch",
                    tmp_path / "r50.json", tmp_path / "alex.json")
    assert "pytorch resnet50@256: 85.00 ms (compile) merged into" in p.stdout
    doc = results.load_results(out / "reproduce.json")
    assert sorted(doc["pytorch"]) == ["alexnet", "resnet50@256"]      # resnet50 ran at 128
    torch = doc["pytorch"]["resnet50@256"]
    assert torch["status"] == "ok" and torch["command"] == got["meta"]["command_line"]
    assert torch["meta"] == got["meta"] and torch["median_ms"] == 85.0
    with open(out / "points.csv", newline="") as f:
        rows = {r["net"]: r for r in csv.DictReader(f)}
    assert float(rows["resnet50@256"]["vs_pytorch_best"]) == pytest.approx(170.0 / 85.0)
    assert float(rows["alexnet"]["vs_pytorch_best"]) == pytest.approx(30.0 / 20.0)
    assert rows["resnet50"]["vs_pytorch_best"] == ""
    assert (out / "summary.txt").read_text() == summary.format_summary(doc) + "\n"
    assert "(fastest of its modes: compile" in (out / "summary.txt").read_text()
    assert (out / "layers.csv").is_file()


@pytest.mark.parametrize("case,said", [
    ("missing", "--merge-pytorch: {json}: cannot read"),
    ("not json", "--merge-pytorch: {json}: not JSON"),
    ("schema", "--merge-pytorch: {json}: not scripts/time_pytorch.py's JSON"),
    ("record", "--merge-pytorch: {json}: net 'resnet50': expected a positive \"batch\""),
    ("batch", "--merge-pytorch: {json}: PyTorch's resnet50 at batch 64 matches no net of"),
    ("no grid", "--out: no {grid}"),
])
def test_merge_pytorch_refuses_bad_input_in_one_line_writing_nothing(tmp_path, case, said):
    out, got = _merge_grid(tmp_path)
    path = tmp_path / "pytorch.json"
    if case == "not json":
        path.write_text("{ cut short")
    elif case == "schema":
        path.write_text(json.dumps({"nets": got["nets"]}))
    elif case == "record":
        path.write_text(json.dumps(dict(got, nets={"resnet50": {"median_ms": 85.0}})))
    elif case == "batch":
        got["nets"]["resnet50"]["batch"] = 64
        path.write_text(json.dumps(got))
    elif case == "no grid":
        path.write_text(json.dumps(got))
        out = tmp_path / "empty"
    before = {p.name: p.read_bytes() for p in out.glob("*")}
    p = cli_run.run(tmp_path, "reproduce", "--out", out, "--merge-pytorch", path, ok=False)
    assert p.returncode == 2 and p.stdout == ""
    line = said.format(json=path, grid=out / "reproduce.json")
    assert p.stderr.startswith(f"ucudnn: error: {line}") and p.stderr.count("\n") == 1, p.stderr
    assert {p.name: p.read_bytes() for p in out.glob("*")} == before
    assert case == "no grid" or list(before) == ["reproduce.json"]


def test_a_bf16_mode_is_never_the_merged_baseline(tmp_path):
    """time_pytorch.py's record of a net timed in fp32 and bf16 modes: the grid's ratio is to
    the fastest fp32 mode however fast bf16 ran (Note [PyTorch's modes])."""
    from repo_paths import load_script
    tp = load_script("time_pytorch")
    out, got = _merge_grid(tmp_path)

    def mode(ms):
        return tp.summarize_mode([{"pid": 1, "median_ms": ms, "first_iteration_s": 1.0,
                                   "forward_median_ms": ms / 3, "peak_gpu_memory_bytes": 9 << 30,
                                   "memory_method": "nvml"}])
    got["nets"] = {"resnet50": tp.net_record("resnet50", 256, {
        "compile": mode(85.0), "reduce_overhead": mode(80.0), "bf16_reduce_overhead": mode(40.0)})}
    (tmp_path / "r50.json").write_text(json.dumps(got))
    cli_run.run(tmp_path, "reproduce", "--out", out, "--merge-pytorch", tmp_path / "r50.json")
    with open(out / "points.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["net"] == "resnet50@256")
    assert row["pytorch_mode"] == "reduce_overhead" and float(row["pytorch_ms"]) == 80.0
    assert float(row["vs_pytorch_best"]) == pytest.approx(170.0 / 80.0)
    torch = results.load_results(out / "reproduce.json")["pytorch"]["resnet50@256"]
    assert (torch["bf16_mode"], torch["bf16_ms"]) == ("bf16_reduce_overhead", 40.0)
