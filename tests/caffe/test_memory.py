"""Note [Caffe's memory] (ucudnn/caffe/memory.py): the parts of a small net counted by hand,
and the shipped ResNets' counts, which the H200's NVML peaks bound from above."""
from repo_paths import NETS
from ucudnn.caffe.memory import ELEM, live_diffs_peak, net_memory
from ucudnn.caffe.proto import load_caffe_pb2, parse_net, read_net

NET = """
name: "m"
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } shape { dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "conv2" type: "Convolution" bottom: "conv" top: "conv2"
        convolution_param { num_output: 4 kernel_size: 1 bias_term: false } }
layer { name: "sum" type: "Eltwise" bottom: "conv" bottom: "conv2" top: "sum" }
layer { name: "pool" type: "Pooling" bottom: "sum" top: "pool"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
        inner_product_param { num_output: 5 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""


def test_the_parts_of_a_small_net():
    pb2 = load_caffe_pb2()
    m = net_memory(parse_net(pb2, NET, "m.prototxt"), "m.prototxt")
    act = 2 * 4 * 8 * 8                     # conv, conv2 and sum: 2 x 4 x 8 x 8
    pool, fc = 2 * 4 * 4 * 4, 2 * 5
    blobs = {"data": 2 * 3 * 8 * 8, "label": 2, "conv": act, "conv2": act, "sum": act,
             "pool": pool, "fc": fc, "loss": 1}
    assert m.blobs == {b: ELEM * n for b, n in blobs.items()}
    assert m.data == ELEM * sum(blobs.values())
    # data and label need no gradient; every other blob does
    assert m.diffs == ELEM * (3 * act + pool + fc + 1)
    # conv after the ReLU feeds conv2 and the Eltwise: one Split, two more gradients
    assert m.split_diffs == ELEM * 2 * act
    assert m.bn_saved == ELEM * act and m.pool_masks == ELEM * pool
    weights = (4 * 3 * 9 + 4) + 4 * 4 + (5 * 4 * 4 * 4 + 5) + 2 * 4 + (2 * 4 + 1)
    assert m.params == 2 * ELEM * weights
    assert m.total == sum(v for k, v in m.as_dict().items() if k != "total")


def test_gradients_alive_at_once():
    """Note [Gradients that could share]: in the small net the most gradients alive at once
    are three activations' (around the Split: conv's own, the Split's two tops; then conv2's,
    the second top and sum's), not the five Caffe keeps."""
    pb2 = load_caffe_pb2()
    net = parse_net(pb2, NET, "m.prototxt")
    act = 2 * 4 * 8 * 8
    assert live_diffs_peak(net, "m.prototxt") == ELEM * 3 * act
    m = net_memory(net, "m.prototxt")
    assert m.diffs + m.split_diffs == ELEM * (5 * act + 2 * 4 * 4 * 4 + 2 * 5 + 1)


def test_shipped_resnets_within_what_the_h200_measured():
    """NVML's peaks of `caffe time` on the H200 (results/h200/pytorch-best/points.csv) hold
    these parts, the workspace arena and the CUDA context: the count stays below them."""
    pb2 = load_caffe_pb2()
    peak = {"resnet18": 14447280128, "resnet50": 32329695232}
    arena = {"resnet18": 1033676032, "resnet50": 1242039296}
    for name in peak:
        m = net_memory(read_net(pb2, str(NETS / f"{name}.prototxt")), name)
        assert 0.8 * peak[name] < m.total + arena[name] < peak[name], name
        assert m.split_diffs > 0 and m.bn_saved > 0
        # gradients that could share memory: about a tenth of what Caffe keeps
        live = live_diffs_peak(read_net(pb2, str(NETS / f"{name}.prototxt")), name)
        assert max(m.blobs.values()) <= live < 0.25 * (m.diffs + m.split_diffs), name
    at256 = net_memory(read_net(pb2, str(NETS / "resnet50.prototxt")), "r50", batch=256)
    at128 = net_memory(read_net(pb2, str(NETS / "resnet50.prototxt")), "r50")
    assert at256.data > 1.99 * at128.data and at256.params == at128.params
