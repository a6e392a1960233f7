"""prototxt/resnet18.prototxt for Caffe's CPU mode: an Input layer of batch 2 in place of
DummyData (whose gaussian data would differ between the two nets), engine CAFFE wherever a
layer has a choice. Writes resnet18_cpu.prototxt next to this file's folder."""
from pathlib import Path

from google.protobuf import text_format

from ucudnn.caffe import proto

HERE = Path(__file__).resolve().parent
pb2 = proto.load_caffe_pb2()
net = proto.read_net(pb2, HERE.parents[3] / "prototxt" / "resnet18.prototxt")
for layer in net.layer:
    if layer.type == "DummyData":
        layer.type = "Input"
        layer.ClearField("dummy_data_param")
        layer.input_param.shape.add().dim.extend([2, 3, 224, 224])
        layer.input_param.shape.add().dim.extend([2])
    if layer.type == "Convolution":
        layer.convolution_param.engine = pb2.ConvolutionParameter.CAFFE
    if layer.type == "ReLU":
        layer.relu_param.engine = pb2.ReLUParameter.CAFFE
    if layer.type == "Pooling":
        layer.pooling_param.engine = pb2.PoolingParameter.CAFFE
    if layer.type == "BatchNorm":
        layer.batch_norm_param.engine = pb2.BatchNormParameter.CAFFE
    if layer.type == "SoftmaxWithLoss":
        layer.softmax_param.engine = pb2.SoftmaxParameter.CAFFE
(HERE.parent / "resnet18_cpu.prototxt").write_text(text_format.MessageToString(net))
