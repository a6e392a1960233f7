"""Small Caffe nets as prototxt text, for the tests of ucudnn.caffe and the CLI."""

#: a DummyData layer: data 8 x 6 x 13 x 13 and a label of 8
HEAD = '''
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 8 dim: 6 dim: 13 dim: 13 } shape { dim: 8 } } }
'''


def conv(name, bottom, num, k, extra="", top=None, params=""):
    """A Convolution layer of ``num`` outputs and a ``k`` x ``k`` kernel (``extra``: more
    convolution_param fields; ``params``: fields of the layer)."""
    return (f'layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" '
            f'top: "{top or name}" {params} convolution_param {{ num_output: {num} '
            f'kernel_size: {k} {extra} }} }}\n')


def pool(name, bottom, k, s, pad=0, extra=""):
    """A MAX Pooling layer."""
    return (f'layer {{ name: "{name}" type: "Pooling" bottom: "{bottom}" top: "{name}" '
            f'pooling_param {{ pool: MAX kernel_size: {k} stride: {s} pad: {pad} {extra} }} }}\n')
