"""scripts/kernel_timeline.py's analysis of a Chrome trace (pure functions, no GPU): busy time
as the union of overlapping kernels, idle time and the gaps between them, the kinds of the
kernel names seen in Caffe's and PyTorch's traces, and the per-iteration division; and its
command line's one-line errors where the prototxt, PyTorch, a GPU or pycaffe is missing."""
import json
import re
import subprocess
import sys

import pytest

from repo_paths import SCRIPTS, load_script


@pytest.fixture(scope="module")
def kt():
    return load_script("kernel_timeline")


def _trace(tmp_path, ops, extra=()):
    events = [{"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
              for name, ts, dur, cat in ops]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events + list(extra)}))
    return path


def test_busy_is_the_union_of_overlapping_kernels_and_idle_the_rest(kt, tmp_path):
    # conv 0-10 and a BatchNorm kernel 5-15 on another stream overlap by 5 us; a gap of
    # 15 us; an Eltwise kernel 30-40, a memset 40-42. Host events are not GPU time.
    path = _trace(tmp_path, [("convA", 0, 10, "kernel"), ("BatchNormX", 5, 10, "kernel"),
                             ("EltwiseY", 30, 10, "kernel"), ("Memset", 40, 2, "gpu_memset")],
                  extra=[{"ph": "X", "cat": "cpu_op", "name": "host", "ts": 0, "dur": 100}])
    r = kt.analyse(path, iterations=1, gap_us=5)
    assert r["span_ms"] == pytest.approx(0.042)
    assert r["busy_ms"] == pytest.approx(0.027)
    assert r["idle_ms"] == pytest.approx(0.015)
    assert r["kernel_ms"] == pytest.approx(0.032)
    assert r["launches"] == 4
    assert r["gaps"] == [{"after": "BatchNormX", "before": "EltwiseY", "per_iteration": 1.0,
                          "ms": pytest.approx(0.015)}]


def test_a_gap_is_counted_from_the_kernel_that_ends_last(kt, tmp_path):
    # a long kernel 0-50 spans a short one 10-12: the gap to the kernel at 60 follows the
    # long one, and gaps under the threshold are idle time but not listed
    path = _trace(tmp_path, [("long", 0, 50, "kernel"), ("short", 10, 2, "kernel"),
                             ("next", 60, 5, "kernel"), ("close", 67, 1, "kernel")])
    r = kt.analyse(path, iterations=2, gap_us=5)
    assert r["idle_ms"] == pytest.approx((10 + 2) / 2e3)
    assert [(g["after"], g["before"]) for g in r["gaps"]] == [("long", "next")]
    assert r["gaps"][0]["per_iteration"] == 0.5


def test_time_by_kind_and_top_kernels_per_iteration(kt, tmp_path):
    path = _trace(tmp_path, [("void caffe::BatchNormPartialSumsNhwc<float, 4, false, true>",
                              0, 30, "kernel"),
                             ("sm90_xmma_wgrad_indexed_implicit_gemm_f32f32", 30, 50, "kernel"),
                             ("sm90_xmma_wgrad_indexed_implicit_gemm_f32f32", 80, 50, "kernel")])
    r = kt.analyse(path, iterations=2, gap_us=5)
    assert r["by_kind_ms"] == {"convolution": pytest.approx(0.05),
                               "batch_norm": pytest.approx(0.015)}
    top = r["top_kernels"][0]
    assert top["per_iteration"] == 1 and top["mean_us"] == 50 and top["ms"] == pytest.approx(.05)


@pytest.mark.parametrize("name, kind", [
    ("void caffe::BatchNormPartialSumsNhwc<float, 4, false, true>(float const*)", "batch_norm"),
    ("triton_poi_fused_add_native_batch_norm_backward_threshold_backward_51", "batch_norm"),
    ("sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc", "convolution"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x256_16x3_nt_align4>",
     "convolution"),
    ("caffe::sync_conv_groups()", "convolution"),
    ("void caffe::MaxPoolBackwardNhwc<float, 4>(int)", "pooling"),
    ("triton_poi_fused_add_threshold_backward_34", "elementwise"),
    ("void cudnn::ops::softmax_fw_kernel<2, float>", "softmax/loss"),
    ("Memset (Device)", "other"),
])
def test_kernel_kinds(kt, name, kind):
    assert kt.kind(name) == kind


def test_a_trace_without_kernels_is_an_error(kt, tmp_path):
    with pytest.raises(SystemExit, match="no kernels"):
        kt.analyse(_trace(tmp_path, []), iterations=1, gap_us=5)


def test_the_command_line_says_what_is_missing_without_a_traceback(tmp_path):
    script = SCRIPTS / "kernel_timeline.py"
    r = subprocess.run([sys.executable, str(script), "caffe", str(tmp_path / "none.prototxt")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "none.prototxt: no such prototxt" in r.stderr
    assert "Traceback" not in r.stderr
    model = tmp_path / "net.prototxt"
    model.write_text('name: "n"\n')
    r = subprocess.run([sys.executable, str(script), "caffe", str(model)],
                       capture_output=True, text=True, timeout=120)
    # without torch, without a GPU or without pycaffe: one line that says which
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert re.search(r"needs (PyTorch|a CUDA GPU|pycaffe)", r.stderr)
