"""``ucudnn.torch.convert`` without a GPU: which modules it swaps, what it keeps with which
reason, parameters shared and state_dicts interchangeable, and PyTorch's own convolution for
tensors off CUDA."""
import logging
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")
from torch import nn  # noqa: E402

import ucudnn.torch as ut  # noqa: E402
from ucudnn.torch import eager  # noqa: E402
from ucudnn.vocab import InputError  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.Conv2d(8, 8, 3, stride=2, dilation=2, padding=2, groups=2, bias=False),
            nn.Conv2d(8, 8, 3, padding="same"),
        )
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.circular = nn.Conv2d(4, 4, 3, padding=1, padding_mode="circular")
        self.even_same = nn.Conv2d(4, 4, 4, padding="same")
        self.line = nn.Conv1d(4, 4, 3, padding=1)
        self.volume = nn.Conv3d(1, 2, 3, padding=1)
        self.volume_up = nn.ConvTranspose3d(2, 1, 2, stride=2)
        self.complex = nn.Conv2d(2, 2, 1, dtype=torch.complex64)

    def forward(self, x):
        y = self.circular(self.up(self.body(x)))      # even_same: listed, not run
        n, c, h, w = y.shape
        v = self.volume_up(self.volume(y.unsqueeze(1)))   # n x 1 x 2c x 2h x 2w
        return self.line(y.flatten(2)).view(n, c, h, w) + v.mean()


EXPECTED_KEPT = {
    "circular": "padding_mode='circular'",
    "even_same": "padding='same'",
    "line": "1-D",
    "complex": "dtype torch.complex64",
}


def test_swaps_and_report():
    torch.manual_seed(0)
    model = Net()
    params = {n: p for n, p in model.named_parameters()}
    report = ut.convert(model, limit="16MiB", policy="all", engines="legacy")
    assert [n for n, _ in report.converted] == ["body.0", "body.1", "body.2", "up", "volume",
                                                "volume_up"]
    assert type(model.body[1]) is ut.Conv2d and type(model.up) is ut.ConvTranspose2d
    assert type(model.volume) is ut.Conv3d and type(model.volume_up) is ut.ConvTranspose3d
    assert isinstance(model.volume_up, nn.ConvTranspose3d)
    assert isinstance(model.body[1], nn.Conv2d)
    assert {n: k for n, k, _ in report.kept} == {n: type(getattr(model, n)).__name__
                                                 for n in EXPECTED_KEPT}
    for name, _, why in report.kept:
        assert EXPECTED_KEPT[name] in why, (name, why)
        assert type(getattr(model, name)) in (nn.Conv1d, nn.Conv2d)
    # the very parameters, and the settings as given
    assert all(p is params[n] for n, p in model.named_parameters())
    assert (report.settings.limit, report.settings.policy) == (16 << 20, "all")
    assert "6 convolution module(s) converted" in str(report)
    assert "circular" in str(report)
    # where the eager calls run, and why not in C++ where they do not
    native, why = eager.native_status()
    assert ("eager calls: in C++" in str(report)) == native
    assert native or f"eager calls: in Python ({why})" in str(report)
    # converting again changes nothing and reports nothing new
    again = ut.convert(model)
    assert again.converted == [] and len(again.kept) == len(EXPECTED_KEPT)


def test_state_dict_round_trip():
    torch.manual_seed(0)
    plain, converted = Net(), Net()
    ut.convert(converted)
    before = plain.state_dict()
    converted.load_state_dict(before)                 # strict: the same keys
    after = converted.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)
    plain2 = Net()
    plain2.load_state_dict(after)
    assert all(torch.equal(plain2.state_dict()[k], before[k]) for k in before)


def test_a_lone_convolution_is_converted_too():
    conv = nn.Conv2d(2, 3, 3)
    report = ut.convert(conv)
    assert type(report.model) is ut.Conv2d and report.model.weight is conv.weight


def test_cpu_tensors_run_pytorchs_convolution(caplog):
    torch.manual_seed(0)
    model = Net()
    del model.complex
    x = torch.randn(2, 3, 8, 8)
    want = model(x)
    ut.convert(model)
    with caplog.at_level(logging.WARNING, logger="ucudnn"):
        got = model(x)
        model(x)
    assert torch.equal(got, want)
    warned = [r.getMessage() for r in caplog.records if "runs PyTorch's" in r.getMessage()]
    assert len(warned) == 6         # once per converted module, not per call
    assert all("cpu" in m for m in warned)


def test_each_module_kept_is_logged_with_its_reason(caplog):
    with caplog.at_level(logging.INFO, logger="ucudnn"):
        report = ut.convert(Net())
    logged = [r.getMessage() for r in caplog.records if "stays PyTorch's" in r.getMessage()]
    assert len(logged) == len(report.kept) == len(EXPECTED_KEPT)
    for (name, kind, why), line in zip(report.kept, logged):
        assert line == f"ucudnn.torch: {name} ({kind}) stays PyTorch's: {why}"
    assert any("padding_mode='circular'" in line for line in logged)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padding_modes_other_than_zeros_stay_pytorchs(mode):
    model = nn.Sequential(nn.Conv2d(2, 2, 3, padding=1, padding_mode=mode),
                          nn.Conv3d(2, 2, 3, padding=1, padding_mode=mode))
    x = torch.randn(1, 2, 5, 5)
    want = model[0](x)
    report = ut.convert(model)
    assert report.converted == [] and [n for n, _, _ in report.kept] == ["0", "1"]
    assert all(f"padding_mode={mode!r}" in why for _, _, why in report.kept)
    assert type(model[0]) is nn.Conv2d and torch.equal(model[0](x), want)


def test_bad_settings_name_the_field():
    with pytest.raises(InputError, match="limit"):
        ut.convert(Net(), limit="lots")
    with pytest.raises(InputError, match="shared"):
        ut.convert(Net(), optimizer="shared")


def test_a_saved_model_keeps_its_settings_in_another_process(tmp_path):
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ConvTranspose2d(3, 2, 2))
    ut.convert(model, limit="4MiB", policy="all")
    path = tmp_path / "model.pt"
    torch.save(model, path)
    # the other process has other settings registered first: the loaded modules' number
    # names their own settings there
    code = ("import sys, torch, ucudnn.torch; "
            "from ucudnn.torch.convert import settings_from; "
            "from ucudnn.torch.runtime import config_id, settings_of; "
            "config_id(settings_from(limit='1MiB')); "
            "m = torch.load(sys.argv[1], weights_only=False); "
            "print([(settings_of(c.ucudnn_config).limit, settings_of(c.ucudnn_config).policy, "
            "type(c).__name__) for c in m])")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == str([(4 << 20, "all", "Conv2d"), (4 << 20, "all", "ConvTranspose2d")])


class CausalConv3d(nn.Conv3d):
    """Wan's pattern (Note [Subclasses with their own forward]): pad time causally, then
    PyTorch's forward."""

    def __init__(self, cin, cout):
        super().__init__(cin, cout, 3, padding=(0, 1, 1))

    def forward(self, x):
        return super().forward(torch.cat([x[:, :, :1]] * 2 + [x], dim=2))


class OwnConvForward(nn.Conv2d):
    def _conv_forward(self, x, w, b):
        return super()._conv_forward(x, 2 * w, b)


class Upsample(nn.ConvTranspose2d):
    def forward(self, x, output_size=None):
        return super().forward(x, output_size).relu()


def test_a_subclass_with_its_own_forward_is_converted_in_place(monkeypatch, tmp_path):
    from ucudnn.torch import modules
    from ucudnn.torch.runtime import settings_of
    torch.manual_seed(0)
    model = nn.Sequential(CausalConv3d(2, 4), nn.ReLU(), CausalConv3d(4, 2))
    x = torch.randn(1, 2, 3, 6, 5)
    want = model(x)
    first = model[0]
    report = ut.convert(model, limit="4MiB")
    assert report.converted == [("0", "CausalConv3d"), ("2", "CausalConv3d")]
    assert report.kept == [] and model[0] is first and type(first) is CausalConv3d
    assert isinstance(first._conv_forward, modules.CoreConvForward)
    assert torch.equal(model(x), want)          # CPU tensors: PyTorch's convolution
    assert ut.convert(model).converted == []    # converted once
    # on a GPU (meta tensors here) every convolution the forward asks for goes to the core
    calls = []

    def fwd(x, w, stride, padding, dilation, groups, config):
        calls.append((tuple(x.shape), tuple(w.shape), stride, padding, dilation, groups,
                      settings_of(config).limit))
        return torch.nn.functional.conv3d(x, w, None, stride, padding, dilation, groups)
    monkeypatch.setattr(modules, "conv_fwd", fwd)
    y = model.to("meta")(x.to("meta"))
    one, pad = [1, 1, 1], [0, 1, 1]
    assert calls == [((1, 2, 5, 6, 5), (4, 2, 3, 3, 3), one, pad, one, 1, 4 << 20),
                     ((1, 4, 5, 6, 5), (2, 4, 3, 3, 3), one, pad, one, 1, 4 << 20)]
    assert y.shape == (1, 2, 3, 6, 5)
    path = tmp_path / "m.pt"
    torch.save(model, path)
    loaded = torch.load(path, weights_only=False)
    assert settings_of(loaded[2]._conv_forward.config).limit == 4 << 20


def test_subclasses_that_convolve_otherwise_stay_pytorchs():
    from ucudnn.torch.convert import why_kept
    model = nn.Sequential(OwnConvForward(2, 2, 3), Upsample(2, 2, 2, stride=2))
    report = ut.convert(model)
    assert report.converted == [] and [why for _, _, why in report.kept] == [
        "a subclass of Conv2d with its own _conv_forward",
        "a subclass of ConvTranspose2d with its own forward"]
    assert "_conv_forward" not in model[0].__dict__
    # its calls would run outside a plan of the model's kernels together
    assert "plans per call (optimizer dp) only" in why_kept(CausalConv3d(1, 1), netwide=True)
