"""scripts/bench_torch.py without a GPU: bad arguments refused in one line with exit status 2
before torch is imported, a missing torch said in one line, and the study's models built on the
CPU (where torch is installed)."""
import argparse
import shlex
import signal
import subprocess
import sys

import pytest

from repo_paths import REPO, load_script
from ucudnn.vocab import parse_size

SCRIPT = REPO / "scripts" / "bench_torch.py"


def _run(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60, env=env)


@pytest.mark.parametrize("args, says", [
    (("layers3d",), "--out"),
    (("layers3d", "--out", "{tmp}", "--caps", "64Q"), "--caps: '64Q'"),
    (("layers3d", "--out", "{tmp}", "--layers", "resnet"), "--layers: 'resnet'"),
    (("layers3d", "--out", "{tmp}", "--families", "legacy,fast"), "--families: fast"),
    (("layers3d", "--out", "{tmp}", "--reps", "0"), "--reps"),
    (("models", "--out", "{tmp}", "--models", "unet,gan"), "--models: gan"),
    (("models", "--out", "{tmp}", "--dtypes", "float64"), "--dtypes: float64"),
    (("models", "--out", "{tmp}", "--processes", "0"), "--processes"),
    (("startup", "--out", "{tmp}", "--caps", "64MiB,1GiB"), "one cap"),
    (("startup", "--out", "{file}"), "is a file"),
    (("frontend",), "--out"),
    (("frontend", "--out", "{tmp}", "--dtypes", "float16"), "--dtypes: float16"),
    (("frontend", "--out", "{tmp}", "--quick", "--iterations", "0"), "--iterations"),
    (("frontend", "--out", "{tmp}", "--limit", "64Q"), "--limit: cannot parse '64Q'"),
    (("frontend", "--out", "{tmp}", "--engines", "fast"), "--engines: invalid choice"),
    (("frontend", "--out", "{tmp}", "--batch", "x"), "--batch: invalid int value"),
    (("frontend", "--out", "{file}"), "is a file"),
    (("memcap",), "--out"),
    (("memcap", "--out", "{tmp}", "--memory-caps", "0"), "--memory-caps: '0': a memory cap "
     "must be more than 0"),
    (("memcap", "--out", "{tmp}", "--memory-caps", "6Q"), "--memory-caps: cannot parse '6Q'"),
    (("memcap", "--out", "{tmp}", "--memory-caps", "unlimited"), "references run anyway"),
    (("memcap", "--out", "{tmp}", "--cap", "1X"), "--cap: cannot parse '1X'"),
    (("memcap", "--out", "{tmp}", "--quick", "--processes", "0"), "--processes"),
    (("memcap", "--out", "{file}"), "is a file"),
    (("nosuch",), "invalid choice"),
])
def test_bad_arguments_one_line_exit_2(tmp_path, args, says):
    (tmp_path / "f").write_text("x")
    args = [a.format(tmp=tmp_path / "out", file=tmp_path / "f") for a in args]
    r = _run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_without_torch_one_line_exit_2(tmp_path):
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    r = _run("layers3d", "--out", tmp_path / "out", "--quick", env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "bench_torch.py: needs PyTorch (pip install 'ucudnn[torch]')"]


def test_frontend_processes_take_the_command_the_parent_builds(tmp_path):
    """The parent's command line for each slot parses in the script's hidden subcommand to
    the run's settings."""
    from ucudnn.experiments import torch_frontend as tf
    bt = load_script("bench_torch")
    args = bt._parser().parse_args(["frontend", "--out", str(tmp_path), "--quick", "--compile",
                                    "--limit", "64MiB", "--engines", "legacy"])
    bt._check(args)
    assert {(s.dtype, s.variant) for s in args.slots} == {
        (d, v) for d in tf.DTYPES for v in tf.VARIANTS + tf.COMPILE_VARIANTS}
    for slot in args.slots:
        cmd = tf.process_command(sys.executable, str(SCRIPT), args, slot, tmp_path / "p.json")
        assert cmd[:2] == [sys.executable, str(SCRIPT)]
        got = bt._parser().parse_args(cmd[2:])
        bt._check(got)
        assert (got.cmd, got.dtype, got.variant, got.limit, got.engines) == (
            "frontend-process", slot.dtype, slot.variant, "64MiB", "legacy")
        assert (got.batch, got.iterations, got.warmup) == (
            tf.QUICK["batch"], tf.QUICK["iterations"], tf.QUICK["warmup"])
        assert got.cache == str(tmp_path / "ucudnn-cache.sqlite")


def test_memcap_processes_take_the_command_the_parent_builds(tmp_path):
    """memcap's slots, through the command line of a real model process (of a model the study
    lacks: failed everywhere), parse in the script's hidden subcommand to the slot's side,
    workspace cap and memory cap; the record keeps the memory cap and its bytes."""
    bt = load_script("bench_torch")
    args = bt._parser().parse_args(["memcap", "--out", str(tmp_path), "--quick", "--cap",
                                    "64MiB"])
    bt._check(args)
    assert {(s.side, s.memory_cap) for s in args.slots} == {
        (side, m) for side in ("pytorch", "ucudnn") for m in ("unlimited", "256MiB", "1GiB")}
    for i, s in enumerate(args.slots[:4], 1):
        rec = bt._spawn(args, "no_such_model", s.dtype, s.side, bt.memcap_study.workspace_cap(
            s.side, args.cap), i, tmp_path / "c.sqlite", s.side, s.memory_cap)
        got = bt._parser().parse_args(shlex.split(rec["command"])[2:])
        assert (got.cmd, got.model, got.side, got.memory_cap, got.quick) == (
            "model-process", "no_such_model", s.side, s.memory_cap, True)
        assert got.cap == ("64MiB" if s.side == "ucudnn" else "unlimited")
        assert rec["status"] == "failed" and rec["memory_cap"] == s.memory_cap
        assert rec["memory_cap_bytes"] == (None if s.memory_cap == "unlimited"
                                           else parse_size(s.memory_cap))


def test_quick_models_build_and_run_on_the_cpu():
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import study3d_models
    finally:
        sys.path.pop(0)
    from ucudnn.experiments.torch_study import QUICK_MODELS
    spec = QUICK_MODELS["unet"]
    model, x, step = study3d_models.build(spec)
    assert step == "train"
    y = model(x)
    assert y.shape == (spec["batch"], spec["classes"]) + x.shape[2:]
    spec = QUICK_MODELS["vae"]
    model, z, step = study3d_models.build(spec)
    assert step == "decode"
    with torch.no_grad():
        y = model(z)
    assert y.shape == (spec["batch"], 3, spec["frames"]) + tuple(spec["size"])
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv3d)]
    assert convs and all(m.kernel_size == (3, 3, 3) and m.padding == (0, 1, 1) for m in convs)


@pytest.mark.parametrize("name", ["nnunet", "vae480p"])
def test_the_full_models_run_the_layers_of_the_layer_study(name):
    """On meta tensors (nothing computed): every 3x3x3 convolution the model calls is a layer
    of ``layers3d`` (input and weight sizes, stride; the decoder's first and last aside, from
    the latent and to RGB), and the output has the model's size."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import study3d_models
    finally:
        sys.path.pop(0)
    from ucudnn.experiments import torch_study as study
    spec = study.MODELS[name]
    model, x, step = study3d_models.build(spec)
    model, x = model.to("meta"), x.to("meta")
    calls = []

    def hook(module, args, out):
        size = list(args[0].shape)
        if isinstance(module, study3d_models.CausalConv3d):
            size[2] += 2                # the frames it pads in front inside its forward
        edge = module.in_channels == spec.get("latent") or module.out_channels == 3
        if module.kernel_size == (3, 3, 3) and not edge:    # not the latent's in or RGB out
            calls.append((tuple(size), tuple(module.weight.shape), tuple(module.stride)))
    for m in model.modules():
        if isinstance(m, torch.nn.Conv3d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        y = model(x)
    layers = {(lay.x_size, lay.w_size, lay.stride)
              for lay in (study.unet_layers() if spec["kind"] == "unet" else study.vae_layers())}
    assert calls and set(calls) <= layers, sorted(set(calls) - layers)
    if step == "train":
        assert y.shape == (spec["batch"], spec["classes"]) + (spec["patch"],) * 3
    else:
        assert y.shape == (spec["batch"], 3, spec["frames"]) + tuple(spec["size"])


def test_a_model_process_that_fails_or_times_out_is_recorded(tmp_path):
    """Real model processes: one of a model the study lacks (no JSON without torch or a GPU, a
    failed record where they are) and one killed at its timeout, with the fields models.json
    keeps of every process."""
    bt = load_script("bench_torch")
    args = argparse.Namespace(out=tmp_path, iterations=1, warmup=0, engines="both", quick=True,
                              timeout=120.0)
    keys = {"model", "dtype", "side", "cap", "status", "error", "order", "exit_status", "log",
            "wall_s", "peak_gpu_memory_bytes", "nvml_error", "gpu_state", "command"}
    rec = bt._spawn(args, "no_such_model", "float32", "pytorch", "unlimited", 1,
                    tmp_path / "cache.sqlite", "pytorch")
    assert set(rec) == keys and rec["status"] == "failed" and rec["order"] == 1
    assert (tmp_path / rec["log"]).is_file() and 0 < rec["wall_s"] < 120
    assert rec["peak_gpu_memory_bytes"] is None and rec["gpu_state"] is None
    assert "model-process --model no_such_model" in rec["command"]
    args.timeout = 0.001
    rec = bt._spawn(args, "unet", "float32", "ucudnn", "64MiB", 2, tmp_path / "cache.sqlite",
                    "ucudnn")
    assert set(rec) == keys and rec["exit_status"] == -signal.SIGKILL
    assert rec["error"] == "exit status -9, no JSON (logs/002.unet.float32.ucudnn.64MiB.log)"
