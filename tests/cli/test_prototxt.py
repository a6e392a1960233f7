"""`ucudnn prototxt`: variants of a Caffe prototxt with ucudnn_param, checked in both phases
as Caffe's Net::Init checks a net before they are written."""
import json
import re

import pytest

from net_text import HEAD, conv
from repo_paths import NETS
from ucudnn.caffe import proto as cp
from ucudnn.caffe.prototxt import load_prototxt
from ucudnn.cli import main


def test_prototxt_writes_shared_net_wide_and_refuses_it_per_layer(tmp_path, capsys):
    src = NETS / "alexnet.prototxt"
    out = tmp_path / "shared.prototxt"
    assert main(["prototxt", str(src), "-o", str(out), "--optimizer", "shared",
                 "--budget", "184MiB"]) == 0
    text = out.read_text()
    assert "optimizer: SHARED" in text and "total_workspace: 192937984" in text
    net = load_prototxt(out)
    assert net.net_ucudnn.optimizer == "shared" and net.net_ucudnn.budget == 192937984
    assert {s.optimizer for s in net.ucudnn.values()} == {"shared"}
    # the plan CLI takes it from the prototxt
    assert main(["plan", "--prototxt", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["optimizer"] == "shared" and doc["budget_bytes"] == 192937984
    # on one layer only: refused, naming the layer and the field (Caffe stops on it too)
    assert main(["prototxt", str(src), "-o", str(tmp_path / "x.prototxt"), "--optimizer",
                 "shared", "--layers", "conv2"]) == 2
    assert "net-wide" in capsys.readouterr().err
    # in a file: refused at its line, naming the layer
    text = src.read_text().replace('name: "conv2"\n', 'name: "conv2"\n  ucudnn_param { optimizer: '
                                   'SHARED }\n', 1)
    bad = tmp_path / "bad.prototxt"
    bad.write_text(text)
    assert main(["prototxt", str(bad), "-o", str(tmp_path / "y.prototxt")]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"{re.escape(str(bad))}:\d+:\d+: layer 'conv2': field "
                     r"'ucudnn_param.optimizer' SHARED is net-wide", err), err


def test_variant_fields_and_layers(tmp_path, capsys):
    src = NETS / "alexnet.prototxt"
    out = tmp_path / "v.prototxt"
    assert main(["prototxt", str(src), "-o", str(out), "--policy", "POWER_OF_TWO", "--limit",
                 "64MiB", "--math", "FMA", "--repeats", "3", "--cache", "c.sqlite",
                 "--layers", "conv2,conv3"]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    net = load_prototxt(out)
    assert net.net_ucudnn is None
    assert {n for n, s in net.ucudnn.items() if s is not None} == {"conv2", "conv3"}
    s = net.ucudnn["conv2"]
    assert (s.policy, s.limit, s.math, s.repeats, s.cache_path) == (
        "powerOfTwo", 64 << 20, "fma", 3, "c.sqlite")
    assert main(["prototxt", str(src), "-o", str(out), "--layers", "conv9", "--force"]) == 2
    assert "--layers: no layer named conv9" in capsys.readouterr().err
    # --budget 0 is written as a budget of 0 bytes (not left out: Note [Workspace budget])
    assert main(["prototxt", str(src), "-o", str(out), "--budget", "0", "--force"]) == 0
    p = load_prototxt(out).net_ucudnn
    assert (p.optimizer, p.budget) == ("ilp", 0)


def test_the_variant_is_checked_in_both_phases(tmp_path, capsys):
    """A layer of the TEST phase that Caffe's Net::Init would refuse stops the variant, though
    ``plan`` (of the TRAIN phase) never reads it; nothing is written."""
    text = HEAD + conv("a", "data", 4, 3) + conv("t", "a", 4, 15).replace(
        "convolution_param", "include { phase: TEST } convolution_param")
    src = tmp_path / "n.prototxt"
    src.write_text(text)
    out = tmp_path / "v.prototxt"
    assert main(["prototxt", str(src), "-o", str(out), "--policy", "all"]) == 2
    err = capsys.readouterr().err
    line = text[:text.index('layer { name: "t"')].count("\n") + 1
    assert (f"ucudnn: error: {src}:{line}: layer 't' (type Convolution): the kernel 15x15 "
            "is larger than the padded input") in err
    assert not out.exists()
    src.write_text(HEAD + conv("a", "data", 4, 3))
    assert main(["prototxt", str(src), "-o", str(out), "--policy", "all"]) == 0
    # a net whose shapes the prototxt does not settle is checked as far as they are known
    src.write_text('layer { name: "reader" type: "Python" top: "data" }\n'
                   + conv("a", "data", 4, 3))
    assert main(["prototxt", str(src), "-o", str(out), "--policy", "all", "--force"]) == 0


def test_prototxt_and_plan_take_the_families_of_choices(tmp_path, capsys):
    """--engines writes ucudnn_param.engines; ucudnn plan plans BOTH from the legacy data,
    saying so, and refuses GRAPH (Note [Predictions from legacy measurements])."""
    src = NETS / "alexnet.prototxt"
    out = tmp_path / "both.prototxt"
    assert main(["prototxt", str(src), "-o", str(out), "--engines", "both"]) == 0
    assert "engines: BOTH" in out.read_text()
    assert load_prototxt(out).net_ucudnn.engines == "both"
    capsys.readouterr()
    assert main(["plan", "--net", "alexnet", "--engines", "BOTH", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("engines BOTH (5 of 5 layers)" in n for n in doc["notes"]), doc["notes"]
    assert main(["plan", "--net", "alexnet", "--engines", "graph"]) == 2
    assert "GRAPH is planned where the net runs" in capsys.readouterr().err
    assert main(["plan", "--net", "alexnet", "--engines", "fast"]) == 2
    assert "--engines: unknown engine family 'fast'" in capsys.readouterr().err
