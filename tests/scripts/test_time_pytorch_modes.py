"""scripts/time_pytorch.py: its arguments, the grouping of profiled ops by kind, the choice of
the fastest mode and the JSON of a net (pure functions, no torch), and, where torch is
installed, the script end to end on the CPU (a worker process per mode and process, a mode
that fails beside ones that run) and the v1 ResNet-50."""
import json
import os
import subprocess
import sys
from functools import lru_cache

import pytest

from repo_paths import SCRIPTS, load_script
from ucudnn.experiments.pytorch_modes import FP32_MODES

SCRIPT = SCRIPTS / "time_pytorch.py"


@lru_cache(maxsize=None)
def _module():
    return load_script("time_pytorch")


@pytest.fixture
def tp():
    return _module()


def _run(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


# -- arguments ---------------------------------------------------------------------------------

def test_arguments(tp):
    a = tp.parse_args([])
    assert a.mode == list(FP32_MODES) and a.net == list(tp.NETS) and a.input == "gaussian"
    assert (a.processes, a.iterations, a.warmup, a.profile, a.worker) == (3, 20, 5, False, None)
    assert tp.parse_args(["--input", "constant", "--mode", "bf16_compile"]).mode == [
        "bf16_compile"]
    assert a.compile_cache is None and tp.parse_args(["--compile-cache", "cc"]).compile_cache == "cc"
    a = tp.parse_args(["--mode", "compile", "--mode", "eager", "--mode", "compile",
                       "--net", "resnet50", "--processes", "1", "--profile"])
    assert a.mode == ["compile", "eager"] and a.net == ["resnet50"] and a.profile
    for bad in (["--mode", "fp16"], ["--processes", "0"], ["--profile-iterations", "0"],
                ["--input", "uniform"],
                ["--worker", "x.json", "--net", "alexnet"]):      # a worker: one net, one mode
        with pytest.raises(SystemExit):
            tp.parse_args(bad)


def test_help_runs_anywhere():
    r = _run("--help", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "--mode" in r.stdout and "--processes" in r.stdout and "--worker" not in r.stdout


def test_without_torch_says_so(tp):
    if tp.torch is not None:
        pytest.skip("torch is installed here")
    r = _run("--net", "cifar10", timeout=60)
    assert r.returncode == 2 and "needs PyTorch" in r.stderr


# -- the profile's kinds -----------------------------------------------------------------------

#: stacks (outermost op first) as torch.profiler gives them, eager and compiled; us: the time of
#: what the innermost op launched itself
ROWS = [
    (["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"],
     1000, "convolution"),
    (["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::add_"], 100,
     "convolution"),                                         # the bias: under the convolution
    (["autograd::engine::evaluate_function: ConvolutionBackward0", "ConvolutionBackward0",
      "aten::convolution_backward"], 2000, "convolution"),
    (["aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm"], 300,
     "batch_norm"),
    (["autograd::engine::evaluate_function: CudnnBatchNormBackward0", "CudnnBatchNormBackward0",
      "aten::cudnn_batch_norm_backward"], 400, "batch_norm"),
    (["aten::max_pool2d", "aten::max_pool2d_with_indices"], 50, "pooling"),
    (["aten::adaptive_avg_pool2d", "aten::mean"], 10, "pooling"),
    (["autograd::engine::evaluate_function: MaxPool2DWithIndicesBackward0",
      "MaxPool2DWithIndicesBackward0", "aten::max_pool2d_with_indices_backward"], 30, "pooling"),
    (["aten::relu_", "aten::clamp_min_"], 60, "relu/elementwise"),
    (["autograd::engine::evaluate_function: ThresholdBackward1", "ThresholdBackward1",
      "aten::threshold_backward"], 70, "relu/elementwise"),
    (["aten::add"], 40, "relu/elementwise"),                 # the residual add
    (["aten::dropout", "aten::native_dropout"], 5, "relu/elementwise"),
    (["aten::linear", "aten::addmm"], 20, "other"),          # not an add
    (["aten::cross_entropy_loss", "aten::log_softmax", "aten::_log_softmax"], 3, "other"),
    # compiled: Inductor's Triton kernels and extern convolutions; the graph call's hash spells
    # a kind, and counts for none
    (["Torch-Compiled Region: 0/0", "CompiledFunction", "## Call CompiledFxGraph fpoolrelu ##",
      "triton_poi_fused__native_batch_norm_legit_functional_relu_3"], 500, "batch_norm"),
    (["Torch-Compiled Region: 0/0", "CompiledFunction", "## Call CompiledFxGraph fpoolrelu ##",
      "triton_poi_fused_add_relu_5"], 80, "relu/elementwise"),
    (["Torch-Compiled Region: 0/0", "CompiledFunction", "## Call CompiledFxGraph fpoolrelu ##",
      "aten::convolution", "aten::cudnn_convolution"], 900, "convolution"),
    # named after the ops around it (an H200 run's): BatchNorm's and ReLU's backward, not a
    # convolution; a max-autotune convolution template is one
    (["autograd::engine::evaluate_function: CompiledFunctionBackward",
      "CompiledFunctionBackward", "## Call CompiledFxGraph fabc ##",
      "triton_poi_fused_convolution_backward_native_batch_norm_backward_threshold_backward_38"],
     185, "batch_norm"),
    (["CompiledFunctionBackward",
      "triton_poi_fused_add_max_pool2d_with_indices_max_pool2d_with_indices_backward_36"], 364,
     "pooling"),
    (["CompiledFunction", "triton_tem_fused_convolution_0"], 90, "convolution"),
    (["autograd::engine::evaluate_function: CompiledFunctionBackward",
      "CompiledFunctionBackward", "## Call CompiledFxGraph fabc ##",
      "triton_red_fused_sum_7"], 7, "other"),
]


def test_stack_kinds(tp):
    for stack, _, kind in ROWS:
        assert tp.stack_kind(stack) == kind, stack
    assert tp.op_kind("aten::addmm") is None and tp.op_kind("MulBackward0") == "relu/elementwise"


def test_group_profile(tp):
    rows = [{"stack": s, "us": us} for s, us, _ in ROWS]
    want = {k: 0.0 for k in tp.KINDS}
    for _, us, kind in ROWS:
        want[kind] += us
    got = tp.group_profile(rows, 2)
    assert list(got) == list(tp.KINDS)
    assert got == pytest.approx({k: v / 2e3 for k, v in want.items()})
    # kernels tied to no op (the device's total beyond the rows) are other
    total = sum(want.values())
    got = tp.group_profile(rows, 2, kernel_total_us=total + 1000)
    assert got["other"] == pytest.approx((want["other"] + 1000) / 2e3)
    assert got["convolution"] == pytest.approx(want["convolution"] / 2e3)


# -- modes, memory, the JSON of a net ----------------------------------------------------------

def _process(ms, first_s=2.0, peak=None, method="nvml"):
    return {"pid": 1, "task": "time", "median_ms": ms, "min_ms": ms - 1, "max_ms": ms + 1,
            "forward_median_ms": ms / 3, "first_iteration_s": first_s, "times_ms": [ms],
            "max_memory_reserved_bytes": 1 << 30, "peak_gpu_memory_bytes": peak,
            "memory_method": method}


def test_fastest_mode(tp):
    modes = {"eager": {"median_ms": 47.3}, "channels_last": {"median_ms": 28.1},
             "compile": {"median_ms": 20.0, "error": "InductorError: ..."}}
    assert tp.fastest_mode(modes) == "channels_last"          # a failed mode is never picked
    assert tp.fastest_mode({"eager": {"median_ms": None}, "compile": {"error": "x"}}) is None
    assert tp.fastest_mode({}) is None


def test_process_memory(tp):
    assert tp.process_memory(9 << 30, None, 8 << 30) == (9 << 30, "nvml")
    peak, method = tp.process_memory(None, "NVML unavailable: ImportError: no pynvml", 8 << 30)
    assert peak == 8 << 30
    assert method.startswith("torch.cuda.max_memory_reserved (NVML unavailable")
    assert tp.process_memory(None, None, None)[0] is None
    assert tp.process_memory(None, None, None, cuda=False) == (None, "none: not a CUDA device")


def test_run_worker_records_a_worker_that_fails_or_times_out(tp, tmp_path):
    """Real worker processes: one refused by its own arguments (exit status 2, no JSON, the
    same with or without torch or a GPU) and one killed at its timeout, each recorded with its
    log's tail and, for a CUDA device, the reason it has no peak memory."""
    args = tp.parse_args(["--timeout", "120"])
    r = tp.run_worker(args, "cifar10", "no_such_mode", "time", str(tmp_path), 1)
    assert set(r) == {"pid", "wall_s", "error", "log_tail", "peak_gpu_memory_bytes",
                      "memory_method", "gpu_state"}
    assert r["error"] == "worker exited with status 2 and no result"
    assert "invalid choice: 'no_such_mode'" in r["log_tail"]
    assert r["pid"] != os.getpid() and 0 < r["wall_s"] < 120
    assert r["peak_gpu_memory_bytes"] is None and r["gpu_state"] is None
    assert r["memory_method"].startswith("none (")     # NVML's reason, or never listed
    slow = tp.parse_args(["--timeout", "0.001", "--device", "cpu"])
    r = tp.run_worker(slow, "cifar10", "eager", "time", str(tmp_path), 2)
    assert r["error"] == "timed out after 0.001 s" and "log_tail" in r
    assert (r["peak_gpu_memory_bytes"], r["memory_method"]) == (None,
                                                                "none: not a CUDA device")


def test_net_record_and_summary(tp):
    gib = 1 << 30
    eager = tp.summarize_mode([_process(47.0, 3.0, 10 * gib), _process(47.6, 2.0, 11 * gib),
                               _process(47.3, 2.5, 10 * gib)])
    assert eager["per_process_ms"] == [47.0, 47.6, 47.3] and eager["median_ms"] == 47.3
    assert eager["first_iteration_s"] == 2.5
    assert eager["per_process_first_iteration_s"] == [3.0, 2.0, 2.5]
    assert eager["max_memory_reserved_bytes"] == 1 << 30
    assert eager["peak_gpu_memory_bytes"] == 11 * gib and eager["memory_method"] == "nvml"
    assert "error" not in eager and len(eager["processes"]) == 3
    raw_profile = {"clock": "cuda", "iterations": 2, "kernel_total_us": 5000.0,
                   "rows": [{"stack": ["aten::convolution", "aten::cudnn_convolution"],
                             "us": 3000.0},
                            {"stack": ["aten::max_pool2d"], "us": 200.0},
                            {"stack": ["aten::relu_"], "us": 400.0}],
                   "top_ops_us": {"aten::cudnn_convolution": 3000.0}}
    fallback = "torch.cuda.max_memory_reserved (NVML unavailable: x): ..."
    cl = tp.summarize_mode([_process(28.1, 1.0, 9.8 * gib, fallback)], raw_profile)
    assert cl["profile"]["per_iteration_ms"] == pytest.approx(
        {"convolution": 1.5, "batch_norm": 0.0, "pooling": 0.1, "relu/elementwise": 0.2,
         "other": 0.7})
    assert cl["profile"]["top_ops_ms"] == {"aten::cudnn_convolution": 1.5}
    compiled = tp.summarize_mode([dict(pid=2, task="time", error="InductorError: no compiler",
                                       peak_gpu_memory_bytes=None, memory_method="nvml")],
                                 {"error": "never ran"})
    assert compiled["error"] == "InductorError: no compiler" and compiled["median_ms"] is None
    assert compiled["profile"] == {"error": "never ran"}

    rec = tp.net_record("resnet18", None, {"eager": eager, "channels_last": cl,
                                           "compile": compiled})
    assert (rec["batch"], rec["input_shape"]) == (256, [256, 3, 224, 224])
    assert rec["pytorch_mode"] == "channels_last" and rec["pytorch_ms"] == 28.1
    assert rec["median_ms"] == 28.1                        # what `ucudnn reproduce` reads
    assert rec["peak_gpu_memory_bytes"] == 9.8 * gib
    assert rec["by_type_ms"] == pytest.approx({"convolution": 1.5, "batchnorm": 0.0,
                                               "other": 0.8, "relu": 0.2})
    json.dumps(rec)
    assert tp.summary_line("resnet18", rec) == (
        "resnet18 b256: eager 47.3 ms | channels_last 28.1 ms | compile failed"
        " -> fastest channels_last 28.1 ms (peak 9.8 GiB)")

    # a bf16 mode is a row of its own, never the fp32 baseline, however fast
    bf16 = tp.summarize_mode([_process(12.0, 1.0, 6 * gib)])
    rec = tp.net_record("resnet18", None, {"eager": eager, "channels_last": cl,
                                           "bf16_compile": bf16})
    assert rec["pytorch_mode"] == "channels_last" and rec["median_ms"] == 28.1
    assert (rec["bf16_mode"], rec["bf16_ms"], rec["bf16_peak_gpu_memory_bytes"]) == (
        "bf16_compile", 12.0, 6 * gib)

    none_ran = tp.net_record("resnet50", 64, {"compile": compiled})
    assert none_ran["pytorch_mode"] is None and "median_ms" not in none_ran
    assert none_ran["batch"] == 64 and "compile: InductorError" in none_ran["error"]
    assert tp.summary_line("resnet50", none_ran) == "resnet50 b64: compile failed -> no mode ran"


# -- with torch, on the CPU --------------------------------------------------------------------

def test_cpu_smoke(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "pt.json"
    r = _run("--device", "cpu", "--net", "cifar10", "--batch", 4, "--iterations", 2,
             "--warmup", 1, "--processes", 2, "--mode", "eager", "--mode", "channels_last",
             "--profile", "--profile-iterations", 1, "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["meta"]["torch_version"] and "--mode channels_last" in doc["meta"]["command_line"]
    net = doc["nets"]["cifar10"]
    assert net["pytorch_mode"] in ("eager", "channels_last")
    assert net["median_ms"] == net["pytorch_ms"] == net["modes"][net["pytorch_mode"]]["median_ms"]
    pids = set()
    for mode, rec in net["modes"].items():
        assert "error" not in rec, rec
        assert len(rec["per_process_ms"]) == 2 and all(ms > 0 for ms in rec["per_process_ms"])
        assert rec["first_iteration_s"] > 0
        assert rec["peak_gpu_memory_bytes"] is None and rec["memory_method"].startswith("none")
        pids |= {p["pid"] for p in rec["processes"]}
        prof = rec["profile"]
        assert set(prof["per_iteration_ms"]) == set(("convolution", "batch_norm", "pooling",
                                                     "relu/elementwise", "other"))
        assert prof["per_iteration_ms"]["convolution"] > 0 and prof["clock"] == "host (cpu)"
    assert len(pids) == 4 and os.getpid() not in pids      # a process each
    line = next(l for l in r.stdout.splitlines() if l.startswith("cifar10 b4: "))
    assert "eager" in line and "channels_last" in line and "-> fastest" in line


def test_failed_mode_is_recorded_and_the_others_run(tmp_path):
    """compile with no working C++ compiler (Inductor's CPU code needs one) fails in its first
    process, which is all it runs; eager still runs both of its processes."""
    pytest.importorskip("torch")
    out = tmp_path / "pt.json"
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"))
    r = _run("--device", "cpu", "--net", "cifar10", "--batch", 4, "--iterations", 1,
             "--warmup", 1, "--processes", 2, "--mode", "eager", "--mode", "compile",
             "--json", out, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    net = json.loads(out.read_text())["nets"]["cifar10"]
    compiled = net["modes"]["compile"]
    assert compiled["error"] and len(compiled["processes"]) == 1, compiled
    assert compiled["processes"][0]["traceback"] and compiled["median_ms"] is None
    assert len(net["modes"]["eager"]["per_process_ms"]) == 2
    assert net["pytorch_mode"] == "eager"
    assert "compile failed -> fastest eager" in r.stdout


def test_no_cuda_fails_every_mode(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    out = tmp_path / "pt.json"
    r = _run("--net", "cifar10", "--processes", 1, "--mode", "eager", "--json", out)
    assert r.returncode == 1
    net = json.loads(out.read_text())["nets"]["cifar10"]
    assert net["pytorch_mode"] is None and "median_ms" not in net
    assert "CUDA is not available" in net["modes"]["eager"]["error"]


def test_inputs_are_caffes(tp):
    """gaussian: the numbers Caffe's input drawn once holds (Note [Inputs drawn once]);
    constant: 1.0, the input of a net whose DummyData is constant."""
    torch = pytest.importorskip("torch")
    from ucudnn.experiments.caffe_input import gaussian
    cpu = torch.device("cpu")
    shape = (2, 3, 8, 8)
    assert torch.equal(tp.input_data(shape, "gaussian", cpu), torch.from_numpy(gaussian(shape)))
    assert torch.equal(tp.input_data(shape, "constant", cpu), torch.ones(shape))


def test_resnet50_is_caffe_v1(tp):
    torch = pytest.importorskip("torch")
    model, shape, classes = tp.build_net("resnet50")
    assert shape == (128, 3, 224, 224) and classes == 1000
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    blocks = [m for m in model.modules() if isinstance(m, tp.Bottleneck)]
    assert len(blocks) == 16
    down = [b for b in blocks if b.branch1 is not None]
    assert [b.branch1[0].stride for b in down] == [(1, 1), (2, 2), (2, 2), (2, 2)]
    for b in down:                                         # v1: the stride on the first 1x1
        assert b.branch2a[0].stride == b.branch1[0].stride and b.branch2b[0].stride == (1, 1)
    with torch.no_grad():
        features = model[:-3](torch.randn(1, 3, 224, 224))
    assert features.shape == (1, 2048, 7, 7)
    try:
        import torchvision
    except ImportError:
        return
    # torchvision's v1.5 with the stride moved (module docstring): the same convolutions
    tv = torchvision.models.resnet50(weights=None)
    for b in tv.modules():
        if isinstance(b, torchvision.models.resnet.Bottleneck) and b.downsample is not None:
            b.conv1.stride, b.conv2.stride = b.conv2.stride, (1, 1)

    def convs(m):
        return [(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding)
                for c in m.modules() if isinstance(c, torch.nn.Conv2d)]
    assert len(convs(model)) == 53 and convs(model) == convs(tv)
