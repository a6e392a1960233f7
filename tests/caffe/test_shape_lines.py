"""Errors of shape inference name the prototxt's file and line, the layer and the field, as
the reader's errors do (FILE:LINE: layer 'NAME' (type T): field ...)."""
import pytest

from net_text import HEAD, conv
from ucudnn.caffe.prototxt import PrototxtError, load_prototxt
from ucudnn.cli import main


def _line(text, needle):
    return text[:text.index(needle)].count("\n") + 1


def test_a_shape_error_names_the_line_of_its_layer(tmp_path):
    pool = ('layer {\n  name: "p"\n  type: "Pooling"\n  bottom: "c"\n  top: "p"\n'
            '  pooling_param { pool: MAX kernel_size: 2 pad: 2 }\n}\n')
    text = HEAD + conv("c", "data", 4, 3) + pool
    path = tmp_path / "n.prototxt"
    path.write_text(text)
    line = _line(text, 'layer {\n  name: "p"')
    with pytest.raises(PrototxtError, match=rf"^{path}:{line}: "
                                            r"layer 'p' \(type Pooling\): field "
                                            r"'pooling_param.pad' must be smaller"):
        load_prototxt(path)


def test_the_line_of_a_v1_layer_and_of_the_net_input(tmp_path, capsys):
    v1 = ('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 8\ninput_dim: 8\n'
          'layers { name: "c1" type: CONVOLUTION bottom: "data" top: "c1"\n'
          '  convolution_param { num_output: 4 kernel_size: 3 } }\n'
          'layers { name: "c2" type: CONVOLUTION bottom: "c1" top: "c2"\n'
          '  convolution_param { num_output: 4 kernel_size: 9 } }\n')
    path = tmp_path / "v1.prototxt"
    path.write_text(v1)
    assert main(["plan", "--prototxt", str(path)]) == 2
    err = capsys.readouterr().err
    line = _line(v1, 'layers { name: "c2"')
    assert f"{path}:{line}: layer 'c2' (type Convolution): the " \
           "kernel 9x9 is larger than the padded input 6x6" in err, err
    path.write_text(v1.replace("input_dim: 8\ninput_dim: 8\n", "input_dim: 8\n"))
    assert main(["plan", "--prototxt", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: net input: field 'input_dim': 3 values for 1 input(s)" in err, err
