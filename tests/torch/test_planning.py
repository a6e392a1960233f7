"""``ucudnn.torch.plan`` over the fake core: a model's convolutions found on fake tensors become
the layers ``ucudnn plan`` plans, with the same plans, the same document and the same text."""
import json

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")
from torch import nn  # noqa: E402

import ucudnn.torch as ut  # noqa: E402
from ucudnn.cli import main  # noqa: E402
from ucudnn.plan.layers import write_layers  # noqa: E402


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.norm = nn.BatchNorm2d(16)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=2)
        self.up = nn.ConvTranspose2d(32, 8, 2, stride=2)
        self.line = nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x):
        y = self.up(torch.relu(self.down(torch.relu(self.norm(self.stem(x))))))
        n, c, h, w = y.shape
        return self.line(y.flatten(2)).view(n, c, h, w) + self.stem(x)[:, :8]


def _same_plans_as_ucudnn_plan(report, tmp_path, capsys, limit):
    """``ucudnn plan --layers`` of ``report``'s layers (policy all, ``limit``), from the same
    cache, gives the kernels, plans, times and workspaces of ``report``; its document."""
    path = tmp_path / "layers.csv"
    write_layers(path, report.layers)
    capsys.readouterr()
    assert main(["plan", "--layers", str(path), "--limit", limit, "--policy", "all",
                 "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)

    def rows(doc):
        return [(k["layer"], k["op"], k["plan"], k["time_ms"], k["ws_bytes"])
                for k in doc["kernels"]]
    assert rows(cli) == rows(report.doc)
    return cli


@pytest.mark.parametrize("convert", [False, True])
def test_plan_lists_the_kernels_as_ucudnn_plan_does(fake_core, tmp_path, capsys, convert):
    model = Small()
    if convert:
        ut.convert(model)
    x = torch.randn(8, 3, 12, 12)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = ut.plan(model, x, limit="64MiB", policy="all", name="small")
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())    # BatchNorm's too
    doc = report.doc
    by_layer = {}
    for k in doc["kernels"]:
        by_layer.setdefault(k["layer"], []).append(k["op"])
    # the stem's input needs no gradient; it is called twice; the transposed convolution's
    # forward is its layer's bwd_data
    assert by_layer == {"stem": ["fwd", "bwd_filter"], "down": ["fwd", "bwd_data", "bwd_filter"],
                        "up": ["fwd", "bwd_data", "bwd_filter"],
                        "stem#2": ["fwd", "bwd_filter"]}
    assert [(n, k) for n, k, _ in report.kept] == [("line", "Conv1d")]
    assert "1-D convolution" in report.kept[0][2]
    assert doc["kept_by_pytorch"][0]["layer"] == "line"
    layers = {l.name: l for l in report.layers}
    down, up = layers["down"], layers["up"]
    assert (down.n, down.c, down.h, down.k, down.groups, down.stride) == (8, 16, 12, 32, 2, (2, 2))
    # the transposed convolution is the convolution from its output (8 x 12 x 12) to its input
    assert (up.c, up.h, up.w, up.k, up.r, up.stride) == (8, 12, 12, 32, 2, (2, 2))

    # ucudnn plan of the same layers, from the same cache, gives the same plans
    cli = _same_plans_as_ucudnn_plan(report, tmp_path, capsys, "64MiB")
    assert cli["totals"] == doc["totals"]
    report.print()
    text = capsys.readouterr().out
    assert "network small, batch 8, policy all" in text
    assert "stays PyTorch's: line (Conv1d)" in text
    assert json.loads(report.json())["network"] == "small"


class Volume(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv3d(2, 8, 3, padding=1)
        self.down = nn.Conv3d(8, 16, (1, 3, 3), stride=(1, 2, 2), padding=(0, 2, 2),
                              dilation=(1, 2, 2), groups=2)
        self.up = nn.ConvTranspose3d(16, 4, 2, stride=2)

    def forward(self, x):
        return self.up(torch.relu(self.down(torch.relu(self.stem(x)))))


@pytest.mark.parametrize("channels_last", [False, True])
def test_plan_of_a_3d_model_is_ucudnn_plans(fake_core, tmp_path, capsys, channels_last):
    model = Volume()
    x = torch.randn(4, 2, 6, 10, 10)
    if channels_last:
        model = model.to(memory_format=torch.channels_last_3d)
        x = x.contiguous(memory_format=torch.channels_last_3d)
    ut.convert(model)
    report = ut.plan(model, x, limit="32MiB", policy="all", name="volume")
    layers = {l.name: l for l in report.layers}
    assert set(layers) == {"stem", "down", "up"} and not report.kept
    stem, down, up = layers["stem"], layers["down"], layers["up"]
    assert (stem.n, stem.c, stem.spatial, stem.k, stem.kernel) == (4, 2, (6, 10, 10), 8, (3, 3, 3))
    assert stem.layout == ("NHWC" if channels_last else "NCHW")
    assert (down.groups, down.stride, down.pad, down.dilation) == (2, (1, 2, 2), (0, 2, 2),
                                                                   (1, 2, 2))
    assert down.layout == "NCHW"                    # a grouped convolution runs NCDHW
    # the transposed convolution is the convolution from its output (4 x 12 x 10 x 10) to its
    # input (16 channels), its forward that layer's bwd_data
    assert (up.c, up.spatial, up.k, up.kernel, up.stride) == (4, (12, 10, 10), 16, (2, 2, 2),
                                                              (2, 2, 2))
    assert up.out_spatial == down.out_spatial
    ops = {(k["layer"], k["op"]) for k in report.doc["kernels"]}
    assert ("stem", "bwd_data") not in ops and ("up", "bwd_data") in ops
    _same_plans_as_ucudnn_plan(report, tmp_path, capsys, "32MiB")


def test_a_model_without_convolutions(fake_core):
    report = ut.plan(nn.Linear(3, 2), torch.randn(4, 3))
    assert report.plan is None and report.doc["kernels"] == []


class _Causal(nn.Conv3d):
    """Wan's causal Conv3d: its forward pads time with two copies of the first frame."""

    def __init__(self, cin, cout):
        super().__init__(cin, cout, 3, padding=(0, 1, 1))

    def forward(self, x):
        return super().forward(torch.cat([x[:, :, :1]] * 2 + [x], dim=2))


@pytest.mark.parametrize("convert", [False, True])
def test_plan_sees_a_subclass_s_convolution_as_its_forward_gives_it(fake_core, convert):
    """Note [Subclasses with their own forward] (ucudnn/torch/modules.py): the call is the
    padded one (depth 4 + 2), whether the module is converted in place or not; the model is
    left as it was."""
    from ucudnn.torch.netwide import model_calls, own_forward
    model = nn.Sequential(_Causal(2, 4), nn.ReLU(), _Causal(4, 4))
    if convert:
        ut.convert(model)
    before = [m.__dict__.get("_conv_forward") for m in model]
    x = torch.randn(2, 2, 4, 6, 6)
    calls = model_calls(model, (x,))
    assert [(n, tuple(cx.shape), tuple(cy.shape)) for n, _, cx, cy in calls] == [
        ("0", (2, 2, 6, 6, 6), (2, 4, 4, 6, 6)), ("2", (2, 4, 6, 6, 6), (2, 4, 4, 6, 6))]
    assert [m.__dict__.get("_conv_forward") for m in model] == before
    assert own_forward(model[0]) and not own_forward(nn.Conv3d(1, 1, 1))
    assert not own_forward(ut.convert(nn.Conv3d(1, 1, 1)).model)     # ucudnn's own module
    report = ut.plan(model, x, limit="32MiB", policy="all")
    assert not report.kept and [(l.name, l.spatial) for l in report.layers] == [
        ("0", (6, 6, 6)), ("2", (6, 6, 6))]
