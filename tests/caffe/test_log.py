"""The `caffe time` log parser on logs captured on the GPU host (tests/data/caffe_logs/: the
patched Caffe, H200, 2026-11-29, `ucudnn reproduce` at batch 256, 10 iterations)."""
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
