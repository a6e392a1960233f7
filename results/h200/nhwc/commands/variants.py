"""Writes the variants of ResNet-18 (batch 2, math FMA) that call S checks with
net_layout_check: OUT/name.prototxt for each."""
import sys
from pathlib import Path
from ucudnn.caffe.proto import load_caffe_pb2, read_net, write_net
pb2 = load_caffe_pb2()
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
def base():
    net = read_net(pb2, "results/cpu/share-diffs/resnet18_cpu.prototxt")
    for layer in net.layer:
        for field in ("convolution_param", "batch_norm_param", "pooling_param"):
            if layer.HasField(field):
                getattr(layer, field).ClearField("engine")
    net.ucudnn_param.math = pb2.UcudnnParameter.FMA
    return net
for name in ("default", "legacy", "graph", "undivided", "nofusion"):
    net = base()
    if name == "legacy":
        net.ucudnn_param.engines = pb2.UcudnnParameter.LEGACY
    if name == "graph":
        net.ucudnn_param.engines = pb2.UcudnnParameter.GRAPH
    if name == "undivided":
        net.ucudnn_param.policy = pb2.UcudnnParameter.UNDIVIDED
    if name == "nofusion":
        net.fusion.eltwise_relu = False
        net.fusion.batch_norm_relu = False
    write_net(net, str(out / f"{name}.prototxt"))
