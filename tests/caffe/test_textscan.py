"""ucudnn.caffe.textscan: the layer a position is in, and where a field is, as Caffe's
io.cpp (caffe_patch/0002) names them."""
from ucudnn.caffe.textscan import cut, enclosing_layer, field_path, line_col, position

TEXT = '''name: "net"  # a comment with a { brace
layer {
  param { name: "w" }
  name: "conv{1}"   # the layer's own name, after a nested one
  convolution_param { num_output: 8 }
}
layer < name: 'b\\'s' type: "ReLU" >
layer {
  bottom: "x"
}
ucudnn_param { micro_batch_size: 4 micro_batch_size: 0 }
'''


def test_enclosing_layer():
    assert enclosing_layer(TEXT, 1, 10) is None                 # before any layer
    assert enclosing_layer(TEXT, 3, 5) == "conv{1}"             # its name comes later
    assert enclosing_layer(TEXT, 5, 25) == "conv{1}"
    assert enclosing_layer(TEXT, 7, 30) == "b\\'s"              # < > and quoted quotes
    assert enclosing_layer(TEXT, 9, 3) is None                  # a layer without a name
    assert enclosing_layer(TEXT, 11, 20) is None                # outside any layer
    assert enclosing_layer(TEXT, 99, 1) is None


def test_position_of_fields():
    def where(steps):
        at = position(TEXT, steps)
        return None if at is None else line_col(TEXT, at)
    assert where([("layer", 0), ("convolution_param", None), ("num_output", None)]) == (5, 23)
    assert where([("layer", 1), ("type", None)]) == (7, 22)
    assert where([("layer", 2)]) == (8, 1)
    assert where([("layer", 2), ("bottom", None)]) == (9, 3)
    assert where([("layer", 2), ("top", None)]) == (8, 1)       # not there: its block
    assert where([("ucudnn_param", None), ("micro_batch_size", 1)]) == (11, 36)
    assert where([("nosuch", None)]) is None
    assert where(field_path("layer[1].type")) == (7, 22)


def test_cut_keeps_a_window_and_escapes():
    assert cut("short") == "short"
    long = "a" * 50 + "b" * 10_000 + "c" * 50
    c = cut(long)
    assert len(c) <= 120 and c.startswith("a" * 50) and c.endswith("c" * 40) and "..." in c
    assert cut("x\x00y\u2028") == "x\\x00y\\u2028"
    assert len(cut("\x01" * 1000)) <= 120
