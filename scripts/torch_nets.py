"""The networks of scripts/time_pytorch.py in torch.nn, layer for layer as in prototxt/ (Caffe
pools with ceil-mode output sizes), and ResNet-50 v1 (Caffe's, He et al. 2016).

ResNet-50 (no prototxt/ net; 3x224x224, 1000 classes, batch 128 by default) is built as the
Caffe ResNet-50 of He et al. 2016: bottleneck v1, a downsampling block's stride on its first
1x1 convolution (branch2a) and its projection shortcut. torchvision's resnet50 is "v1.5", the
stride on the 3x3. This net is torchvision's resnet50(weights=None) with, in each Bottleneck
that has a downsample, conv1.stride = (s, s) and conv2.stride = (1, 1): the same layers and
parameters; v1 does less work (those blocks' 3x3 convolutions run at the lower resolution).
"""
from __future__ import annotations

try:
    import torch.nn.functional as F
    from torch import nn
except ImportError:       # the names and batches are read without torch
    nn = F = None

#: the base of the networks' blocks: nn.Module, or object where torch is missing
_Module = nn.Module if nn is not None else object

NETS = ("alexnet", "resnet18", "cifar10", "resnet50")


def alexnet():
    """bvlc_alexnet train_val. 227 -> conv1 55 -> pool1 27 -> pool2 13 -> pool5 6: 256x6x6 = 9216
    features into fc6; fc6, fc7 4096, fc8 1000. conv2, conv4 and conv5 have group 2."""
    def lrn():
        return nn.LocalResponseNorm(size=5, alpha=1e-4, beta=0.75, k=1.0)   # Caffe: k = 1

    def pool():
        return nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True)

    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(inplace=True), lrn(), pool(),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(inplace=True), lrn(), pool(),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(inplace=True), pool(),
        nn.Flatten(),
        nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 1000),
    )


def conv_bn(cin, cout, kernel, stride, pad):
    """Convolution without bias, then BatchNorm + Scale (Caffe) = affine BatchNorm2d."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=pad, bias=False),
                         nn.BatchNorm2d(cout))


class BasicBlock(_Module):
    """Two 3x3 convolutions; a 1x1 projection shortcut (branch1) where the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.branch2a = conv_bn(cin, cout, 3, stride, 1)
        self.branch2b = conv_bn(cout, cout, 3, 1, 1)
        self.branch1 = conv_bn(cin, cout, 1, stride, 0) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        y = self.branch2b(F.relu(self.branch2a(x), inplace=True))
        shortcut = x if self.branch1 is None else self.branch1(x)
        return F.relu(y + shortcut, inplace=True)


class Bottleneck(_Module):
    """1x1 reduce to ``width`` (branch2a), 3x3 (branch2b), 1x1 expand to 4 x ``width``
    (branch2c); a 1x1 projection shortcut (branch1) where the shape changes. v1: the stride is
    on branch2a and branch1, as in Caffe's ResNet-50 (torchvision's v1.5 puts it on the 3x3)."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = 4 * width
        self.branch2a = conv_bn(cin, width, 1, stride, 0)
        self.branch2b = conv_bn(width, width, 3, 1, 1)
        self.branch2c = conv_bn(width, cout, 1, 1, 0)
        self.branch1 = conv_bn(cin, cout, 1, stride, 0) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        y = F.relu(self.branch2a(x), inplace=True)
        y = self.branch2c(F.relu(self.branch2b(y), inplace=True))
        shortcut = x if self.branch1 is None else self.branch1(x)
        return F.relu(y + shortcut, inplace=True)


def _stem():
    """conv1 7x7/2 pad 3 -> 112, pool1 3x3/2 pad 0 ceil -> 56 (3x224x224 in)."""
    return [conv_bn(3, 64, 7, 2, 3), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True)]


def resnet18():
    """3x224x224: conv1 7x7/2 -> 112, pool1 3x3/2 pad 0 ceil -> 56, res2..res5 -> 7, global avg."""
    stages, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(
        *_stem(),
        *stages,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000),
    )


def resnet50():
    """He et al. 2016 ResNet-50 (Caffe's, bottleneck v1), 3x224x224: conv1 and pool1 as
    ResNet-18's -> 56; res2 3 blocks of width 64 (256 out) at 56, res3 4 x 128 (512) at 28,
    res4 6 x 256 (1024) at 14, res5 3 x 512 (2048) at 7; global avg, fc 1000. The first block of
    res3..res5 downsamples with stride 2 on its first 1x1 (:class:`Bottleneck`)."""
    stages, cin = [], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        stages.append(Bottleneck(cin, width, stride))
        stages += [Bottleneck(4 * width, width, 1) for _ in range(blocks - 1)]
        cin = 4 * width
    return nn.Sequential(
        *_stem(),
        *stages,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000),
    )


def cifar10():
    """cifar10_quick: 3x32x32 -> 32 -> pool1 16 -> pool2 8 -> pool3 4; 64x4x4 = 1024 -> 64 -> 10."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2),
        nn.MaxPool2d(3, stride=2, ceil_mode=True), nn.ReLU(inplace=True),   # pool1 before relu1
        nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(inplace=True),
        nn.AvgPool2d(3, stride=2, ceil_mode=True),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(inplace=True),
        nn.AvgPool2d(3, stride=2, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 64),                           # no ReLU between ip1 and ip2
        nn.Linear(64, 10),
    )


# name: (constructor, batch (the prototxt's; resnet50 has none there), input C x H x W, classes)
SPECS = {
    "alexnet": (alexnet, 256, (3, 227, 227), 1000),
    "resnet18": (resnet18, 256, (3, 224, 224), 1000),
    "cifar10": (cifar10, 1024, (3, 32, 32), 10),
    "resnet50": (resnet50, 128, (3, 224, 224), 1000),
}


def build_net(name, batch=None):
    """(model, input_shape, num_classes) for a net of :data:`SPECS`; batch None = its default."""
    make, default_batch, chw, classes = SPECS[name]
    return make(), (batch or default_batch, *chw), classes


def net_batch(name, batch=None):
    return batch or SPECS[name][1]
