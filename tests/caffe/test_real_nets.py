"""Public nets from other repositories (tests/data/nets/README.md): each is planned as the
patched Caffe runs it -- only the convolutions its layer factory sends to cuDNN (Note
[Convolutions that reach cuDNN] in ucudnn/caffe/shapes.py) -- or refused with Caffe's own
reason, in one line, with no traceback."""
import json
from pathlib import Path

import pytest

from net_text import HEAD
from ucudnn.caffe.proto import PrototxtError, load_caffe_pb2, read_net
from ucudnn.caffe.prototxt import load_prototxt
from ucudnn.cli import main

NETS = Path(__file__).resolve().parents[1] / "data" / "nets"
SHIPPED = Path(__file__).resolve().parents[2] / "prototxt"


def _convs(path):
    """(convolutions Caffe runs with cuDNN, those it runs with im2col), from the parsed net's
    fields by the patched factory's rule written out here: engine CAFFE, dilated or not."""
    pb2 = load_caffe_pb2()
    net = read_net(pb2, path)
    cudnn, im2col = [], []
    for layer in net.layer:
        if layer.type == "Convolution":
            p = layer.convolution_param
            off = p.engine == p.CAFFE
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


def test_dilated_convolutions_are_planned_with_their_dilation():
    path = NETS / "dilation8_pascal_voc_deploy.prototxt"
    dilated = {l.name: tuple(l.convolution_param.dilation) * 2
               for l in read_net(load_caffe_pb2(), path).layer
               if l.type == "Convolution" and any(d > 1 for d in l.convolution_param.dilation)}
    assert len(dilated) >= 5
    net = load_prototxt(path, "TEST")
    assert net.off_cudnn == {}
    assert [l.name for l in net.layers] == _convs(path)[0]
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


def test_a_3d_convolution_on_the_cudnn_layer_is_refused_with_caffes_reason(tmp_path, capsys):
    path = tmp_path / "c3d.prototxt"
    path.write_text(_3D % "")
    err = _one_line_refusal(capsys, ["plan", "--prototxt", str(path)])
    assert "layer 'c3' (type Convolution): a 3-D convolution (bottom (2, 3, 8, 16, 16)) with " \
           "engine DEFAULT: CuDNNConvolution input must have 2 spatial axes" in err, err
    assert "Use 'engine: CAFFE' for general ND convolution" in err


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


@pytest.mark.parametrize("net", sorted(p.name for p in NETS.glob("*.prototxt")))
def test_every_net_is_planned_or_refused_in_one_line(fake_core, capsys, net):
    status = main(["plan", "--prototxt", str(NETS / net), "--batch", "1", "--phase", "TEST"])
    err = capsys.readouterr().err
    assert status in (0, 2) and "Traceback" not in err
    if status == 2:
        assert err.count("ucudnn: error:") == 1 and err.endswith("\n")
