"""The shipped H200 data, found by kernel identity (ucudnn.measure.shipped)."""
import re

import pytest

from repo_paths import NETS, SHIPPED as DATA
from ucudnn.measure import shipped
from ucudnn.measure.cache import CacheKey
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.layers import LayerSpec
from ucudnn.plan.network import plan_network
from ucudnn.plan.settings import PlanSettings
from ucudnn.plan.table import group_by_kernel, read_table
MiB = 1 << 20
SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def L(name, c, hw, k, f, pad=0, stride=1, groups=1, bwd_data=True, n=256):
    return LayerSpec(name, n, c, hw, hw, k, f, f, pad, stride, groups=groups, bwd_data=bwd_data)


# The convolution layers of prototxt/*.prototxt as Caffe sees them (batch 256, train phase):
# C and K total, Caffe's group count (Note [Layers, groups and counts]).
ALEXNET = [L("conv1", 3, 227, 96, 11, stride=4, bwd_data=False),
           L("conv2", 96, 27, 256, 5, pad=2, groups=2),
           L("conv3", 256, 13, 384, 3, pad=1),
           L("conv4", 384, 13, 384, 3, pad=1, groups=2),
           L("conv5", 384, 13, 256, 3, pad=1, groups=2)]


def _resnet18():
    layers = [L("conv1", 3, 224, 64, 7, pad=3, stride=2, bwd_data=False)]
    c, hw = 64, 56
    for stage, k in ((2, 64), (3, 128), (4, 256), (5, 512)):
        for block in "ab":
            first = block == "a" and stage > 2
            s = 2 if first else 1
            if first:
                layers.append(L(f"res{stage}a_branch1", c, hw, k, 1, stride=2))
            layers.append(L(f"res{stage}{block}_branch2a", c, hw, k, 3, pad=1, stride=s))
            c, hw = k, hw // s
            layers.append(L(f"res{stage}{block}_branch2b", c, hw, k, 3, pad=1))
    return layers


RESNET18 = _resnet18()
LISTS = {"alexnet": ALEXNET, "resnet18": RESNET18}


def _prototxt_convs(path):
    """(name, num_output, kernel, pad, stride, group) of every Convolution layer, read with a
    regular expression (independent of ucudnn.caffe)."""
    text = re.sub(r"#[^\n]*", "", path.read_text())
    out = []
    for block in re.split(r"\blayer\s*\{", text)[1:]:
        if not re.search(r'type:\s*"Convolution"', block):
            continue
        def field(name, default):
            m = re.search(rf"\b{name}:\s*(\d+)", block)
            return int(m.group(1)) if m else default
        out.append((re.search(r'name:\s*"([^"]+)"', block).group(1), field("num_output", 0),
                    field("kernel_size", 0), field("pad", 0), field("stride", 1),
                    field("group", 1)))
    return out


@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_hand_built_layers_are_the_prototxts(net):
    assert all(l.r == l.s and l.pad[0] == l.pad[1] and l.stride[0] == l.stride[1]
               for l in LISTS[net])
    assert _prototxt_convs(NETS / f"{net}.prototxt") == [
        (l.name, l.k, l.r, l.pad[0], l.stride[0], l.groups) for l in LISTS[net]]


@pytest.mark.parametrize("net", ["alexnet", "resnet18"])
def test_every_prototxt_kernel_is_found(net):
    layers = LISTS[net]
    benches, missing = shipped.lookup(layers)
    assert dict(missing) == {}
    assert set(benches) == {(l.name, op) for l in layers for op in l.ops}
    assert all(sorted(b) == SIZES for b in benches.values())
    # found by kernel, not by name: the numbers are the table's for the same kernel
    table = group_by_kernel(read_table(DATA / f"{net}_bench.csv"))
    by_kernel = {(ConvShape.from_layer(l), op): table[l.name, op]
                 for l in shipped.layers(net) for op in l.ops}
    for l in layers:
        for op in l.ops:
            assert benches[l.name, op] == by_kernel[ConvShape.from_layer(l), op], (l.name, op)


def test_resnet18_prototxt_names_find_the_merged_table():
    benches, _ = shipped.lookup(RESNET18)
    table = group_by_kernel(read_table(DATA / "resnet18_bench.csv"))
    for name in ("res2a_branch2a", "res2b_branch2b"):
        assert benches[name, "fwd"] == table["l1_3x3", "fwd"]
    assert benches["res5a_branch1", "bwd_filter"] == table["l4_down", "bwd_filter"]
    # the plan of the prototxt's 20 layers equals the plan of the merged list with counts
    by_names = plan_network(RESNET18, benches, PlanSettings(limit=64 * MiB))
    merged = plan_network(shipped.layers("resnet18"), table, PlanSettings(limit=64 * MiB))
    assert by_names.time_ms == pytest.approx(merged.time_ms)
    assert by_names.ws_bytes == merged.ws_bytes and len(by_names.kernels) == len(merged.kernels)


def test_alexnet_groups_plan_as_caffe_runs_them():
    benches, _ = shipped.lookup(ALEXNET)
    plan = plan_network(ALEXNET, benches, PlanSettings(limit=64 * MiB, optimizer="ilp"))
    assert plan.n_calls == 2 + 3 * (2 + 1 + 2 + 2) and len(plan.kernels) == 2 + 3 * 4
    assert plan.budget == 64 * MiB * plan.n_calls >= plan.ws_bytes
    for k in plan.kernels:
        assert k.groups == (2 if k.layer in ("conv2", "conv4", "conv5") else 1)


def test_other_kernels_are_missing_with_the_reason():
    packed_half = L("conv2_half", 48, 27, 128, 5, pad=2)       # a packed group: another kernel
    odd = L("odd", 64, 56, 65, 3, pad=1)
    benches, missing = shipped.lookup([packed_half, odd, RESNET18[1]])
    assert set(benches) == {(RESNET18[1].name, op) for op in RESNET18[1].ops}
    assert list(missing) == [(n, op) for n in ("conv2_half", "odd")
                             for op in ("fwd", "bwd_data", "bwd_filter")]
    assert "kernel not in the shipped data (C=64 56x56 K=65 3x3 pad 1 stride 1, fwd)" == \
        missing["odd", "fwd"]


@pytest.mark.parametrize("kw, words", [
    (dict(math="fma"), ["math 'fma' asked", "math 'default'"]),
    (dict(dtype="float16"), ["dtype 'float16' asked", "'float32'"]),
    (dict(gpu="NVIDIA H100 80GB HBM3"), ["GPU 'NVIDIA H100 80GB HBM3' asked", "NVIDIA H200"]),
    (dict(cudnn_version=90100), ["cuDNN 90100 asked", "91400"]),
    (dict(timing="find"), ["timing 'find' asked", "'events5'"]),
    (dict(workspace_cap=16 << 30), ["at least 17179869184 B", "8589934592 B offered"]),
])
def test_mismatches_are_missing_never_planned_from_other_data(kw, words):
    benches, missing = shipped.lookup(ALEXNET, **kw)
    assert benches == {}
    assert list(missing) == [(l.name, op) for l in ALEXNET for op in l.ops]
    for reason in missing.values():
        assert all(w in reason for w in words), reason
    # what the data was measured with is found
    m = shipped.meta()
    ok, none = shipped.lookup(ALEXNET, gpu=m["gpu"], cudnn_version=m["cudnn_version"],
                              timing=m["timing"], workspace_cap=m["workspace_cap"])
    assert not none and len(ok) == 14


def test_micro_batch_sizes():
    small = [LayerSpec(l.name, 64, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride,
                       groups=l.groups, bwd_data=l.bwd_data) for l in ALEXNET]
    benches, missing = shipped.lookup(small)
    assert not missing and all(sorted(b) == SIZES[:7] for b in benches.values())
    odd = [LayerSpec("conv3", 100, 256, 13, 13, 384, 3, 3, 1)]
    benches, missing = shipped.lookup(odd)
    assert benches == {} and "micro-batch size(s) [100] not in the shipped data" in \
        missing["conv3", "fwd"]
    benches, missing = shipped.lookup(odd, sizes_of=lambda l: [1, 2, 4])
    assert "[100]" in missing["conv3", "fwd"]                  # the mini-batch is needed
    # sizes the data lacks: found with the sizes it has (the planner reports the others),
    # or missing when all are required
    benches, missing = shipped.lookup(ALEXNET[2:3], sizes_of=lambda l: [3, 4, 256])
    assert not missing and sorted(benches["conv3", "fwd"]) == [4, 256]
    benches, missing = shipped.lookup(ALEXNET[2:3], sizes_of=lambda l: [3, 4, 256],
                                      require_all_sizes=True)
    assert not benches and "size(s) [3] not in" in missing["conv3", "fwd"]


def test_meta_and_entries():
    m = shipped.meta()
    assert (m["gpu"], m["cudnn_version"], m["dtype"], m["math"]) == \
        ("NVIDIA H200", 91400, "float32", "default")
    assert m["workspace_cap"] == 8 << 30 and m["timing"] == "events5"
    assert shipped.nets() == ["alexnet", "resnet18", "cifar10"]
    m["gpu"] = "changed"
    assert shipped.meta()["gpu"] == "NVIDIA H200"                 # a copy
    entries = shipped.entries()
    assert all(isinstance(k, CacheKey) and k.workspace_cap == 8 << 30 for k in entries)
    n_kernels = sum(len(l.ops) for net in shipped.nets() for l in shipped.layers(net))
    assert len(entries) == n_kernels              # no kernel shared by the two nets
    with pytest.raises(ValueError, match="no shipped data for 'vgg'"):
        shipped.layers("vgg")
    with pytest.raises(ValueError, match="unknown math mode"):
        shipped.lookup(ALEXNET, math="fast")
