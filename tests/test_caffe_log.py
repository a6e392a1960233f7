"""The `caffe time` log parser on logs captured on the GPU host (tests/data/caffe_logs/: the
patched Caffe, H200, 2026-11-29, `ucudnn reproduce` at batch 256, 10 iterations)."""
import re
import statistics
from pathlib import Path

import pytest

from ucudnn.caffe.log import CaffeLogError, kernel_plans, parse_caffe_time

LOGS = Path(__file__).parent / "data" / "caffe_logs"
ALEXNET_CONVS = ["conv1", "conv2", "conv3", "conv4", "conv5"]


def _log(name):
    return (LOGS / name).read_text(encoding="utf-8")


def test_stock_caffe_log():
    t = parse_caffe_time(_log("alexnet_stock.log"))
    assert t.iterations == 10 and len(t.iteration_ms) == 10
    assert t.kernels == {} and t.predicted_conv_ms() is None and t.ilp_solve_s is None
    # every layer of the train net, forward and backward
    assert list(t.layers)[:3] == ["data", "conv1", "relu1"] and len(t.layers) == 24
    assert all(set(v) == {"forward", "backward"} for v in t.layers.values())
    # the averages Caffe prints are consistent with the per-iteration lines
    assert t.forward_backward_ms == pytest.approx(statistics.mean(t.iteration_ms), rel=0.02)
    assert t.median_ms == statistics.median(t.iteration_ms)
    assert t.forward_ms + t.backward_ms == pytest.approx(t.forward_backward_ms, rel=0.02)
    assert t.gpu == 0


def test_ucudnn_log_has_plans_and_planning_times():
    t = parse_caffe_time(_log("alexnet_all_8MiB.log"))
    assert sorted({k.layer for k in t.kernels.values()}) == ALEXNET_CONVS
    assert len(t.kernels) == 15
    for k in t.kernels.values():
        assert k.ws_bytes <= 8 << 20 and k.predicted_ms > 0
        assert k.sizes == 256 and k.bench_s >= 0 and k.plan_s >= 0   # policy all: 1..256
        assert sum(int(c.split("x")[0]) * int(c.split("x")[1].split(":")[0])
                   for c in k.plan.split(", ")) == 256               # chunks cover the batch
    assert t.bench_s == pytest.approx(sum(k.bench_s for k in t.kernels.values()))
    assert t.replans == 0


def test_ilp_log():
    t = parse_caffe_time(_log("alexnet_ilp_8MiB.log"))
    assert t.ilp_solve_s == pytest.approx(0.011)
    assert t.ilp_budget_bytes == 23 * (8 << 20)   # 14 kernels, 23 instances (groups)


def test_resnet_log():
    t = parse_caffe_time(_log("resnet18_powerOfTwo_64MiB.log"))
    assert len(t.kernels) == 20 * 3
    assert all(k.sizes == 9 for k in t.kernels.values())       # 1, 2, ..., 128, 256
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


def test_group_count_and_replan_lines():
    """Lines the current patch writes (group count, a failed allocation)."""
    text = re.sub(r" B workspace\n", " B workspace, 2 groups\n", _log("alexnet_all_8MiB.log"),
                  count=1)
    text += ("W20261129 21:00:00.000000  4242 cudnn_conv_layer.cpp:323] layer conv2: ucudnn: "
             "cannot allocate 123 B of workspace; planning again within 61 B per kernel\n")
    t = parse_caffe_time(text)
    assert sum(k.groups for k in t.kernels.values()) == 16
    assert t.replans == 1


def test_kernel_plans_lists_every_plan_line_with_its_batch():
    plans = kernel_plans(_log("alexnet_all_8MiB.log"))
    assert len(plans) == 15 and plans[0].layer == "conv1"
    assert {k.batch for k in plans} == {256}           # every plan covers the mini-batch
    assert any(len(k.plan.split(",")) > 1 for k in plans)   # some are split
    # a log with the same kernel planned twice (train and test nets): both kept, in order
    line = "I20261129 23:26:30.1 42 ucudnn.cpp:128] ucudnn: layer conv1 fwd: {}, 1.5 ms " \
           "predicted, 0 B workspace, 1 group"
    twice = kernel_plans("\n".join([line.format("32x2:algo1"), "other",
                                     line.format("16x1:algo0")]))
    assert [(k.batch, k.groups) for k in twice] == [(64, 1), (16, 1)]
