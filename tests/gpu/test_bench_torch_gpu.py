"""scripts/bench_torch.py's 3-D study on a GPU, smallest configurations: ``layers3d`` writes
every row it was asked for with measured sides, plans within their caps and keeps an earlier
run's rows; ``models`` and ``startup`` run their processes to completion, ``models``'s each
with its whole-process peak memory and GPU state from NVML; ``frontend --quick`` runs ResNet-50
through PyTorch and through ucudnn.torch in fp32 and bf16 (and, in a test of its own, under
torch.compile); ``memcap --quick`` runs every process to ok or oom under its memory cap, and
refuses a cap above the device; ``overhead`` times every way a call reaches the core. No
timing is checked.

Benchmarks go to the session's own cache (tests/conftest.py, inherited by the processes).
"""
import csv
import json
import subprocess
import sys

import pytest

from repo_paths import REPO
from ucudnn.vocab import parse_size

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="bench_torch.py needs PyTorch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)

SCRIPT = REPO / "scripts" / "bench_torch.py"


def _all_ok(doc):
    """Every process of a study's document ran to completion; the message lists those that
    did not, their records whole (the error text with them)."""
    bad = [p for p in doc["processes"] if p["status"] != "ok"]
    assert not bad, json.dumps(bad, indent=1, default=str)[-4000:]


def _run(*args, timeout=600):
    r = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r


@pytest.mark.parametrize("mode,dtype", [("train", "float32"), ("forward", "bfloat16")])
def test_overhead_times_every_way_to_the_core(tmp_path, mode, dtype):
    out = tmp_path / "overhead.json"
    r = _run("overhead", "--mode", mode, "--dtype", dtype, "--calls", "5", "--reps", "3",
             "--warmup", "2", "--out", out)
    doc = json.loads(out.read_text())
    med = doc["median_us_per_call"]
    assert set(med) == {"pytorch", "function", "core", "direct", "eager", "custom_op",
                        "library"}
    assert all(v > 0 for v in med.values()) and doc["cheaper_style"] in ("custom_op", "library")
    assert all(len(t) == 3 for t in doc["samples_us_per_call"].values())
    assert r.stdout.startswith(f"{mode} {dtype}: pytorch ")


def test_layers3d_rows_within_their_caps(tmp_path):
    args = ("layers3d", "--quick", "--out", tmp_path, "--layers", "unet.enc0b", "--ops",
            "fwd,bwd_filter", "--caps", "64MiB,unlimited", "--dtypes", "float32",
            "--families", "legacy", "--calls", "2", "--reps", "2")
    _run(*args)
    with open(tmp_path / "points.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["op"], r["cap"]) for r in rows) == sorted(
        (op, cap) for op in ("fwd", "bwd_filter") for cap in ("64MiB", "unlimited"))
    for r in rows:
        assert (r["ucudnn_status"], r["undivided_status"], r["pytorch_status"]) == ("ok",) * 3
        for side in ("ucudnn", "undivided", "pytorch"):
            assert float(r[f"{side}_measured_ms"]) > 0
        if r["cap"] != "unlimited":
            assert int(r["ucudnn_workspace_bytes"]) <= int(r["cap_bytes"])
            assert int(r["undivided_workspace_bytes"]) <= int(r["cap_bytes"])
        assert float(r["ucudnn_predicted_ms"]) <= float(r["undivided_predicted_ms"])
        assert sum(map(int, r["ucudnn_sizes"].split("+"))) == int(r["n"])
    versions = json.loads((tmp_path / "versions.json").read_text())
    assert versions["torch"] == torch.__version__ and versions["torch_cudnn"]
    assert (tmp_path / "workspace_vs_time.png").stat().st_size > 0
    again = _run(*args)                 # the rows are there: nothing measured again
    assert "ucudnn" not in again.stdout and f"{len(rows)} rows" in again.stdout


def test_models_and_startup_processes_complete(tmp_path):
    _run("models", "--quick", "--out", tmp_path / "m", "--models", "unet", timeout=900)
    doc = json.loads((tmp_path / "m" / "models.json").read_text())
    sides = {(p["side"], p["cap"]): p for p in doc["processes"]}
    assert set(sides) == {("pytorch", "unlimited"), ("ucudnn", "256MiB"), ("wscap", "256MiB")}
    _all_ok(doc)
    assert sides[("ucudnn", "256MiB")]["converted"] > 0
    for p in doc["processes"]:          # NVML (the gpu extra) watched every process
        assert p["nvml_error"] is None and p["peak_gpu_memory_bytes"] > 0, p
        assert p["gpu_state"]["samples"] >= 1 and p["exit_status"] == 0
    _run("models", "--quick", "--out", tmp_path / "m", "--models", "unet", timeout=900)
    again = json.loads((tmp_path / "m" / "models.json").read_text())
    assert again["processes"] == doc["processes"]       # all there: none run again
    _run("startup", "--quick", "--out", tmp_path / "s", timeout=900)
    doc = json.loads((tmp_path / "s" / "startup.json").read_text())
    assert sorted(p["side"] for p in doc["processes"]) == ["pytorch", "ucudnn-cold",
                                                         "ucudnn-warm"]
    _all_ok(doc)
    (ratio,) = doc["warm_to_pytorch_first"]
    assert ratio["warm_to_pytorch"] is not None


def test_memcap_quick_processes_finish_ok_or_oom(tmp_path):
    """memcap --quick: both models, bf16, the two quick memory caps and the references, both
    sides; every process ends ok or oom (never failed), NVML watched each, every capped process
    ran under its fraction of the device, ucudnn converted the models' convolutions, every
    memory cap has a verdict and a line; a second run into the folder keeps them all."""
    from ucudnn.experiments import torch_memcap as mc
    r = _run("memcap", "--quick", "--out", tmp_path, timeout=1800)
    doc = json.loads((tmp_path / "memcap.json").read_text())
    caps = [c for c, _ in mc.parse_memory_caps(mc.QUICK_MEMORY_CAPS)]
    got = {(p["model"], p["side"], p["memory_cap"]) for p in doc["processes"]}
    assert got == {(m, s, c) for m in ("unet", "vae") for s in mc.SIDES
                   for c in ["unlimited"] + caps}
    bad = [p for p in doc["processes"] if p["status"] not in ("ok", "oom")]
    assert not bad, json.dumps(bad, indent=1, default=str)[-4000:]
    total = torch.cuda.get_device_properties(0).total_memory
    for p in doc["processes"]:
        assert p["nvml_error"] is None and p["peak_gpu_memory_bytes"] > 0, p
        if p["memory_cap"] == "unlimited":
            assert p["status"] == "ok" and p["memory_cap_bytes"] is None, p
        else:
            assert p["memory_cap_bytes"] == parse_size(p["memory_cap"])
            assert p["memory_fraction"] == pytest.approx(p["memory_cap_bytes"] / total)
        if p["side"] == "ucudnn" and p["status"] == "ok":
            assert p["converted"] > 0 and p["cap"] == mc.DEFAULT_CAP, p
    assert len(doc["verdicts"]) == 2 * len(caps)
    assert all(v["verdict"] in mc.VERDICTS for v in doc["verdicts"])
    text = (tmp_path / "memcap.txt").read_text()
    assert sum(" memory cap " in line for line in text.splitlines()) == 2 * len(caps)
    assert r.stdout.endswith(text) and (tmp_path / "memcap.png").stat().st_size > 0
    _run("memcap", "--quick", "--out", tmp_path, timeout=300)  # all there: nothing runs again
    again = json.loads((tmp_path / "memcap.json").read_text())
    assert again["processes"] == doc["processes"]


def test_memcap_refuses_a_cap_above_the_device(tmp_path):
    total = torch.cuda.get_device_properties(0).total_memory
    r = subprocess.run([sys.executable, str(SCRIPT), "memcap", "--quick", "--out", tmp_path,
                        "--memory-caps", f"{total + (1 << 30)}"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]        # after any warning of torch's import
    assert last.startswith("bench_torch.py memcap: --memory-caps: ") and \
        "more than this device's memory" in last, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "logs").exists()


def _frontend_doc(out):
    doc = json.loads((out / "frontend.json").read_text())
    _all_ok(doc)
    return doc


def _resnet50_convs() -> int:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import torch_nets
    finally:
        sys.path.pop(0)
    model, _, _ = torch_nets.build_net("resnet50", 1)
    return sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())


def test_frontend_quick_runs_both_sides(tmp_path):
    """--quick --operators: fp32 and bf16, PyTorch, ucudnn and ucudnn through the operators,
    one process each, all to completion; every ResNet-50 convolution converted and planned by
    the core, NVML watching each process."""
    from ucudnn.experiments import torch_frontend as tf
    r = _run("frontend", "--quick", "--operators", "--out", tmp_path, timeout=900)
    doc = _frontend_doc(tmp_path)
    cells = {(p["dtype"], p["variant"]): p for p in doc["processes"]}
    assert set(cells) == {(d, v) for d in tf.DTYPES for v in tf.variants(False, True)}
    convs = _resnet50_convs()
    for (dtype, variant), p in cells.items():
        assert p["batch"] == tf.QUICK["batch"] and len(p["step_ms"]) == tf.QUICK["iterations"]
        assert p["median_ms"] > 0 and p["host_median_ms"] > 0 and p["first_step_ms"] > 0
        assert p["nvml_error"] is None and p["peak_gpu_memory_bytes"] > 0, p
        if variant.startswith("ucudnn"):
            assert p["converted"] == convs and p["kept"] == [], p
            assert p["plans"]["kernels"] > 0 and p["style"]
            assert p["eager"] == (variant == "ucudnn")
        else:
            assert "converted" not in p and "plans" not in p
    ratios = {(q["dtype"], q["variant"]): q for q in doc["summary"]["ratios"]}
    assert set(ratios) == {(d, v) for d in tf.DTYPES for v in ("ucudnn", "ucudnn_operators")}
    assert all(q["ratio"] > 0 for q in ratios.values())
    text = (tmp_path / "frontend.txt").read_text()
    assert text.count("ucudnn/pytorch ") == len(tf.DTYPES) and f"torch {torch.__version__}" in text
    assert text.count("ucudnn_operators/pytorch ") == len(tf.DTYPES)
    assert r.stdout.endswith(text)


def test_frontend_compiled_variants_run(tmp_path):
    """--compile: both sides under torch.compile as well (bf16, a small batch; a few
    minutes, the compilations dominating)."""
    _run("frontend", "--quick", "--compile", "--dtypes", "bfloat16", "--batch", "8",
         "--out", tmp_path, timeout=1800)
    doc = _frontend_doc(tmp_path)
    assert {p["variant"] for p in doc["processes"]} == {"pytorch", "ucudnn", "pytorch_compile",
                                                       "ucudnn_compile"}
    convs = _resnet50_convs()
    assert all(p["converted"] == convs and p["plans"]["kernels"] > 0 for p in doc["processes"]
               if p["variant"].startswith("ucudnn"))
    (_, compiled) = doc["summary"]["ratios"]
    assert compiled["variant"] == "ucudnn_compile" and compiled["ratio"] > 0
