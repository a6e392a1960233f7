"""A converted model's kernels planned together over the fake core (Note [Whole-model plans] in
ucudnn/torch/netwide.py): ``convert(optimizer="ilp" | "shared", example_inputs=...)`` finds the
model's calls, the one network planner plans them (the same plans as calling it directly on the
kernels' benchmarks), the ILP keeps its budget, the shared arena is one tensor whose slices are
the kernels' workspace, a call outside the example forward is planned alone with dp, and a model
first run inside a CUDA-graph capture is refused. The device is "meta" (the arena's tensor is
taken there) with ``torch.cuda.device`` and the capture query stood in for, as in
test_runtime.py."""
import gc
import logging
import weakref

import pytest

torch = pytest.importorskip("torch", reason="ucudnn.torch needs PyTorch "
                            "(pip install 'ucudnn[torch]')")
from torch import nn  # noqa: E402

import ucudnn.torch as ut  # noqa: E402
from ucudnn.measure.planner_state import planner_state  # noqa: E402
from ucudnn.plan.network import plan_network  # noqa: E402
from ucudnn.torch import runtime  # noqa: E402
from ucudnn.torch.netwide import call_key  # noqa: E402
from ucudnn.vocab import InputError  # noqa: E402
from torch_fakes import fake_cuda  # noqa: E402,F401 (a fixture)

DEVICE = torch.device("meta")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 16, 3, padding=1)
        self.b = nn.Conv2d(16, 16, 3, padding=1, groups=4, bias=False)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.circular = nn.Conv2d(8, 8, 3, padding=1, padding_mode="circular")

    def forward(self, x):
        y = self.b(self.a(x))
        return self.circular(self.up(self.b(y)))       # b called twice


def _converted(optimizer, n=8, **kw):
    model = Net()
    x = torch.randn(n, 3, 12, 12)
    report = ut.convert(model, optimizer=optimizer, example_inputs=x, limit="4MiB",
                        engines="legacy", **kw)
    return model, report


def test_convert_finds_the_models_calls():
    model, report = _converted("ilp")
    plan = report.plan
    assert plan is not None and plan.settings.optimizer == "ilp"
    assert [l.spec.name for l in plan.layers] == ["a", "b", "b#2", "up"]
    # the first convolution's input needs no gradient; a grouped call is one call per pass
    assert [set(l.spec.ops) for l in plan.layers][:2] == [{"fwd", "bwd_filter"},
                                                         {"fwd", "bwd_filter", "bwd_data"}]
    assert all(l.spec.groups == 1 for l in plan.layers) and plan.layers[1].groups == 4
    # the transposed module's forward is the backward-data of the convolution 8 -> 16
    up = plan.layers[3]
    assert up.x_size == (8, 8, 24, 24) and up.w_size == (16, 8, 2, 2)
    assert {m.ucudnn_model for m in (model.a, model.b, model.up)} == {plan}
    assert len({m.ucudnn_config for m in (model.a, model.b, model.up)}) == 1
    assert [n for n, _, _ in report.kept] == ["circular"]
    assert "optimizer ilp" in str(report)
    # another model converted alike has its own plan and config
    _, other = _converted("ilp")
    assert other.plan is not plan
    assert runtime.config_id(other.settings, other.plan) != model.a.ucudnn_config


def test_net_wide_optimizers_need_example_inputs():
    with pytest.raises(InputError, match="example_inputs"):
        ut.convert(Net(), optimizer="shared")
    with pytest.raises(InputError, match="convert"):
        runtime.config_id(ut.convert(Net()).settings.replace(optimizer="ilp"))


def _planned(report):
    live = report.plan.plan_on(DEVICE)
    layers = [l.spec for l in report.plan.layers]
    settings = {l.name: report.settings for l in layers}
    benches = {k: planner_state(kern).bench for k, kern in live.kernels.items()}
    direct = plan_network(layers, benches, settings)
    return live, direct


def test_ilp_divides_the_budget_through_the_network_planner(fake_core, fake_cuda):
    _, report = _converted("ilp")
    live, direct = _planned(report)
    assert live.arena is None
    plan = live.plan
    assert plan.optimizer == "ilp" and plan.ilp is not None
    calls = sum(len(l.spec.ops) for l in report.plan.layers)
    assert plan.budget == report.settings.budget_for(calls) == calls * (4 << 20)
    assert plan.ws_bytes <= plan.budget
    assert [(k.layer, k.op, k.plan) for k in plan.kernels] == \
        [(k.layer, k.op, k.plan) for k in direct.kernels]
    # each kernel runs with its planned workspace, from the allocator per call
    for k in plan.kernels:
        kern = live.kernels[k.layer, k.op]
        assert kern.plan == k.plan and kern.workspace_size <= k.plan.ws_bytes
        assert k.slot is not None and not k.slot.arena
    # planned once per device
    measured = len(fake_core.calls)
    assert report.plan.plan_on(DEVICE) is live and len(fake_core.calls) == measured


def test_shared_arena_is_one_tensor_sliced_per_kernel(fake_core, fake_cuda):
    _, report = _converted("shared", budget="6MiB")
    live, direct = _planned(report)
    plan = live.plan
    assert plan.optimizer == "shared" and plan.arena_bytes and plan.budget == 6 << 20
    assert live.arena is not None and live.arena.numel() == plan.arena_bytes
    assert live.arena.device == DEVICE and live.arena.dtype == torch.uint8
    assert [k.plan for k in plan.kernels] == [k.plan for k in direct.kernels]
    assert any(k.plan.ws_bytes for k in plan.kernels)
    for layer in report.plan.layers:
        for op in layer.spec.ops:
            key = layer.key(op) + (None, runtime.config_id(report.settings, report.plan))
            kern = runtime.kernel_for(key, op, layer.x_size, layer.w_size, layer.stride,
                                      layer.padding, layer.dilation, layer.groups,
                                      layer.layout, layer.dtype, DEVICE, key[-1])
            assert kern is live.kernels[report.plan.keys()[layer.key(op)]]
            need = kern.workspace_size
            ws = runtime.workspace(key, need, DEVICE)
            if not need:
                assert ws is None
                continue
            slot = runtime._slots[key][1]
            assert slot.arena and slot.offset + need <= plan.arena_bytes
            assert ws._base is live.arena and ws.storage_offset() == slot.offset
            assert ws.numel() == need


def test_a_shared_arena_goes_with_its_model(fake_core, fake_cuda):
    model, report = _converted("shared", budget="6MiB")
    live, _ = _planned(report)
    config = model.a.ucudnn_config
    assert runtime.model_plan_of(config) is report.plan
    with_slot = []                      # the call keys whose kernel takes a slice of the arena
    for layer in report.plan.layers:
        for op in layer.spec.ops:
            key = layer.key(op) + (None, config)
            kern = runtime.kernel_for(key, op, layer.x_size, layer.w_size, layer.stride,
                                      layer.padding, layer.dilation, layer.groups,
                                      layer.layout, layer.dtype, DEVICE, config)
            if key in runtime._slots and kern.workspace_size:
                with_slot.append((key, kern.workspace_size))
    assert with_slot
    arena, plan = weakref.ref(live.arena), weakref.ref(report.plan)
    del model, report, live
    gc.collect()
    assert plan() is None and arena() is None
    with pytest.raises(InputError, match=f"config: {config} names the shared plan of a "
                                         "converted model that no longer exists"):
        runtime.model_plan_of(config)
    key, need = with_slot[0]
    with pytest.raises(InputError, match="of a converted model that no longer exists"):
        runtime.workspace(key, need, DEVICE)


def test_a_call_outside_the_example_forward_is_planned_alone(fake_core, fake_cuda, caplog):
    _, report = _converted("shared")
    config = runtime.config_id(report.settings, report.plan)
    layer = report.plan.layers[0]
    x_size = (4,) + layer.x_size[1:]                    # another batch size
    key = call_key("fwd", x_size, layer.w_size, layer.stride, layer.padding, layer.dilation,
                   layer.groups, layer.layout, layer.dtype) + (None, config)
    with caplog.at_level(logging.WARNING, logger="ucudnn"):
        kern = runtime.kernel_for(key, "fwd", x_size, layer.w_size, layer.stride,
                                  layer.padding, layer.dilation, layer.groups, layer.layout,
                                  layer.dtype, DEVICE, config)
    assert kern.n == 4 and planner_state(kern).settings.optimizer == "dp"
    assert planner_state(kern).settings.limit == report.settings.limit
    assert "not in the example forward; planned alone with dp" in caplog.text
    assert key not in runtime._slots
    ws = runtime.workspace(key, 256, DEVICE)
    assert ws._base is None and ws.numel() == 256     # from the allocator, not the arena


def test_a_model_first_run_inside_a_capture_is_refused(fake_core, fake_cuda):
    _, report = _converted("ilp")
    layer = report.plan.layers[0]
    config = runtime.config_id(report.settings, report.plan)
    key = layer.key("fwd") + (None, config)
    fake_cuda["now"] = True
    with pytest.raises(runtime.CaptureError, match="before capturing"):
        runtime.kernel_for(key, "fwd", layer.x_size, layer.w_size, layer.stride, layer.padding,
                           layer.dilation, layer.groups, layer.layout, layer.dtype, DEVICE,
                           config)
    assert fake_core.calls == [] and report.plan.planned(DEVICE) is None
    fake_cuda["now"] = False
    report.plan.plan_on(DEVICE)
    fake_cuda["now"] = True                 # planned before: a captured call finds its kernel
    assert runtime.kernel_for(key, "fwd", layer.x_size, layer.w_size, layer.stride,
                              layer.padding, layer.dilation, layer.groups, layer.layout,
                              layer.dtype, DEVICE, config) is not None


def test_a_converted_model_pickles_with_its_plan(tmp_path):
    model, report = _converted("shared")
    path = tmp_path / "model.pt"
    torch.save(model, path)
    loaded = torch.load(path, weights_only=False)
    plan = loaded.a.ucudnn_model
    assert plan is loaded.b.ucudnn_model and plan is not report.plan
    assert [l.spec for l in plan.layers] == [l.spec for l in report.plan.layers]
    assert loaded.a.ucudnn_config == runtime.config_id(plan.settings, plan)
