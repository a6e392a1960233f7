"""A Caffe prototxt as ``ucudnn plan --prototxt`` and ``ucudnn prototxt`` see it
(ucudnn.caffe.prototxt): its convolutions, its ucudnn settings, the checks in both phases, the
shipped nets."""
from collections import Counter

import pytest

from net_text import HEAD, conv as _conv
from repo_paths import NETS, SHARED, SHIPPED, needs_shared
from ucudnn.caffe.prototxt import (PrototxtError, check_net, load_prototxt, merge_shapes,
                                   parse_net_text, read_prototxt)
from ucudnn.plan.layers import LayerSpec, read_layers
from ucudnn.plan.settings import PlanSettings


def test_merge_shapes_sums_counts():
    a = LayerSpec("a", 8, 3, 9, 9, 4, 3, 3)
    b = LayerSpec("b", 8, 3, 9, 9, 4, 3, 3, count=2)
    c = LayerSpec("c", 8, 3, 9, 9, 4, 3, 3, bwd_data=False)
    assert merge_shapes([a, c, b]) == [LayerSpec("a", 8, 3, 9, 9, 4, 3, 3, count=3), c]
    # per-axis geometry tells layers apart
    row = LayerSpec("row", 8, 3, 9, 9, 4, 1, 7, pad=(0, 3))
    col = LayerSpec("col", 8, 3, 9, 9, 4, 7, 1, pad=(3, 0))
    assert merge_shapes([row, col]) == [row, col]


def test_load_prototxt(tmp_path):
    path = tmp_path / "n.prototxt"
    path.write_text("ucudnn_param { policy: ALL workspace_limit: 1024 }\n" + HEAD
                    + _conv("a", "data", 4, 3) + _conv("b", "a", 4, 1))
    net = load_prototxt(path, batch=4)
    assert (net.source, net.phase) == (str(path), "TRAIN")
    assert [(l.name, l.n) for l in net.layers] == [("a", 4), ("b", 4)]
    assert net.net_ucudnn == PlanSettings(policy="all", limit=1024)
    assert net.ucudnn == {"a": net.net_ucudnn, "b": net.net_ucudnn}
    # a net without convolutions has no layers to plan
    path.write_text(HEAD)
    assert load_prototxt(path).layers == []


def test_check_net_refuses_in_either_phase(tmp_path):
    """What Caffe's Net::Init refuses in the TEST phase only is refused too (``ucudnn
    prototxt`` writes nets for both phases)."""
    text = HEAD + _conv("a", "data", 4, 3) + \
        _conv("t", "a", 4, 15).replace("convolution_param", "include { phase: TEST } "
                                                            "convolution_param")
    net = parse_net_text(text, "n.prototxt")
    assert [l.name for l in read_prototxt_text(text, "TRAIN")] == ["a"]
    line = text[:text.index('layer { name: "t"')].count("\n") + 1
    with pytest.raises(PrototxtError, match=rf"^n.prototxt:{line}: layer 't' \(type Convolution\): "
                                            "the kernel 15x15 is larger than the padded input"):
        check_net(net, text, "n.prototxt")
    bad_param = HEAD + _conv("a", "data", 4, 3).replace(
        "convolution_param", "include { phase: TEST } ucudnn_param { workspace_limit: -1 } "
                             "convolution_param")
    with pytest.raises(PrototxtError, match=r"^n.prototxt:\d+:\d+: layer 'a': field "
                                            r"'ucudnn_param.workspace_limit' must be >= 0"):
        check_net(parse_net_text(bad_param), bad_param, "n.prototxt")
    with pytest.raises(PrototxtError, match="^e.prototxt: a net without layers"):
        check_net(parse_net_text('name: "empty"'), 'name: "empty"', "e.prototxt")
    ok = HEAD + _conv("a", "data", 4, 3)
    check_net(parse_net_text(ok), ok, "ok.prototxt")


def read_prototxt_text(text, phase):
    from ucudnn.caffe.prototxt import conv_layers
    return conv_layers(parse_net_text(text), phase)


# -- the full networks ------------------------------------------------------------------------

def _shape_counts(layers):
    """{geometry and bwd_data: kernel instances per iteration}."""
    out = Counter()
    for l in layers:
        out[l.n, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride, l.dilation, l.groups,
            l.bwd_data] += l.count
    return out


@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_full_networks_match_the_shipped_layer_lists(net):
    inferred = read_prototxt(NETS / f"{net}.prototxt")
    shipped = read_layers(SHIPPED / f"{net}_layers.csv")
    assert _shape_counts(inferred) == _shape_counts(shipped)
    assert [l.name for l in inferred if not l.bwd_data] == ["conv1"]
    expected_calls = {"alexnet": 8, "resnet18": 20}[net]     # cuDNN calls per op and pass
    assert sum(l.count * l.groups for l in inferred) == expected_calls
    assert all(l.n == 64 for l in read_prototxt(NETS / f"{net}.prototxt", batch=64))


@needs_shared
@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_full_networks_match_the_benchmarked_shapes(net):
    inferred = read_prototxt(NETS / f"{net}.prototxt")
    shared = read_layers(SHARED / f"layers_{net}.csv")
    # the shared list gives each shape once, per group, without counts or bwd_data
    geometry = lambda ls: {(l.n, l.c // l.groups, l.h, l.w, l.k // l.groups, l.r, l.s, l.pad,  # noqa
                            l.stride) for l in ls}
    assert geometry(inferred) == geometry(shared)


def test_resnet50_is_bottleneck_v1():
    """He et al.'s ResNet-50: 53 convolutions (conv1, 16 blocks of three, 4 projections); a
    downsampling block strides its first 1x1 and its shortcut, never its 3x3 (v1)."""
    convs = {l.name: l for l in read_prototxt(NETS / "resnet50.prototxt")}
    assert len(convs) == 53 and all(l.n == 128 for l in convs.values())
    assert [n for n in convs if n.endswith("_branch1")] == [
        "res2a_branch1", "res3a_branch1", "res4a_branch1", "res5a_branch1"]
    for stage, size in (("3a", 56), ("4a", 28), ("5a", 14)):
        for branch in ("branch1", "branch2a"):
            l = convs[f"res{stage}_{branch}"]
            assert (l.r, l.stride, l.h) == (1, (2, 2), size), l
        assert convs[f"res{stage}_branch2b"].stride == (1, 1)
    last = convs["res5c_branch2c"]
    assert (last.c, last.h, last.k, last.r) == (512, 7, 2048, 1)
    assert [l.name for l in convs.values() if not l.bwd_data] == ["conv1"]


def test_cifar10_quick_net_shapes():
    convs = read_prototxt(NETS / "cifar10.prototxt")
    assert [(l.name, l.n, l.c, l.h, l.k, l.r, l.pad, l.bwd_data) for l in convs] == [
        ("conv1", 1024, 3, 32, 32, 5, (2, 2), False), ("conv2", 1024, 32, 16, 32, 5, (2, 2), True),
        ("conv3", 1024, 32, 8, 64, 5, (2, 2), True)]
