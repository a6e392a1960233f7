"""Public nets from other repositories (tests/data/nets/README.md): each is planned as the
patched Caffe runs it -- only the convolutions its layer factory sends to cuDNN (Note
[Convolutions that reach cuDNN] in ucudnn/caffe/shapes.py) -- or refused with Caffe's own
reason, in one line, with no traceback."""
import json
from pathlib import Path

import pytest
from google.protobuf import text_format

from net_text import HEAD
from ucudnn.caffe.proto import PrototxtError, load_caffe_pb2, read_net
from ucudnn.caffe.prototxt import infer_shapes, load_prototxt
from ucudnn.cli import main

NETS = Path(__file__).resolve().parents[1] / "data" / "nets"
SHIPPED = Path(__file__).resolve().parents[2] / "prototxt"


def _convs(path):
    """(convolutions Caffe runs with cuDNN, those it runs with im2col), from the parsed net's
    fields by the patched factory's rule written out here: engine CAFFE, or engine DEFAULT
    and dilated."""
    pb2 = load_caffe_pb2()
    net = read_net(pb2, path)
    cudnn, im2col = [], []
    for layer in net.layer:
        if layer.type == "Convolution":
            p = layer.convolution_param
            off = p.engine == p.CAFFE or (p.engine == p.DEFAULT and any(d > 1 for d in p.dilation))
            (im2col if off else cudnn).append(layer.name)
    return cudnn, im2col


@pytest.mark.parametrize("name", ["mobilenet_v1_deploy", "mobilenet_v2_deploy"])
def test_convolutions_off_cudnn_are_listed_not_planned(name):
    path = NETS / f"{name}.prototxt"
    cudnn, im2col = _convs(path)
    assert cudnn and im2col             # the net has both kinds
    net = load_prototxt(path, "TEST")
    assert [l.name for l in net.layers] == cudnn
    assert list(net.off_cudnn) == im2col
    assert set(net.off_cudnn.values()) == {"engine: CAFFE"}
    assert set(net.ucudnn) <= set(cudnn)


def test_dilated_convolutions_run_im2col_unless_their_engine_is_cudnn(tmp_path):
    path = NETS / "dilation8_pascal_voc_deploy.prototxt"
    pb2 = load_caffe_pb2()
    proto = read_net(pb2, path)
    dilated = {l.name: tuple(l.convolution_param.dilation) * 2 for l in proto.layer
               if l.type == "Convolution" and any(d > 1 for d in l.convolution_param.dilation)}
    assert len(dilated) >= 5
    net = load_prototxt(path, "TEST")
    assert net.off_cudnn == {name: "dilated, engine: DEFAULT (engine: CUDNN runs it on cuDNN)"
                             for name in dilated}
    assert [l.name for l in net.layers] == _convs(path)[0]
    assert not dilated.keys() & {l.name for l in net.layers}
    # engine: CUDNN on each: planned, each with its dilation
    for layer in proto.layer:
        if layer.name in dilated:
            layer.convolution_param.engine = layer.convolution_param.CUDNN
    on_cudnn = tmp_path / "dilation8_cudnn.prototxt"
    on_cudnn.write_text(text_format.MessageToString(proto))
    net = load_prototxt(on_cudnn, "TEST")
    assert net.off_cudnn == {}
    assert {l.name: l.dilation for l in net.layers if l.name in dilated} == dilated


def test_plan_json_and_text_list_what_runs_without_cudnn(fake_core, capsys):
    path = NETS / "mobilenet_v1_deploy.prototxt"
    cudnn, im2col = _convs(path)
    assert main(["plan", "--prototxt", str(path), "--batch", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["layer"] for r in doc["without_cudnn"]] == im2col
    assert {r["reason"] for r in doc["without_cudnn"]} == {"engine: CAFFE"}
    assert sorted({k["layer"] for k in doc["kernels"]}) == sorted(cudnn)
    # the default budget counts the cuDNN calls only: limit x calls of the planned kernels
    assert main(["plan", "--prototxt", str(path), "--batch", "2", "--optimizer", "ilp",
                 "--json"]) == 0
    ilp = json.loads(capsys.readouterr().out)
    assert ilp["budget_bytes"] == ilp["baseline_limit_bytes"] * sum(
        k["groups"] for k in ilp["kernels"])
    assert main(["plan", "--prototxt", str(path), "--batch", "2"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("runs without cuDNN"):].splitlines()
    assert section[0].startswith(f"runs without cuDNN (Caffe's im2col layer; not planned): "
                                 f"{len(im2col)} convolution")
    assert [line.split()[0] for line in section[1:]] == im2col


def test_a_net_without_such_layers_has_no_new_key(fake_core, capsys):
    assert main(["plan", "--prototxt", str(SHIPPED / "alexnet.prototxt"), "--batch", "2",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "without_cudnn" not in doc and doc["kernels"]


def _one_line_refusal(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_an_unknown_layer_type_is_refused_as_caffe_refuses_it(capsys, tmp_path):
    path = NETS / "SE-ResNet-50.prototxt"
    err = _one_line_refusal(capsys, ["plan", "--prototxt", str(path)])
    assert err.startswith(f"ucudnn: error: --prototxt: {path}:242:1: layer 'conv2_1': Unknown "
                          "layer type: Axpy ("), err
    assert "--layer-shape Axpy=same[:K]" in err
    out = tmp_path / "v.prototxt"
    err = _one_line_refusal(capsys, ["prototxt", str(path), "-o", str(out)])
    assert err.startswith(f"ucudnn: error: {path}:242:1: layer 'conv2_1': Unknown layer type: "
                          "Axpy ("), err
    assert not out.exists()


def test_layer_shape_plans_through_a_forks_layer():
    path = NETS / "SE-ResNet-50.prototxt"
    cudnn, im2col = _convs(path)
    net = load_prototxt(path, "TEST", layer_shapes={"Axpy": 1})
    assert [l.name for l in net.layers] == cudnn and not im2col
    # Axpy's top has the shape of its second bottom, the block's feature map
    by_name = {l.name: l for l in net.layers}
    assert (by_name["conv2_2_1x1_reduce"].c, by_name["conv2_2_1x1_reduce"].h) == (256, 56)
    with pytest.raises(PrototxtError, match="Axpy=same:5: the layer has 3 bottom"):
        load_prototxt(path, "TEST", layer_shapes={"Axpy": 5})


def test_a_v1_net_is_planned_as_its_upgraded_form(capsys):
    v1 = load_prototxt(NETS / "bvlc_alexnet_v1_deploy.prototxt", "TEST")
    assert "V1 'layers' definitions upgraded" in capsys.readouterr().err
    shipped = load_prototxt(SHIPPED / "alexnet.prototxt", "TEST")

    def geometry(layers):
        return [(l.name, l.c, l.h, l.w, l.k, l.r, l.s, l.pad, l.stride, l.groups)
                for l in layers]
    assert geometry(v1.layers) == geometry(shipped.layers) and len(v1.layers) == 5


def test_a_fork_field_is_refused_in_one_line(capsys):
    path = NETS / "MobileNetSSD_deploy.prototxt"
    err = _one_line_refusal(capsys, ["plan", "--prototxt", str(path)])
    assert f"{path}:1177:3: layer 'conv11_mbox_loc_perm': " in err
    assert 'no field named "permute_param"' in err


# -- 3-D nets -----------------------------------------------------------------------------------
_3D = ('input: "v" input_shape { dim: 2 dim: 3 dim: 8 dim: 16 dim: 16 }\n'
       'layer { name: "c3" type: "Convolution" bottom: "v" top: "c3"\n'
       '  convolution_param { num_output: 4 kernel_size: 3 kernel_size: 3 kernel_size: 3 %s } }\n'
       'layer { name: "c2" type: "Reshape" bottom: "c3" top: "r"\n'
       '  reshape_param { shape { dim: 0 dim: -1 dim: 14 dim: 14 } } }\n'
       'layer { name: "c" type: "Convolution" bottom: "r" top: "c"\n'
       '  convolution_param { num_output: 4 kernel_size: 3 } }\n')


def test_a_3d_convolution_with_engine_caffe_runs_without_cudnn(tmp_path):
    path = tmp_path / "c3d.prototxt"
    path.write_text(_3D % "engine: CAFFE")
    net = load_prototxt(path)
    assert net.off_cudnn == {"c3": "engine: CAFFE (3-D)"}
    # its top: 2 x 4 x 6 x 14 x 14, reshaped to 2 x 24 x 14 x 14 for the 2-D one
    assert [(l.name, l.c, l.h) for l in net.layers] == [("c", 24, 14)]


def test_a_3d_convolution_on_the_cudnn_layer_is_planned_as_one(tmp_path):
    """Engine DEFAULT: the patched Caffe runs a 3-D convolution on its cuDNN layer through
    ucudnn, so the planner plans its 3-D kernel (Note [Convolutions that reach cuDNN])."""
    path = tmp_path / "c3d.prototxt"
    path.write_text(_3D % "")
    net = load_prototxt(path)
    assert net.off_cudnn == {}
    c3, c = net.layers
    assert (c3.name, c3.spatial, c3.kernel, c3.out_spatial) == ("c3", (8, 16, 16), (3, 3, 3),
                                                                 (6, 14, 14))
    assert (c.name, c.c, c.spatial) == ("c", 24, (14, 14))


def test_a_4d_convolution_on_the_cudnn_layer_is_refused_with_caffes_reason(tmp_path, capsys):
    path = tmp_path / "c4d.prototxt"
    path.write_text('input: "v" input_shape { dim: 2 dim: 3 dim: 4 dim: 8 dim: 16 dim: 16 }\n'
                    'layer { name: "c4" type: "Convolution" bottom: "v" top: "c4"\n'
                    '  convolution_param { num_output: 4 kernel_size: 3 } }\n')
    err = _one_line_refusal(capsys, ["plan", "--prototxt", str(path)])
    assert "layer 'c4' (type Convolution): a 4-D convolution (bottom (2, 3, 4, 8, 16, 16)) with " \
           "engine DEFAULT: CuDNNConvolution input must have 2 spatial axes" in err, err
    assert "or 3 through ucudnn. Use 'engine: CAFFE' for general ND convolution" in err


def test_three_kernel_sizes_on_a_2d_bottom_name_its_axes(tmp_path, capsys):
    path = tmp_path / "k3.prototxt"
    path.write_text(HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c"\n'
                    '  convolution_param { num_output: 4 kernel_size: 3 kernel_size: 3 '
                    'kernel_size: 3 } }\n')
    err = _one_line_refusal(capsys, ["plan", "--prototxt", str(path)])
    assert "field 'convolution_param.kernel_size': 3 values, but the bottom (8, 6, 13, 13) " \
           "has 2 spatial axes (Caffe takes one value, or one per spatial axis)" in err, err


def test_dilation_with_engine_cudnn_is_planned_as_the_patched_factory_runs_it(tmp_path):
    path = tmp_path / "d.prototxt"
    path.write_text(HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c"\n'
                    '  convolution_param { num_output: 4 kernel_size: 3 dilation: 2 '
                    'engine: CUDNN } }\n')
    net = load_prototxt(path)
    assert [(l.name, l.dilation) for l in net.layers] == [("c", (2, 2))]
    assert net.off_cudnn == {}


#: What each net in tests/data/nets/ gives: ("planned", convolutions on cuDNN, convolutions on
#: im2col) or ("refused", "file:line:col" or "" where the reason has no line, a substring of
#: Caffe's reason). A fork's net is refused by BVLC's schema; with that fork's caffe.proto
#: (``--caffe-proto``) it may plan.
OUTCOMES = {
    "MobileNetSSD_deploy": ("refused", "1177:3", 'no field named "permute_param"'),
    "ResNet-50-deploy": ("planned", 53, 0),
    "SE-BN-Inception": ("planned", 89, 0),
    "SE-ResNeXt-50": ("refused", "243:1", "Unknown layer type: Axpy"),
    "SE-ResNet-50": ("refused", "242:1", "Unknown layer type: Axpy"),
    "bvlc_alexnet_v1_deploy": ("planned", 5, 0),
    "cuhk_action_spatial_vgg_16_deploy": ("planned", 13, 0),
    "deploy_dpn92": ("refused", "60:5", 'no field named "ceil_mode"'),
    "deploy_inception-v3": ("planned", 94, 0),
    "deploy_resnet152_places365": ("planned", 155, 0),
    "deploy_xception": ("planned", 74, 0),
    "deploy_xception-dw": ("refused", "119:1", "Unknown layer type: ConvolutionDepthwise"),
    "hed_deploy": ("planned", 0, 19),
    "dilation8_pascal_voc_deploy": ("planned", 16, 8),
    "faster_rcnn_vgg16_test": ("refused", "483:3", 'no field named "roi_pooling_param"'),
    "mobilenet_v1_deploy": ("planned", 15, 13),
    "mobilenet_v2_deploy": ("planned", 37, 17),
    "open_nsfw_resnet_50_1by2_deploy": ("planned", 53, 0),
    "rcnn_batch_256_output_fc7": ("planned", 5, 0),
    "rfcn_resnet50_test": ("refused", "3618:5", 'no field named "psroi_pooling_param"'),
    "sphereface_deploy": ("planned", 20, 0),
    "squeezenet_v1.1_deploy": ("planned", 26, 0),
    "tsn_bn_inception_rgb_deploy": ("refused", "19:3", 'no field named "bn_param"'),
    "voc-fcn8s_deploy": ("planned", 18, 0),
}


def test_every_net_has_its_outcome_and_its_source():
    names = sorted(p.name[:-len(".prototxt")] for p in NETS.glob("*.prototxt"))
    assert names == sorted(OUTCOMES)
    readme = (NETS / "README.md").read_text()
    assert all(f"| `{n}.prototxt` |" in readme for n in names)


@pytest.mark.parametrize("net", sorted(OUTCOMES))
def test_every_net_is_planned_or_refused_in_one_line(fake_core, capsys, net):
    path = NETS / f"{net}.prototxt"
    outcome = OUTCOMES[net]
    argv = ["plan", "--prototxt", str(path), "--batch", "1", "--phase", "TEST", "--json"]
    if outcome[0] == "refused":
        err = _one_line_refusal(capsys, argv)
        where, reason = outcome[1:]
        assert err.startswith(f"ucudnn: error: --prototxt: {path}:{where}" if where else
                              f"ucudnn: error: --prototxt: {path}: layer "), err
        assert reason in err, err
        return
    status = main(argv)
    cap = capsys.readouterr()
    assert status == 0 and "Traceback" not in cap.err, cap.err
    cudnn, im2col = _convs(path)
    assert (len(cudnn), len(im2col)) == outcome[1:]
    doc = json.loads(cap.out)
    assert [r["layer"] for r in doc.get("without_cudnn", [])] == im2col
    ops = {}
    for k in doc["kernels"]:
        ops.setdefault(k["layer"], set()).add(k["op"])
    assert sorted(ops) == sorted(cudnn)
    # forward and backward-filter everywhere; backward-data where the bottom is not an input
    assert all({"fwd", "bwd_filter"} <= o <= {"fwd", "bwd_filter", "bwd_data"}
               for o in ops.values())


def test_resnext_plans_its_group_convolutions_through_a_forks_layer():
    path = NETS / "SE-ResNeXt-50.prototxt"
    cudnn, im2col = _convs(path)
    net = load_prototxt(path, "TEST", layer_shapes={"Axpy": 1})
    assert [l.name for l in net.layers] == cudnn and not im2col
    groups = {l.name: l.groups for l in net.layers}
    pb2_groups = {l.name: l.convolution_param.group
                  for l in read_net(load_caffe_pb2(), path).layer if l.type == "Convolution"}
    assert groups == pb2_groups and max(groups.values()) == 32


def test_inception_v3_plans_its_asymmetric_kernels_per_axis():
    path = NETS / "deploy_inception-v3.prototxt"

    def per_axis(p, name):
        hw = (getattr(p, f"{name}_h"), getattr(p, f"{name}_w"))
        given = list(getattr(p, "kernel_size" if name == "kernel" else name))
        return hw if any(hw) else tuple(given * 2) if given else (
            (0, 0) if name == "pad" else (1, 1))
    fields = {l.name: (per_axis(l.convolution_param, "kernel"),
                       per_axis(l.convolution_param, "pad"),
                       per_axis(l.convolution_param, "stride"))
              for l in read_net(load_caffe_pb2(), path).layer if l.type == "Convolution"}
    assert {(1, 7), (7, 1), (1, 3), (3, 1)} <= {k for k, _, _ in fields.values()}
    net = load_prototxt(path, "TEST")
    assert {l.name: ((l.r, l.s), l.pad, l.stride) for l in net.layers} == fields
    # a 1x7 and a 7x1 layer with pads (0, 3) and (3, 0) keep the 17x17 grid
    assert {(l.h, l.w) for l in net.layers if (l.r, l.s) in ((1, 7), (7, 1))} == {(17, 17)}


def test_xception_runs_its_depthwise_convolutions_on_cudnn_one_group_per_channel():
    path = NETS / "deploy_xception.prototxt"
    net = load_prototxt(path, "TEST")
    assert net.off_cudnn == {}
    grouped = {l.name for l in read_net(load_caffe_pb2(), path).layer
               if l.type == "Convolution" and l.convolution_param.group > 1}
    depthwise = [l for l in net.layers if l.groups > 1]
    assert grouped and {l.name for l in depthwise} == grouped
    assert all(l.groups == l.c == l.k for l in depthwise)


def test_hed_upsamples_with_deconvolution_and_crops_back_to_the_input():
    """HED's side outputs: 1-channel maps up-sampled by Deconvolution (stride * (x - 1) +
    kernel), cut to the input's size by Crop, concatenated and fused by a 1x1 convolution."""
    path = NETS / "hed_deploy.prototxt"
    net = read_net(load_caffe_pb2(), path)
    shapes = infer_shapes(net, "TEST")
    data = shapes["data"]
    for i, stride in enumerate((2, 4, 8, 16), start=2):
        n, c, h, w = shapes[f"score-dsn{i}"]
        assert shapes[f"score-dsn{i}-up"] == (n, c, stride * (h - 1) + 2 * stride,
                                              stride * (w - 1) + 2 * stride)
    assert all(shapes[f"upscore-dsn{i}"] == data[:1] + (1,) + data[2:] for i in range(1, 6))
    assert shapes["upscore-fuse"] == data[:1] + (1,) + data[2:]
    plan = load_prototxt(path, "TEST")
    assert plan.layers == [] and list(plan.off_cudnn) == _convs(path)[1]
