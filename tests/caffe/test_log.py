"""The `caffe time` log parser on logs captured on the GPU host (tests/data/caffe_logs/: the
patched Caffe, H200, 2026-11-29, `ucudnn reproduce` at batch 256, 10 iterations; and
``alexnet_undivided_512MiB_whole_iterations.log``, 2026-12-03, with caffe_patch/0006's
whole iterations, 20 iterations)."""
import re
import statistics

import pytest

from repo_paths import LOGS
from ucudnn.caffe.log import CaffeLogError, parse_caffe_time
ALEXNET_CONVS = ["conv1", "conv2", "conv3", "conv4", "conv5"]


def _log(name):
    return (LOGS / name).read_text(encoding="utf-8")


def test_stock_caffe_log():
    t = parse_caffe_time(_log("alexnet_stock.log"))
    assert t.iterations == 10 and len(t.iteration_ms) == 10
    # every layer of the train net, forward and backward
    assert list(t.layers)[:3] == ["data", "conv1", "relu1"] and len(t.layers) == 24
    assert all(set(v) == {"forward", "backward"} for v in t.layers.values())
    # the averages Caffe prints are consistent with the per-iteration lines
    assert t.forward_backward_ms == pytest.approx(statistics.mean(t.iteration_ms), rel=0.02)
    assert t.median_ms == statistics.median(t.iteration_ms)
    assert t.forward_ms + t.backward_ms == pytest.approx(t.forward_backward_ms, rel=0.02)
    assert t.gpu == 0


def test_ucudnn_log_parses_caffes_lines_only():
    """ucudnn's own lines are for people: the timing parser skips them (plans are read from
    the plan records, tests/measure/test_records.py)."""
    t = parse_caffe_time(_log("alexnet_all_8MiB.log"))
    assert t.iterations == 10 and set(ALEXNET_CONVS) <= set(t.layers)
    assert not hasattr(t, "kernels") and not hasattr(t, "ilp_solve_s")
    t = parse_caffe_time(_log("alexnet_ilp_8MiB.log"))
    assert t.median_ms > 0


def test_resnet_log():
    t = parse_caffe_time(_log("resnet18_powerOfTwo_64MiB.log"))
    assert "res5b_branch2b" in t.layers and "bn_conv1" in t.layers


def test_failed_run_is_rejected_with_reason():
    text = _log("alexnet_powerOfTwo_64MiB_failed.log")
    with pytest.raises(CaffeLogError, match="not the log of a finished 'caffe time' run"):
        parse_caffe_time(text)


def test_missing_iterations_rejected():
    text = _log("alexnet_stock.log")
    cut = "\n".join(l for l in text.splitlines() if "Iteration: 4 " not in l)
    with pytest.raises(CaffeLogError, match="iteration lines"):
        parse_caffe_time(cut)


def _with_whole_iterations(text, times):
    """``text`` with the lines caffe_patch/0006 adds after the per-layer timing (Note [Whole
    iterations] in Caffe's tools/caffe.cpp), in glog's format."""
    lines = [f"I1203 20:01:0{i % 10}.000000  4242 caffe.cpp:424] Whole iteration: {i + 1} "
             f"forward-backward time: {t} ms." for i, t in enumerate(times)]
    med = statistics.median(times)
    lines.append(f"I1203 20:01:09.000000  4242 caffe.cpp:441] Median whole Forward-Backward: "
                 f"{med} ms.")
    return text + "\n" + "\n".join(lines) + "\n"


def test_whole_iterations_give_the_median_when_the_log_has_them():
    text = _log("alexnet_stock.log")
    plain = parse_caffe_time(text)
    assert plain.timing == "per layer" and plain.whole_iteration_ms == []
    assert plain.median_ms == plain.per_layer_median_ms
    whole = [5.0, 4.0, 4.5, 4.25, 9.0, 4.75, 4.1, 4.2, 4.3, 4.4]
    t = parse_caffe_time(_with_whole_iterations(text, whole))
    assert t.timing == "whole iterations" and t.whole_iteration_ms == whole
    assert t.median_ms == statistics.median(whole) != t.per_layer_median_ms
    assert t.per_layer_median_ms == plain.median_ms and t.layers == plain.layers


def test_missing_whole_iterations_rejected():
    text = _with_whole_iterations(_log("alexnet_stock.log"), [4.0] * 9)
    with pytest.raises(CaffeLogError, match="whole-iteration lines"):
        parse_caffe_time(text)


def test_whole_iterations_of_a_real_log():
    """A log of Caffe with caffe_patch/0006: the whole iterations after the per-layer ones,
    their median as Caffe printed it."""
    text = _log("alexnet_undivided_512MiB_whole_iterations.log")
    t = parse_caffe_time(text)
    assert t.timing == "whole iterations" and len(t.whole_iteration_ms) == t.iterations == 20
    printed = float(re.search(r"Median whole Forward-Backward: ([\d.]+) ms", text).group(1))
    assert t.median_ms == pytest.approx(printed, abs=1e-4)
    # the per-layer timer waits for the GPU at every layer: its iterations take longer
    assert t.per_layer_median_ms > t.median_ms
    assert set(ALEXNET_CONVS) <= set(t.layers)
