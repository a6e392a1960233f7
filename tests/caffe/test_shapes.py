"""Caffe's shape rules without Caffe (ucudnn.caffe.shapes, through ucudnn.caffe.prototxt):
every blob's shape in a phase, a LayerSpec per Convolution, the data layers' shapes from their
parameters, and what the prototxt does not settle asked for by blob and layer."""
import pytest

from net_text import HEAD, conv as _conv, pool as _pool
from ucudnn.caffe.prototxt import (PrototxtError, ShapeError, check_net, conv_layers,
                                   infer_shapes, parse_net_text)
from ucudnn.caffe.shapes import NetShapes, parse_input_shape
from ucudnn.plan.layers import LayerSpec


def _specs(text, **kw):
    return {l.name: l for l in conv_layers(parse_net_text(text), **kw)}


def test_grouped_convolution_keeps_total_channels_and_groups():
    text = HEAD + _conv("c1", "data", 12, 3, "pad: 1 stride: 2") \
        + _conv("c2", "c1", 16, 3, "pad: 1 group: 2")
    s = _specs(text)
    assert s["c1"] == LayerSpec("c1", 8, 6, 13, 13, 12, 3, 3, 1, 2, 1, 1, 1, False)
    # 13 -> (13 + 2 - 3) // 2 + 1 = 7; grouped: the total C and K, and Caffe's group count
    assert s["c2"] == LayerSpec("c2", 8, 12, 7, 7, 16, 3, 3, 1, 1, 1, groups=2, count=1,
                                bwd_data=True)


def test_two_bottoms_are_two_runs():
    text = HEAD + _conv("a", "data", 6, 1) + _conv("b", "data", 6, 1) + \
        'layer { name: "shared" type: "Convolution" bottom: "a" bottom: "b" top: "sa" ' \
        'top: "sb" convolution_param { num_output: 4 kernel_size: 3 group: 2 } }\n'
    assert _specs(text)["shared"] == LayerSpec("shared", 8, 6, 13, 13, 4, 3, 3, groups=2,
                                               count=2, bwd_data=True)
    shapes = infer_shapes(parse_net_text(text))
    assert shapes["sa"] == shapes["sb"] == (8, 4, 11, 11)


def test_kernel_h_w_dilation_and_errors():
    # a dilated convolution of engine CUDNN reaches cuDNN (the patched layer factory) and is
    # planned with its dilation per axis; its top has the dilated kernel's shape
    # (13 + 2 * 2 - 5 + 1, 13 + 2 * 4 - 9 + 1)
    net = parse_net_text(HEAD + _conv("c", "data", 4, 3, "dilation: 2 dilation: 4 pad: 2 "
                                                         "pad: 4 engine: CUDNN"))
    shapes = NetShapes(net, "TRAIN").run()
    assert [(l.name, l.dilation, l.pad, l.out_hw) for l in shapes.convs] == \
        [("c", (2, 4), (2, 4), (13, 13))]
    assert shapes.off_cudnn == {} and shapes.shapes["c"] == (8, 4, 13, 13)
    # with engine DEFAULT it runs in im2col, as in BVLC: not planned, listed with the reason;
    # a dilation of 1 on every axis is no dilation
    net = parse_net_text(HEAD + _conv("c", "data", 4, 3, "dilation: 2 dilation: 4 pad: 2 "
                                                         "pad: 4")
                         + _conv("u", "c", 4, 3, "dilation: 1 pad: 1"))
    shapes = NetShapes(net, "TRAIN").run()
    assert [l.name for l in shapes.convs] == ["u"]
    assert shapes.off_cudnn == {"c": "dilated, engine: DEFAULT (engine: CUDNN runs it on cuDNN)"}
    assert shapes.shapes["c"] == (8, 4, 13, 13)
    # with engine: CAFFE it runs in im2col: not planned, listed with the reason
    net = parse_net_text(HEAD + _conv("c", "data", 4, 3, "dilation: 2 pad: 2 engine: CAFFE"))
    shapes = NetShapes(net, "TRAIN").run()
    assert shapes.convs == [] and shapes.off_cudnn == {"c": "engine: CAFFE"}
    assert shapes.shapes["c"] == (8, 4, 13, 13)
    # non-square kernels, pads and strides are planned, per axis
    s = _specs(HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
               'convolution_param { num_output: 4 kernel_h: 3 kernel_w: 3 pad_h: 1 '
               'pad_w: 0 } }')["c"]
    assert (s.r, s.s, s.pad, s.h, s.w, s.out_hw) == (3, 3, (1, 0), 13, 13, (13, 11))
    with pytest.raises(PrototxtError, match="'c'.*group.*does not divide"):
        _specs(HEAD + _conv("c", "data", 4, 3, "group: 4"))
    with pytest.raises(PrototxtError, match="'c'.*kernel_size.*missing"):
        _specs(HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
               'convolution_param { num_output: 4 } }')
    with pytest.raises(PrototxtError, match="'c'.*larger than the padded input"):
        _specs(HEAD + _conv("c", "data", 4, 15))


@pytest.mark.parametrize("h, k, s, pad, extra, out", [
    (55, 3, 2, 0, "", 27),          # AlexNet pool1
    (6, 3, 2, 0, "", 3),            # ceil: floor would give 2
    (13, 3, 2, 0, "", 6),
    (3, 2, 2, 1, "", 2),            # ceil gives 3, but the last window would start in the pad
    (5, 3, 2, 1, "", 3),
    (6, 3, 2, 0, "round_mode: FLOOR", 2),
    (7, 1, 1, 0, "", 7),
])
def test_pooling_uses_caffes_ceil_rounding(h, k, s, pad, extra, out):
    text = ('input: "x" input_shape { dim: 2 dim: 3 dim: %d dim: %d }\n' % (h, h)
            + _pool("p", "x", k, s, pad, extra) + _conv("c", "p", 4, 1))
    assert _specs(text)["c"].h == out
    assert infer_shapes(parse_net_text(text))["p"] == (2, 3, out, out)


def test_global_pooling_inner_product_flatten_concat_eltwise_reshape():
    text = HEAD + _conv("a", "data", 10, 3, "pad: 1") + _conv("b", "data", 6, 1) + '''
    layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "cat" }
    layer { name: "sum" type: "Eltwise" bottom: "cat" bottom: "cat" top: "sum" }
    layer { name: "gp" type: "Pooling" bottom: "sum" top: "gp"
            pooling_param { pool: AVE global_pooling: true } }
    layer { name: "flat" type: "Flatten" bottom: "gp" top: "flat" }
    layer { name: "rs" type: "Reshape" bottom: "sum" top: "rs"
            reshape_param { shape { dim: 0 dim: -1 dim: 13 } } }
    layer { name: "fc" type: "InnerProduct" bottom: "sum" top: "fc"
            inner_product_param { num_output: 7 } }
    layer { name: "sm" type: "Softmax" bottom: "fc" top: "sm" }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss"
            top: "prob" }
    layer { name: "acc" type: "Accuracy" bottom: "fc" bottom: "label" top: "acc" }
    layer { name: "silence" type: "Silence" bottom: "acc" }
    '''
    shapes = infer_shapes(parse_net_text(text))
    assert shapes["cat"] == (8, 16, 13, 13)
    assert shapes["sum"] == (8, 16, 13, 13)
    assert shapes["gp"] == (8, 16, 1, 1)
    assert shapes["flat"] == (8, 16)
    assert shapes["rs"] == (8, 16 * 13, 13)
    assert shapes["fc"] == (8, 7) and shapes["sm"] == (8, 7)
    assert shapes["loss"] == () and shapes["prob"] == (8, 7) and shapes["acc"] == ()


def test_shape_mismatches_are_errors():
    bad_cat = HEAD + _conv("a", "data", 4, 3) + _conv("b", "data", 4, 1) + \
        'layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "cat" }'
    with pytest.raises(PrototxtError, match="'cat'.*differ outside axis 1"):
        infer_shapes(parse_net_text(bad_cat))
    bad_sum = bad_cat.replace('"Concat"', '"Eltwise"')
    with pytest.raises(PrototxtError, match="'cat'.*differ in shape"):
        infer_shapes(parse_net_text(bad_sum))


def test_phases_include_exclude():
    text = HEAD + _conv("both", "data", 4, 3) + '''
    layer { name: "train_only" type: "Convolution" bottom: "data" top: "t"
            include { phase: TRAIN } convolution_param { num_output: 4 kernel_size: 5 } }
    layer { name: "test_only" type: "Convolution" bottom: "data" top: "t"
            include { phase: TEST } convolution_param { num_output: 4 kernel_size: 7 } }
    layer { name: "not_test" type: "Convolution" bottom: "t" top: "u"
            exclude { phase: TEST } convolution_param { num_output: 4 kernel_size: 1 } }
    '''
    assert list(_specs(text)) == ["both", "train_only", "not_test"]
    assert list(_specs(text, phase="TEST")) == ["both", "test_only"]
    assert _specs(text)["not_test"].h == 13 - 4
    with pytest.raises(PrototxtError, match="phase"):
        _specs(text, phase="VAL")
    with pytest.raises(PrototxtError, match="'both'.*include or exclude rules, not both"):
        _specs(text.replace('top: "both"', 'top: "both" include { phase: TRAIN } '
                            'exclude { phase: TEST }'))


def test_state_level_and_stages():
    """Caffe's StateMeetsRule with the net's own state (the phase is the caller's)."""
    rules = {"deploy": 'include { stage: "deploy" }', "lvl3": "include { min_level: 3 }",
             "not_deploy": 'exclude { stage: "deploy" }',
             "max2": 'include { max_level: 2 not_stage: "train" }'}
    text = 'state { level: 2 stage: "deploy" }\n' + HEAD + "".join(
        _conv(name, "data", 4, 1).replace("convolution_param", rule + " convolution_param")
        for name, rule in rules.items())
    assert list(_specs(text)) == ["deploy", "max2"]


def test_batch_override_and_net_inputs():
    text = 'input: "x" input_dim: 4 input_dim: 3 input_dim: 9 input_dim: 9\n' + \
        _conv("c", "x", 8, 3)
    assert _specs(text)["c"].n == 4
    assert _specs(text, batch=32)["c"].n == 32
    text = 'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 ' \
        'dim: 9 dim: 9 } } }\n' + _conv("c", "x", 8, 3)
    assert _specs(text, batch=5)["c"] == LayerSpec("c", 5, 3, 9, 9, 8, 3, 3, bwd_data=False)
    legacy = '''layer { name: "d" type: "DummyData" top: "x" top: "y"
        dummy_data_param { num: 6 channels: 3 height: 11 width: 11 num: 6 channels: 1
        height: 1 width: 1 } }\n''' + _conv("c", "x", 8, 3)
    assert _specs(legacy)["c"] == LayerSpec("c", 6, 3, 11, 11, 8, 3, 3, bwd_data=False)
    assert infer_shapes(parse_net_text(legacy))["y"] == (6, 1, 1, 1)
    with pytest.raises(PrototxtError, match="input_dim"):
        _specs('input: "x" input_dim: 4 input_dim: 3\n' + _conv("c", "x", 8, 3))
    with pytest.raises(PrototxtError, match="batch"):
        _specs(text, batch=0)


def test_backward_data_only_where_a_gradient_is_needed():
    text = HEAD + _conv("first", "data", 6, 3, "pad: 1") + '''
    layer { name: "relu" type: "ReLU" bottom: "first" top: "first" }
    ''' + _conv("second", "first", 6, 3, "pad: 1") + \
        _conv("frozen", "data", 6, 3, "pad: 1",
              params="param { lr_mult: 0 } param { lr_mult: 0 }") + \
        _conv("after_frozen", "frozen", 6, 3, "pad: 1") + '''
    layer { name: "bn" type: "BatchNorm" bottom: "data" top: "bn" }
    ''' + _conv("after_bn", "bn", 6, 3, "pad: 1") + '''
    layer { name: "sc" type: "Scale" bottom: "data" top: "sc" scale_param { bias_term: true } }
    ''' + _conv("after_scale", "sc", 6, 3, "pad: 1") + \
        _conv("no_prop", "second", 6, 3, "pad: 1").replace(
            "convolution_param", "propagate_down: false convolution_param") + \
        _conv("prop", "data", 6, 3, "pad: 1").replace(
            "convolution_param", "propagate_down: true convolution_param")
    s = _specs(text)
    assert s["first"].bwd_data is False
    assert s["second"].bwd_data is True
    assert s["frozen"].bwd_data is False
    assert s["after_frozen"].bwd_data is False      # nothing learnable before it
    assert s["after_bn"].bwd_data is False          # BatchNorm statistics are not learned
    assert s["after_scale"].bwd_data is True        # Scale has learnable parameters
    assert s["no_prop"].bwd_data is False
    assert s["prop"].bwd_data is True
    forced = _specs("force_backward: true\n" + text)
    assert all(l.bwd_data for l in forced.values())


@pytest.mark.parametrize("layer, match", [
    # read as Caffe reads it: a misspelled field is refused
    ('layer { name: "d" type: "Data" top: "data" data_parm { batch_size: 4 } }',
     r'^<prototxt>:1:\d+: layer \'d\': .*no field named "data_parm"'),
    (HEAD + 'layer { name: "w" type: "Tile" bottom: "data" top: "w" }\n' + _conv("c", "w", 4, 3),
     r"layer 'c' \(type Convolution\): the shape of its input 'w' is not known: layer 'w' \(type "
     r"Tile\) reads it from files or computes it outside Caffe's shape rules; pass --input-shape "
     r"w=N,C,H,W, or --layer-shape Tile=same\[:K\] where its tops have its bottom K's shape"),
    (HEAD + _conv("c", "nothing", 4, 3), r"'c'.*bottom blob 'nothing'"),
    (HEAD + 'layer { name: "r" bottom: "data" top: "r" }', r"'r'.*'type' is missing"),
    (HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" }',
     r"'c'.*convolution_param"),
    (HEAD + _conv("c", "data", 4, 3) + _conv("c", "c", 4, 3),
     r"'c'.*a second Convolution layer named 'c'"),
    # a V1 net is upgraded (Note [Upgrading V1 nets]), then refused as Caffe refuses it
    ('layers { name: "old" type: CONVOLUTION }', r"'old'.*expects at least 1 bottom"),
    (HEAD + _conv("c", "data", 0, 3), r"'c'.*'convolution_param.num_output' must be >= 1"),
    (HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
     'convolution_param { kernel_size: 3 } }', r"'c'.*'convolution_param.num_output' is missing"),
    (HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
     'convolution_param { num_output: 4 kernel_size: 3 kernel_h: 3 kernel_w: 3 } }',
     r"'c'.*either kernel_size or kernel_h/kernel_w"),
    (HEAD + 'layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" }',
     r"'fc'.*'inner_product_param.num_output' is missing"),
    ('input: "x" input_shape { dim: 2 dim: -3 dim: 5 dim: 5 }\n' + _conv("c", "x", 4, 3),
     r"net input: field 'input_shape.dim' must be >= 0, got -3"),
])
def test_errors_name_the_layer(layer, match):
    with pytest.raises(PrototxtError, match=match):
        conv_layers(parse_net_text(layer))


def test_a_net_without_convolutions_has_none():
    """No Convolution layer: nothing to plan (an empty list, not an error); a layer type
    without a shape rule here leaves its tops unknown, which only a convolution needs."""
    assert conv_layers(parse_net_text(HEAD)) == []
    text = HEAD + 'layer { name: "w" type: "Tile" bottom: "data" top: "w" }'
    assert conv_layers(parse_net_text(text)) == []
    assert infer_shapes(parse_net_text(text))["w"] is None



# -- data layers (Note [Shapes the prototxt does not settle]) -----------------------------------
# Their parameters are outside ucudnn's caffe_subset.proto: these nets are read with Caffe's
# patched caffe.proto, as `--caffe-proto` / $UCUDNN_CAFFE_PROTO give it.

def _patched(patched_caffe_proto, text, **kw):
    net = parse_net_text(text, "d.prototxt", caffe_proto=str(patched_caffe_proto))
    return {l.name: l for l in conv_layers(net, source="d.prototxt", **kw)}, net


DATA = ('layer {{ name: "d" type: "Data" top: "data" top: "label" '
        'transform_param {{ {transform} }} data_param {{ source: "lmdb" batch_size: 32 }} }}\n')
MEANS = "crop_size: 227 mean_value: 104 mean_value: 117 mean_value: 123"


def test_data_layer_with_crop_and_mean_values(patched_caffe_proto):
    """A Data layer's shape from its parameters: batch_size, the crop, and as many channels
    as mean_values (the images' own size is only in the database)."""
    text = DATA.format(transform=MEANS) + _conv("conv1", "data", 96, 11, "stride: 4")
    specs, net = _patched(patched_caffe_proto, text)
    assert specs["conv1"] == LayerSpec("conv1", 32, 3, 227, 227, 96, 11, 11, stride=4,
                                       bwd_data=False)
    shapes = infer_shapes(net, source="d.prototxt")
    assert shapes["data"] == (32, 3, 227, 227) and shapes["label"] == (32,)
    assert _patched(patched_caffe_proto, text, batch=8)[0]["conv1"].n == 8


@pytest.mark.parametrize("transform", ["crop_size: 227 mean_value: 104", "scale: 0.0039",
                                       "mean_value: 1 mean_value: 2 mean_value: 3"])
def test_data_layer_the_prototxt_does_not_settle_asks_for_the_blob(patched_caffe_proto,
                                                                   transform):
    """One mean_value (channels unknown) or no crop (the images' size unknown): the
    convolution on its top asks for --input-shape, naming the blob and the layer."""
    text = DATA.format(transform=transform) + _conv("conv1", "data", 96, 11, "stride: 4")
    with pytest.raises(ShapeError, match=r"^d.prototxt: layer 'conv1' \(type Convolution\): the "
                                         r"shape of its input 'data' is not known: layer 'd' "
                                         r"\(type Data\) reads it from files or computes it outside Caffe's "
                                         r"shape rules; pass --input-shape data=N,C,H,W$"):
        _patched(patched_caffe_proto, text)
    specs, _ = _patched(patched_caffe_proto, text, given={"data": (32, 3, 227, 227)})
    assert (specs["conv1"].n, specs["conv1"].c, specs["conv1"].h) == (32, 3, 227)


def test_image_data_layer(patched_caffe_proto):
    """ImageData: the resize (new_height x new_width) or the crop, 3 channels or 1
    (is_color)."""
    def image(params, transform="", batch=16):
        return (f'layer {{ name: "img" type: "ImageData" top: "data" top: "label" '
                f'transform_param {{ {transform} }} image_data_param {{ source: "list.txt" '
                f'batch_size: {batch} {params} }} }}\n' + _conv("c", "data", 8, 3))
    s, net = _patched(patched_caffe_proto, image("new_height: 40 new_width: 60"))
    assert (s["c"].n, s["c"].c, s["c"].h, s["c"].w) == (16, 3, 40, 60)
    s, _ = _patched(patched_caffe_proto, image("new_height: 40 new_width: 60 is_color: false",
                                               "crop_size: 32"))
    assert (s["c"].c, s["c"].h, s["c"].w) == (1, 32, 32)          # the crop wins
    with pytest.raises(ShapeError, match=r"layer 'img' \(type ImageData\): field "
                                         r"'image_data_param.new_height': new_height and "
                                         "new_width must be set together"):
        _patched(patched_caffe_proto, image("new_height: 40"))
    with pytest.raises(ShapeError, match=r"its input 'data' is not known: layer 'img'.*--input-shape data="):
        _patched(patched_caffe_proto, image(""))                   # the images' own size
    with pytest.raises(ShapeError, match=r"layer 'img' \(type ImageData\): field "
                                         r"'image_data_param.batch_size' must be >= 1, got 0"):
        _patched(patched_caffe_proto, image("new_height: 40 new_width: 60", batch=0))


def test_window_data_layer(patched_caffe_proto):
    def window(transform):
        return (f'layer {{ name: "win" type: "WindowData" top: "data" top: "label" '
                f'transform_param {{ {transform} }} window_data_param {{ source: "w.txt" '
                f'batch_size: 128 }} }}\n' + _conv("c", "data", 8, 3))
    s, _ = _patched(patched_caffe_proto, window(MEANS))
    assert (s["c"].n, s["c"].c, s["c"].h) == (128, 3, 227)
    with pytest.raises(ShapeError, match=r"layer 'win' \(type WindowData\): field "
                                         r"'transform_param.crop_size' must be > 0"):
        _patched(patched_caffe_proto, window("mean_value: 1"))
    with pytest.raises(ShapeError, match=r"its input 'data' is not known: layer 'win'"):
        _patched(patched_caffe_proto, window("crop_size: 227"))


def test_memory_data_layer(patched_caffe_proto):
    text = ('layer { name: "m" type: "MemoryData" top: "data" top: "label" memory_data_param '
            '{ batch_size: 4 channels: 2 height: 9 width: 7 } }\n' + _conv("c", "data", 8, 3))
    assert _patched(patched_caffe_proto, text)[0]["c"] == LayerSpec("c", 4, 2, 9, 7, 8, 3, 3,
                                                                    bwd_data=False)


@pytest.mark.parametrize("layer", [
    'layer { name: "h5" type: "HDF5Data" top: "data" top: "label" '
    'hdf5_data_param { source: "files.txt" batch_size: 10 } }',
    'layer { name: "h5" type: "Python" top: "data" top: "label" '
    'python_param { module: "reader" layer: "Reader" } }'])
def test_hdf5_and_python_layers_ask_for_their_tops(patched_caffe_proto, layer):
    """HDF5Data's blobs and a Python layer's tops are only known when the net runs: planning
    asks for them, unknown shapes flow through the layers between, and the given shape
    (its batch replaced by --batch) is used."""
    text = (layer + '\nlayer { name: "act" type: "ReLU" bottom: "data" top: "act" }\n'
            + _conv("c", "act", 8, 3, "pad: 1"))
    with pytest.raises(ShapeError, match=r"layer 'c' \(type Convolution\): the shape of its "
                                         r"input 'act', which comes from blob 'data' is not "
                                         r"known: .*--input-shape data=N,C,H,W"):
        _patched(patched_caffe_proto, text)
    with pytest.raises(ShapeError, match=r"its input 'data' is not known: layer 'h5'"):
        _patched(patched_caffe_proto, layer + "\n" + _conv("c", "data", 8, 3, "pad: 1"))
    s, net = _patched(patched_caffe_proto, text, given={"data": (10, 3, 16, 16)})
    assert s["c"] == LayerSpec("c", 10, 3, 16, 16, 8, 3, 3, pad=1, bwd_data=False)
    assert _patched(patched_caffe_proto, text, given={"data": (10, 3, 16, 16)},
                    batch=4)[0]["c"].n == 4
    # checking a net (ucudnn prototxt) skips what it cannot know; planning needs it
    check_net(net, text, "d.prototxt")


def test_given_shapes_must_name_a_blob_of_the_phase():
    text = HEAD + _conv("c", "data", 4, 3)
    with pytest.raises(ShapeError, match="^--input-shape: no layer of phase TRAIN makes a "
                                         "blob 'nope'"):
        conv_layers(parse_net_text(text), given={"nope": (1, 2, 3, 4)})
    # a given shape replaces what the prototxt says of the blob
    s = {l.name: l for l in conv_layers(parse_net_text(text), given={"data": (2, 6, 20, 20)})}
    assert (s["c"].n, s["c"].h) == (2, 20)


@pytest.mark.parametrize("text, out", [("data=8,3,32,32", ("data", (8, 3, 32, 32))),
                                       (" x =1,2", ("x", (1, 2)))])
def test_parse_input_shape(text, out):
    assert parse_input_shape(text) == out


@pytest.mark.parametrize("text", ["data", "data=", "=1,2", "data=8,x", "data=8,0,3,3"])
def test_parse_input_shape_errors(text):
    with pytest.raises(ShapeError, match=r"^--input-shape: expected BLOB=N,C,H,W \(positive "
                                         rf"integers\), got '{text}'"):
        parse_input_shape(text)


def test_a_data_layer_read_with_the_subset_is_an_error_naming_the_layer():
    """A data layer that sets none of its parameters parses with ucudnn's subset (which has
    none of them): planning the convolution on its top is then an error naming the layer (not
    an AttributeError of the subset's missing transform_param); checking the net goes on."""
    text = ('layer { name: "d" type: "ImageData" top: "data" top: "label" }\n'
            + _conv("c", "data", 4, 3))
    with pytest.raises(PrototxtError, match=r"layer 'd'"):
        conv_layers(parse_net_text(text))
    check_net(parse_net_text(text), text, "d.prototxt")


def test_convolutions_run_in_the_nets_layout_grouped_ones_nchw():
    """Note [NHWC in Caffe]: with the net's ``ucudnn_param.layout: NHWC`` a one-group
    convolution's LayerSpec is NHWC (the kernels Caffe plans and runs), a grouped one NCHW."""
    text = HEAD + _conv("c1", "data", 12, 3, "pad: 1") + _conv("c2", "c1", 16, 3, "group: 2")
    assert {n: l.layout for n, l in _specs(text).items()} == {"c1": "NCHW", "c2": "NCHW"}
    s = _specs("ucudnn_param { layout: NHWC }\n" + text)
    assert {n: l.layout for n, l in s.items()} == {"c1": "NHWC", "c2": "NCHW"}
    assert s["c1"].describe().endswith(", NHWC")


@pytest.mark.parametrize("width", [2**54 + 2, 2**62 + 7])
def test_pooling_sizes_are_integers_end_to_end(width):
    """Caffe's output size, ceil or floor of (W + 2 pad - k) / stride, plus one: in integers,
    exact where a float quotient would round (above 2^53)."""
    text = (f'input: "d" input_shape {{ dim: 1 dim: 1 dim: 1 dim: {width} }}\n'
            'layer { name: "a" type: "Pooling" bottom: "d" top: "a" '
            'pooling_param { pool: MAX kernel_h: 1 kernel_w: 1 stride: 1 } }\n'
            'layer { name: "c" type: "Pooling" bottom: "d" top: "c" '
            'pooling_param { pool: MAX kernel_h: 1 kernel_w: 4 stride: 3 } }\n'
            'layer { name: "f" type: "Pooling" bottom: "d" top: "f" '
            'pooling_param { pool: MAX kernel_h: 1 kernel_w: 4 stride: 3 round_mode: FLOOR } }\n')
    shapes = infer_shapes(parse_net_text(text), "TEST")
    assert shapes["a"][3] == width
    assert shapes["c"][3] == -(-(width - 4) // 3) + 1 and shapes["f"][3] == (width - 4) // 3 + 1


def _deconv(name, bottom, num, k, extra=""):
    return (f'layer {{ name: "{name}" type: "Deconvolution" bottom: "{bottom}" top: "{name}" '
            f'convolution_param {{ num_output: {num} kernel_size: {k} {extra} }} }}\n')


def _crop(name, bottom, like, extra=""):
    return (f'layer {{ name: "{name}" type: "Crop" bottom: "{bottom}" bottom: "{like}" '
            f'top: "{name}" {extra} }}\n')


def test_deconvolution_and_crop_follow_caffes_shape_rules():
    text = (HEAD + _deconv("up", "data", 4, 4, "stride: 2 pad: 1")
            + _deconv("up3", "data", 2, 3, "stride: 3 dilation: 2 group: 2")
            + _crop("cut", "up", "data") + _crop("cut1", "up", "data",
                                                   "crop_param { axis: -1 offset: 2 }")
            + _crop("cut2", "up", "data", "crop_param { offset: 0 offset: 13 }")
            + 'layer { name: "cat" type: "Concat" bottom: "cut" bottom: "data" top: "cat" }\n'
            + _conv("c", "cat", 4, 3))
    shapes = infer_shapes(parse_net_text(text))
    # stride * (13 - 1) + dilation * (kernel - 1) + 1 - 2 * pad
    assert shapes["up"] == (8, 4, 2 * 12 + 3 + 1 - 2, 26)
    assert shapes["up3"] == (8, 2, 3 * 12 + 2 * 2 + 1, 41)
    # the first bottom cut to the second's size from crop_param.axis (2 unless given) on
    assert shapes["cut"] == shapes["cut2"] == (8, 4, 13, 13)
    assert shapes["cut1"] == (8, 4, 26, 13)
    assert _specs(text)["c"] == LayerSpec("c", 8, 10, 13, 13, 4, 3, 3, bwd_data=True)


@pytest.mark.parametrize("layer, match", [
    (_crop("cut", "up", "data", "crop_param { offset: 14 }"),
     r"'cut'.*the crop for dimension 2 is out-of-bounds with size 13 and offset 14"),
    (_crop("cut", "up", "data", "crop_param { offset: 1 offset: 2 offset: 3 }"),
     r"'cut'.*number of offset values specified must be equal to the number of dimensions "
     r"following axis"),
    (_crop("cut", "data", "up"), r"'cut'.*dimension 2 is out-of-bounds with size 26 and "
     r"offset 0"),
    ('layer { name: "cut" type: "Crop" bottom: "up" top: "cut" }',
     r"'cut'.*expects 2 bottom blob\(s\), got 1"),
    # 1 * (13 - 1) + 3 - 2 * 8 = -1
    (_deconv("d", "data", 4, 3, "pad: 8"), r"'d'.*pad \(8, 8\) leaves an output of size "
     r"\(-1, -1\)"),
    (_deconv("d", "data", 4, 3, "group: 4"), r"'d'.*group': 4 does not divide input channels 6"),
    (_deconv("d", "data", 4, 3, "dilation: 2 engine: CUDNN"),
     r"'d'.*CuDNN doesn't support the dilated deconvolution at Layer d"),
])
def test_deconvolution_and_crop_refuse_what_caffe_refuses(layer, match):
    text = HEAD + _deconv("up", "data", 4, 4, "stride: 2 pad: 1") + layer
    with pytest.raises(ShapeError, match=match):
        infer_shapes(parse_net_text(text))


_VOLUME = 'input: "vol" input_shape { dim: 2 dim: 4 dim: 3 dim: 8 dim: 8 }\n'


@pytest.mark.parametrize("layer, match", [
    ('layer { name: "p" type: "PReLU" bottom: "vol" top: "vol" }',
     r"^<prototxt>: layer 'p' \(type PReLU\): the bottom \(2, 4, 3, 8, 8\) has 5 axes, "
     r"and BVLC Caffe's PReLU takes at most 4$"),
    ('layer { name: "n" type: "LRN" bottom: "vol" top: "n" }', r"'n'.*LRN takes exactly 4"),
    ('layer { name: "m" type: "MVN" bottom: "vol" top: "m" }', r"'m'.*MVN takes at most 4"),
    # cuDNN's ReLU, Sigmoid and TanH, which engine DEFAULT makes in a build with cuDNN
    ('layer { name: "r" type: "ReLU" bottom: "vol" top: "vol" }',
     r"'r' \(type ReLU\): field 'relu_param.engine': .*5 axes.*engine: CAFFE"),
    ('layer { name: "s" type: "Sigmoid" bottom: "vol" top: "s" '
     'sigmoid_param { engine: CUDNN } }', r"'s'.*field 'sigmoid_param.engine'"),
    ('layer { name: "t" type: "TanH" bottom: "vol" top: "t" }', r"'t'.*'tanh_param.engine'"),
])
def test_layers_of_4_axes_refuse_a_volume(layer, match):
    with pytest.raises(ShapeError, match=match):
        infer_shapes(parse_net_text(_VOLUME + layer))


def test_layers_of_any_axes_take_a_volume():
    text = _VOLUME + "".join(
        f'layer {{ name: "{n}" type: "{t}" bottom: "vol" top: "{n}" {extra} }}\n'
        for n, t, extra in [("r", "ReLU", "relu_param { engine: CAFFE }"),
                            ("s", "Sigmoid", "sigmoid_param { engine: CAFFE }"),
                            ("d", "Dropout", ""), ("b", "BatchNorm", ""),
                            ("sm", "Softmax", "")])
    shapes = infer_shapes(parse_net_text(text))
    assert {shapes[n] for n in ("r", "s", "d", "b", "sm")} == {(2, 4, 3, 8, 8)}
    # 4 axes and fewer: what these layers take
    flat = 'input: "x" input_shape { dim: 2 dim: 4 dim: 8 dim: 8 }\n' + \
        'layer { name: "p" type: "PReLU" bottom: "x" top: "p" }\n' + \
        'layer { name: "r" type: "ReLU" bottom: "x" top: "r" }\n'
    assert infer_shapes(parse_net_text(flat))["p"] == (2, 4, 8, 8)
