"""Per-axis geometry end to end: Inception's 1x7 and 7x1 layers (kernel, pad) through the
layer-list CSV, the planner, the shipped data's lookup and the plan records."""

from ucudnn.caffe import records as rr
from ucudnn.measure import records as rw
from ucudnn.measure import runtime, shipped
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.layers import LayerSpec, read_layers, write_layers
from ucudnn.plan.network import plan_network
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import AlgoPerf

ROW = LayerSpec("mixed_6b_1x7", 32, 128, 17, 17, 128, 1, 7, pad=(0, 3))
COL = LayerSpec("mixed_6b_7x1", 32, 128, 17, 17, 192, 7, 1, pad=(3, 0))
STRIDED = LayerSpec("reduce_3x3", 32, 192, 17, 17, 192, 3, 3, pad=(0, 1), stride=(2, 1))


def _model(kern, b):
    """Time and workspace by the kernel's width and height: the two orientations differ
    (algorithm 1 costs 0.05 ms per call)."""
    s = kern.shape
    return [AlgoPerf(0, 0.01 * b * s.r + 0.02 * b * s.s, 0),
            AlgoPerf(1, 0.004 * b * s.r + 0.002 * b * s.s + 0.05, b * 1000 * s.s)]


def test_through_the_csv(tmp_path):
    layers = [ROW, COL, STRIDED]
    assert [l.out_hw for l in layers] == [(17, 17), (17, 17), (8, 17)]
    write_layers(tmp_path / "inception.csv", layers)
    assert read_layers(tmp_path / "inception.csv") == layers
    kernels = [ConvShape.from_layer(l) for l in layers]
    assert [(k.r, k.s, k.pad_h, k.pad_w, k.stride_h, k.stride_w) for k in kernels] == [
        (1, 7, 0, 3, 1, 1), (7, 1, 3, 0, 1, 1), (3, 3, 0, 1, 2, 1)]
    assert len({k.key() for k in kernels}) == 3


def test_through_the_planner(fake_core):
    """Each orientation is planned from its own measurements (the 7x1's algorithm 1 needs a
    seventh of the 1x7's workspace per sample)."""
    fake_core.model = _model
    layers = [ROW, COL]
    benches = {}
    for l in layers:
        for op in l.ops:
            kern = fake_core.Kernel(ConvShape.from_layer(l), op, l.n, name=l.name)
            benches[l.name, op] = {b: fake_core.perfs(kern, b) for b in (1, 2, 4, 8, 16, 32)}
    plan = plan_network(layers, benches, PlanSettings(limit=100_000))
    fwd = {k.layer: k.plan for k in plan.kernels if k.op == "fwd"}
    assert fwd["mixed_6b_1x7"].micro_batches == [8] * 4        # 7000 B per sample
    assert fwd["mixed_6b_7x1"].micro_batches == [32]           # 1000 B per sample
    assert all(k.plan.ws_bytes <= 100_000 for k in plan.kernels)


def test_the_shipped_data_does_not_have_them():
    benches, missing = shipped.lookup([ROW, COL])
    assert benches == {}
    assert missing["mixed_6b_1x7", "fwd"] == ("kernel not in the shipped data (C=128 17x17 "
                                              "K=128 1x7 pad 0x3 stride 1, fwd)")
    assert missing["mixed_6b_7x1", "bwd_filter"] == ("kernel not in the shipped data (C=128 "
                                                     "17x17 K=192 7x1 pad 3x0 stride 1, "
                                                     "bwd_filter)")


def test_the_plan_records_keep_both_axes(fake_core, tmp_path, monkeypatch):
    fake_core.model = _model
    monkeypatch.setenv(rw.ENV, str(tmp_path / "r.jsonl"))
    runtime.plan_net([ROW, COL, STRIDED], {l.name: PlanSettings(limit=100_000)
                                           for l in (ROW, COL, STRIDED)})
    recs = rr.read_records(tmp_path / "r.jsonl")
    shapes = {r["layer"]: r["shape"] for r in recs if r["kind"] == "kernel"}
    assert {f: shapes["mixed_6b_1x7"][f] for f in ("r", "s", "pad_h", "pad_w")} == \
        {"r": 1, "s": 7, "pad_h": 0, "pad_w": 3}
    assert {f: shapes["mixed_6b_7x1"][f] for f in ("r", "s", "pad_h", "pad_w")} == \
        {"r": 7, "s": 1, "pad_h": 3, "pad_w": 0}
    assert {f: shapes["reduce_3x3"][f] for f in ("stride_h", "stride_w", "pad_h", "pad_w")} == \
        {"stride_h": 2, "stride_w": 1, "pad_h": 0, "pad_w": 1}
    # the records' shape is the kernel the cache keys on
    assert ConvShape(**{k: tuple(v) if isinstance(v, list) else v
                        for k, v in shapes["mixed_6b_1x7"].items()}) == ConvShape.from_layer(ROW)
