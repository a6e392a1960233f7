"""Caffe's ucudnn_param (ucudnn.caffe.params): the net's message under each layer's (Note
[ucudnn_param merging]), the PlanSettings it means, in a prototxt and as the C API hands the
messages over, and writing settings back."""
import pytest

from net_text import HEAD, conv as _conv
from ucudnn.caffe import params
from ucudnn.caffe.proto import load_caffe_pb2
from ucudnn.caffe.prototxt import PrototxtError, load_prototxt, parse_net_text, ucudnn_settings
from ucudnn.plan.settings import DEFAULTS, PlanSettings


def test_ucudnn_settings_net_wide_and_per_layer(tmp_path):
    text = ('ucudnn_param { policy: ALL optimizer: ILP total_workspace: 1073741824 '
            'micro_batch_size: 8 micro_batch_size: 16 }\n' + HEAD + _conv("a", "data", 4, 3)
            + _conv("b", "a", 4, 3).replace(
                "convolution_param", "ucudnn_param { policy: UNDIVIDED math: FMA "
                "micro_batch_size: 4 } convolution_param"))
    path = tmp_path / "u.prototxt"
    path.write_text(text)
    net = load_prototxt(path, batch=32)
    assert [l.name for l in net.layers] == ["a", "b"] and net.layers[0].n == 32
    assert net.net_ucudnn == PlanSettings(
        policy="all", optimizer="ilp", limit=8 << 20, budget=1 << 30, sizes=(8, 16),
        math="default", repeats=1, cache_path=None, exclude_winograd=False)
    assert net.ucudnn["a"] == net.net_ucudnn
    # the layer's set fields win; its micro_batch_size replaces the net's (Caffe's Net::Init)
    b = net.ucudnn["b"]
    assert (b.policy, b.math, b.sizes, b.optimizer, b.budget) == \
        ("undivided", "fma", (4,), "ilp", 1 << 30)
    # a layer of its own only, and none at all
    only = HEAD + _conv("a", "data", 4, 3) + _conv("b", "a", 4, 3).replace(
        "convolution_param", "ucudnn_param { workspace_limit: 0 } convolution_param")
    net_s, per_layer = ucudnn_settings(parse_net_text(only))
    assert net_s is None and per_layer["a"] is None
    assert per_layer["b"].limit == 0 and per_layer["b"].policy == "powerOfTwo"


@pytest.mark.parametrize("ucudnn, match", [
    ("ucudnn_param { workspace_limit: -1 }", r"net: field 'ucudnn_param.workspace_limit' must be >= 0, got -1"),
    ("ucudnn_param { total_workspace: -5 }", r"net: field 'ucudnn_param.total_workspace' must be >= 0"),
    ("ucudnn_param { benchmark_repeats: 0 }", r"net: field 'ucudnn_param.benchmark_repeats' must be >= 1"),
    ("ucudnn_param { micro_batch_size: 0 }", r"net: field 'ucudnn_param.micro_batch_size' must be >= 1"),
])
def test_bad_ucudnn_param_is_refused(ucudnn, match):
    net = parse_net_text(ucudnn + HEAD + _conv("a", "data", 4, 3), "u.prototxt")
    with pytest.raises(PrototxtError, match="^u.prototxt: " + match):
        ucudnn_settings(net, source="u.prototxt")
    layer = parse_net_text(HEAD + _conv("a", "data", 4, 3).replace(
        "convolution_param", ucudnn + " convolution_param"), "u.prototxt")
    with pytest.raises(PrototxtError, match=r"layer 'a' \(type Convolution\): field"):
        ucudnn_settings(layer, source="u.prototxt")


def _param(pb2, text):
    from google.protobuf import text_format
    return text_format.Parse(text, pb2.UcudnnParameter())


def test_merged_param_and_the_budget_it_means():
    """Note [ucudnn_param merging], Note [Workspace budget]: an unset total_workspace is no
    budget (limit x calls); a set one, 0 included, is that many bytes."""
    pb2 = load_caffe_pb2()
    net = _param(pb2, "policy: ALL micro_batch_size: 8 micro_batch_size: 16 "
                      "workspace_limit: 1024")
    layer = _param(pb2, "micro_batch_size: 4 math: FMA")
    m = params.merged_param(net, layer)
    assert list(m.micro_batch_size) == [4] and m.policy == net.policy and m.math == layer.math
    assert list(net.micro_batch_size) == [8, 16]            # the net's message is untouched
    assert params.merged_param(None, layer) is layer
    assert params.merged_param(None, None) is None
    assert params.merged_param(net, None) == net
    s = params.settings_of(m, "x")
    assert (s.policy, s.sizes, s.limit, s.math, s.budget) == ("all", (4,), 1024, "fma", None)
    assert params.settings_of(_param(pb2, "total_workspace: 0"), "x").budget == 0
    assert params.settings_of(_param(pb2, "total_workspace: 5"), "x").budget == 5
    assert params.settings_of(_param(pb2, ""), "x", dtype="float16") == DEFAULTS.replace(
        dtype="float16")


def test_shared_is_net_wide():
    pb2 = load_caffe_pb2()
    layer = _param(pb2, "optimizer: SHARED")
    with pytest.raises(params.ParamError, match=r"^here: field 'ucudnn_param.optimizer' SHARED "
                                                "is net-wide"):
        params.check_shared_is_net_wide(None, layer, "here")
    with pytest.raises(params.ParamError, match="net-wide"):
        params.check_shared_is_net_wide(_param(pb2, "optimizer: ILP"), layer, "here")
    params.check_shared_is_net_wide(_param(pb2, "optimizer: SHARED"), layer, "here")
    params.check_shared_is_net_wide(None, _param(pb2, "optimizer: ILP"), "here")


def test_net_settings_from_the_messages_the_c_api_hands_over():
    """ucudnn_net_plan: the net's message and each layer's as text (None: no message; "": a
    message at its defaults); a layer with neither is not one ucudnn runs; errors name the
    net, the layer and the field."""
    got = params.net_settings("optimizer: SHARED workspace_limit: 4096",
                              {"conv1": "", "conv2": "policy: ALL micro_batch_size: 2",
                               "conv3": None},
                              dtypes={"conv1": "float32", "conv2": "float16",
                                      "conv3": "float32"}, net="alexnet")
    assert got["conv1"] == PlanSettings(optimizer="shared", limit=4096)
    assert got["conv2"] == PlanSettings(optimizer="shared", limit=4096, policy="all",
                                        sizes=(2,), dtype="float16")
    assert got["conv3"] == got["conv1"]
    with pytest.raises(params.ParamError, match=r"^net 'n': layer 'c': no ucudnn_param on the "
                                                "layer or the net"):
        params.net_settings(None, {"c": None}, dtypes={"c": "float32"}, net="n")
    assert params.net_settings(None, {"c": ""}, dtypes={"c": "float32"}) == {
        "c": PlanSettings()}
    with pytest.raises(params.ParamError, match=r"^net 'n': layer 'c': ucudnn_param: .*FAST"):
        params.net_settings("", {"c": "policy: FAST"}, dtypes={"c": "float32"}, net="n")
    with pytest.raises(params.ParamError, match=r"^net 'n': ucudnn_param: "):
        params.net_settings("workspace_limit: x", {"c": ""}, dtypes={"c": "float32"}, net="n")
    with pytest.raises(params.ParamError, match=r"^net 'n': layer 'c': field "
                                                r"'ucudnn_param.workspace_limit' must be >= 0"):
        params.net_settings("workspace_limit: -3", {"c": ""}, dtypes={"c": "float32"}, net="n")
    with pytest.raises(params.ParamError, match=r"^net 'n': layer 'c': field "
                                                "'ucudnn_param.optimizer' SHARED is net-wide"):
        params.net_settings("", {"c": "optimizer: SHARED"}, dtypes={"c": "float32"}, net="n")


def test_set_param_round_trips_through_settings_of():
    pb2 = load_caffe_pb2()
    p = pb2.UcudnnParameter()
    given = {"policy": "all", "optimizer": "ilp", "limit": 3 << 20, "budget": 0,
             "sizes": (2, 4), "math": "fma", "repeats": 3, "cache_path": "c.sqlite",
             "exclude_winograd": True, "engines": "both"}
    params.set_param(p, given)
    assert p.HasField("total_workspace") and p.total_workspace == 0
    assert p.engines == pb2.UcudnnParameter.BOTH
    s = params.settings_of(p, "x")
    assert s == PlanSettings(policy="all", optimizer="ilp", limit=3 << 20, budget=0,
                             sizes=(2, 4), math="fma", repeats=3, cache_path="c.sqlite",
                             exclude_winograd=True, engines="both")
    params.set_param(p, {"sizes": (8,)})                      # replaces, does not append
    assert list(p.micro_batch_size) == [8]
    with pytest.raises(ValueError, match="set_param: unknown setting 'speed'"):
        params.set_param(p, {"speed": 1})


def test_engines_field_reaches_the_settings_and_defaults_to_both():
    got = params.net_settings("engines: GRAPH", {"c": None, "d": "engines: BOTH"},
                              dtypes={"c": "float32", "d": "float32"}, net="n")
    assert (got["c"].engines, got["d"].engines) == ("graph", "both")
    assert params.net_settings("", {"c": None}, dtypes={"c": "float32"},
                               net="n")["c"].engines == "both"


def test_layout_is_net_wide_and_reaches_the_settings(tmp_path):
    """``ucudnn_param.layout`` (Note [ucudnn_param merging]): the net's reaches every layer's
    settings; a layer's own is refused, by the C API's reader and by the prototxt check with
    the file, line and column, as is a layer's ``layout`` (Net::Init sets it)."""
    pb2 = load_caffe_pb2()
    got = params.net_settings("layout: NHWC", {"c1": None, "c2": "policy: ALL"},
                              dtypes={"c1": "float32", "c2": "float32"})
    assert {k: v.layout for k, v in got.items()} == {"c1": "NHWC", "c2": "NHWC"}
    assert params.net_settings(None, {"c1": ""}, dtypes={"c1": "float32"})["c1"].layout == \
        "NCHW"
    with pytest.raises(params.ParamError, match=r"^net 'net': layer 'c1': field "
                                                r"'ucudnn_param.layout' is net-wide"):
        params.net_settings("layout: NHWC", {"c1": "layout: NCHW"}, dtypes={"c1": "float32"})
    for layer_fields, where, what in [
            ("ucudnn_param { layout: NHWC }", "3:18", "field 'ucudnn_param.layout' is net-wide"),
            ("layout: NHWC", "3:3", "field 'layout' is set by Caffe's net")]:
        text = ('name: "n"\nlayer { name: "c" type: "Convolution"\n  %s }\n' % layer_fields)
        with pytest.raises(params.ParamError, match=rf"^net.prototxt:{where}: layer 'c': {what}"):
            params.check_params(parse_net_text(text), text, "net.prototxt")
    p = pb2.UcudnnParameter()
    params.set_param(p, {"layout": "NHWC"})
    assert p.layout == pb2.UcudnnParameter.NHWC
    assert params.settings_of(p, "here").layout == "NHWC"
