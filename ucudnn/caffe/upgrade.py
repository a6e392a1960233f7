"""V1 nets (``layers { type: CONVOLUTION ... }``) upgraded as Caffe upgrades them when it reads
them (``UpgradeNetAsNeeded`` in Caffe's ``src/caffe/util/upgrade_proto.cpp``).

Note [Upgrading V1 nets]
    Caffe reads a V1 net and upgrades it before ``Net::Init``, in the order of
    ``UpgradeNetAsNeeded``: first the data layers' transformation fields (``scale``,
    ``mean_file``, ``crop_size``, ``mirror`` of a DATA, IMAGE_DATA or WINDOW_DATA layer's
    own parameters) move into its ``transform_param`` (``UpgradeNetDataTransformation``);
    then every ``layers`` entry becomes a ``layer`` (``UpgradeV1LayerParameter``): the type
    enum becomes Caffe's type name (:data:`V1_TYPES`, ``UpgradeV1LayerType``), ``param``
    names, ``blob_share_mode``, ``blobs_lr`` and ``weight_decay`` become the ``param``
    specs' ``name``, ``share_mode``, ``lr_mult`` and ``decay_mult``, and name, bottoms,
    tops, include/exclude rules, blobs, ``loss_weight`` and every ``*_param`` message are
    copied. The net's ``input``/``input_dim`` fields stay as they are (this reader takes
    them as they are, Note [Shapes the prototxt does not settle] in
    :mod:`ucudnn.caffe.shapes`). :func:`upgrade_v1` does this on the parsed message, so a
    written variant (``ucudnn prototxt``) is the upgraded net. V0 nets (``layers { layer {
    ... } }``) are not upgraded (Note [Old net formats] in :mod:`ucudnn.caffe.proto`).
"""
from __future__ import annotations

__all__ = ["V1_TYPES", "upgrade_v1"]

#: V1LayerParameter.LayerType enum name -> the type name (``UpgradeV1LayerType``)
V1_TYPES = {
    "NONE": "", "ABSVAL": "AbsVal", "ACCURACY": "Accuracy", "ARGMAX": "ArgMax", "BNLL": "BNLL",
    "CONCAT": "Concat", "CONTRASTIVE_LOSS": "ContrastiveLoss", "CONVOLUTION": "Convolution",
    "DECONVOLUTION": "Deconvolution", "DATA": "Data", "DROPOUT": "Dropout",
    "DUMMY_DATA": "DummyData", "EUCLIDEAN_LOSS": "EuclideanLoss", "ELTWISE": "Eltwise",
    "EXP": "Exp", "FLATTEN": "Flatten", "HDF5_DATA": "HDF5Data", "HDF5_OUTPUT": "HDF5Output",
    "HINGE_LOSS": "HingeLoss", "IM2COL": "Im2col", "IMAGE_DATA": "ImageData",
    "INFOGAIN_LOSS": "InfogainLoss", "INNER_PRODUCT": "InnerProduct", "LRN": "LRN",
    "MEMORY_DATA": "MemoryData", "MULTINOMIAL_LOGISTIC_LOSS": "MultinomialLogisticLoss",
    "MVN": "MVN", "POOLING": "Pooling", "POWER": "Power", "RELU": "ReLU",
    "SIGMOID": "Sigmoid", "SIGMOID_CROSS_ENTROPY_LOSS": "SigmoidCrossEntropyLoss",
    "SILENCE": "Silence", "SOFTMAX": "Softmax", "SOFTMAX_LOSS": "SoftmaxWithLoss",
    "SPLIT": "Split", "SLICE": "Slice", "TANH": "TanH", "WINDOW_DATA": "WindowData",
    "THRESHOLD": "Threshold",
}
#: the data layers whose own transformation fields move to transform_param
_DATA = {"DATA": "data_param", "IMAGE_DATA": "image_data_param",
         "WINDOW_DATA": "window_data_param"}
_TRANSFORM = ("scale", "mean_file", "crop_size", "mirror")


def _data_transformation(v1, type_name: str) -> None:
    field = _DATA.get(type_name)
    if field is None or not v1.HasField(field):
        return
    p = getattr(v1, field)
    for f in _TRANSFORM:
        if f in p.DESCRIPTOR.fields_by_name and p.HasField(f):
            setattr(v1.transform_param, f, getattr(p, f))
            p.ClearField(f)


def _layer(v1, layer, where: str) -> None:
    """``UpgradeV1LayerParameter``: ``v1`` into the empty ``layer``."""
    enum = v1.DESCRIPTOR.fields_by_name["type"].enum_type
    type_name = enum.values_by_number[v1.type].name if v1.HasField("type") else None
    if type_name is not None and type_name not in V1_TYPES:
        raise ValueError(f"{where}: Unknown V1LayerParameter layer type: {type_name}")
    if type_name is not None:
        _data_transformation(v1, type_name)
    layer.bottom.extend(v1.bottom)
    layer.top.extend(v1.top)
    if v1.HasField("name"):
        layer.name = v1.name
    for rule in v1.include:
        layer.include.add().CopyFrom(rule)
    for rule in v1.exclude:
        layer.exclude.add().CopyFrom(rule)
    if type_name is not None:
        layer.type = V1_TYPES[type_name]
    for b in v1.blobs:
        layer.blobs.add().CopyFrom(b)

    def spec(i):
        while len(layer.param) <= i:
            layer.param.add()
        return layer.param[i]
    for i, name in enumerate(v1.param):
        spec(i).name = name
    modes = v1.DESCRIPTOR.fields_by_name["blob_share_mode"].enum_type
    for i, mode in enumerate(v1.blob_share_mode):
        spec(i).share_mode = getattr(type(spec(i)), modes.values_by_number[mode].name)
    for i, lr in enumerate(v1.blobs_lr):
        spec(i).lr_mult = lr
    for i, decay in enumerate(v1.weight_decay):
        spec(i).decay_mult = decay
    layer.loss_weight.extend(v1.loss_weight)
    ours = layer.DESCRIPTOR.fields_by_name
    for f, value in v1.ListFields():
        if f.name.endswith("_param") and f.name in ours:
            getattr(layer, f.name).CopyFrom(value)


def upgrade_v1(net, source: str) -> int:
    """Upgrade the V1 ``layers`` of ``net`` in place into ``layer`` entries (Note [Upgrading
    V1 nets]); returns how many. A net with both is refused, as Caffe refuses it: a
    ValueError naming ``source`` (the reader makes it its own error)."""
    if len(net.layer):
        raise ValueError(f"{source}: Refusing to upgrade inconsistent NetParameter input; "
                            "the definition includes both 'layer' and 'layers' fields")
    v1_layers = list(net.layers)
    for i, v1 in enumerate(v1_layers):
        _layer(v1, net.layer.add(), f"{source}: layers #{i + 1} ({v1.name!r})")
    net.ClearField("layers")
    return len(v1_layers)
