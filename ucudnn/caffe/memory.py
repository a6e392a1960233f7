"""What a Caffe net holds on the GPU while it trains, part by part, from its prototxt alone
(Note [Caffe's memory]): where Caffe's peak memory goes, to set beside PyTorch's.

Note [Caffe's memory]
    Caffe allocates a blob's memory when it is first used and keeps it for the net's life, so
    after one forward and backward a net holds:

    - ``data``: every blob's values, once per blob name (an in-place layer writes its bottom);
    - ``diffs``: the gradient of every blob that needs one (Caffe's backward needs), the same
      size;
    - ``split_diffs``: Caffe inserts a Split layer where one version of a blob feeds more than
      one layer (Net::Init, InsertSplits); its tops share the blob's values but each holds its
      own gradient, summed in the Split's backward;
    - ``bn_saved``: caffe_patch/0009's BatchNorm in place keeps its input for the backward in
      one more buffer of the blob's size (Note [In-place BatchNorm without a copy]);
    - ``pool_masks``: MAX pooling's argmax per output value;
    - ``params``: the weights and biases, values and gradients;
    - the workspace (ucudnn's plan records give it) and the process's CUDA context and
      libraries, which the prototxt does not say.

    All 4 bytes an element (float). On the H200 these parts come to 11.12 of ResNet-18's 13.46
    GiB at batch 256 and 26.32 of ResNet-50 v1's 30.11 GiB at batch 128 (NVML peaks of `caffe
    time`, shared arena 64 MiB, FUSED BatchNorm: results/h200/pytorch-best/); the arena adds
    0.96 and 1.16 GiB, and 1.38 and 2.63 GiB are the CUDA context, the libraries' handles and
    what this count leaves out.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Dict, List, Optional, Tuple

from .proto import as_bvlc
from .shapes import NetShapes, phase_layers

#: bytes per element of Caffe's float nets
ELEM = 4


@dataclasses.dataclass(frozen=True)
class NetMemory:
    """Bytes of each part of Note [Caffe's memory]; ``blobs`` the data bytes per blob."""
    data: int
    diffs: int
    split_diffs: int
    bn_saved: int
    pool_masks: int
    params: int
    blobs: Dict[str, int]

    @property
    def total(self) -> int:
        return (self.data + self.diffs + self.split_diffs + self.bn_saved + self.pool_masks
                + self.params)

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in ("data", "diffs", "split_diffs", "bn_saved",
                                               "pool_masks", "params", "total")}


class _Walk:
    """One pass over ``net``'s layers in ``phase``: every blob's shape, and which layers read
    each version of a blob (an in-place layer writes a new version of its bottom)."""

    def __init__(self, net, source: str, batch: Optional[int], phase: str):
        self.shapes = NetShapes(net, phase, batch=batch, source=source, need_convs=False).run()
        self.layers = [as_bvlc(layer) for layer, _, _ in phase_layers(net, phase, source)]
        version: Counter = Counter()
        #: (blob, version) -> forward steps reading it; -> the forward step that made it
        self.readers: Dict[Tuple[str, int], List[int]] = {}
        self.made_at: Dict[Tuple[str, int], int] = {}
        #: blob -> forward steps that write it (its maker and in-place layers), in order
        self.writers: Dict[str, List[int]] = {}
        for i, layer in enumerate(self.layers):
            for b in layer.bottom:
                self.readers.setdefault((b, version[b]), []).append(i)
            for t in layer.top:
                if t in self.writers:
                    version[t] += 1
                self.made_at[t, version[t]] = i
                self.writers.setdefault(t, []).append(i)

    def size(self, blob: str) -> int:
        """Bytes of ``blob`` (0 where the prototxt does not settle its shape)."""
        s = self.shapes.shapes.get(blob)
        return 0 if s is None else ELEM * math.prod(s)

    def has_diff(self, blob: str) -> bool:
        return bool(self.shapes.need_backward.get(blob))


def net_memory(net, source: str = "<prototxt>", *, batch: Optional[int] = None,
               phase: str = "TRAIN") -> NetMemory:
    """Note [Caffe's memory] of ``net`` (a NetParameter) in ``phase``; ``batch`` replaces its
    inputs' first axis. A blob whose shape the prototxt does not settle counts 0."""
    w = _Walk(net, source, batch, phase)
    bn_saved = pool_masks = params = 0
    for layer in w.layers:
        if layer.type == "BatchNorm" and list(layer.top) == list(layer.bottom):
            bn_saved += w.size(layer.top[0])
        if layer.type == "Pooling" and layer.pooling_param.pool == layer.pooling_param.MAX:
            pool_masks += sum(w.size(t) for t in layer.top)
        params += 2 * ELEM * _param_count(layer, w.shapes.shapes)
    blobs = {b: w.size(b) for b in w.writers}
    diffs = sum(w.size(b) for b in w.writers if w.has_diff(b))
    split_diffs = sum(w.size(b) * len(steps) for (b, _), steps in w.readers.items()
                      if len(steps) > 1 and w.has_diff(b))
    return NetMemory(sum(blobs.values()), diffs, split_diffs, bn_saved, pool_masks, params,
                     blobs)


def live_diffs_peak(net, source: str = "<prototxt>", *, batch: Optional[int] = None,
                    phase: str = "TRAIN") -> int:
    """The most gradient bytes (``diffs`` and ``split_diffs`` of :func:`net_memory`) that
    are ever needed at once in one backward pass: a gradient lives from the first backward
    step that writes it to the last that reads it (Note [Gradients that could share]).

    Note [Gradients that could share]
        Caffe keeps every blob's gradient for the net's life. In the backward pass a blob's
        gradient is first written by the backward of the last layer that reads the blob (or
        the Split Caffe inserts for several readers) and last read by the backward of the
        layer that made it; in-place layers keep it alive between. Gradients whose lives do
        not overlap could share memory; this is the least memory that would take (the
        largest sum of gradients alive at one step; an allocator that places them packs to
        about that). Not what Caffe does today: what sharing could save."""
    w = _Walk(net, source, batch, phase)

    def size(blob) -> int:
        return w.size(blob) if w.has_diff(blob) else 0

    touched = {b: list(steps) for b, steps in w.writers.items()}
    lives = []                                  # (first step, last step, bytes), forward order
    for (b, v), steps in w.readers.items():
        if len(steps) > 1:                      # a Split right after the version's maker
            at = w.made_at.get((b, v), -1) + 0.5
            lives += [(at, step, size(b)) for step in steps]
            touched[b].append(at)
        else:
            touched.setdefault(b, []).append(steps[0])
    lives += [(min(steps), max(steps), size(b)) for b, steps in touched.items()]
    events = sorted({t for first, last, _ in lives for t in (first, last)})
    return max((sum(n for first, last, n in lives if first <= t <= last) for t in events),
               default=0)


def _param_count(layer, shapes) -> int:
    """Weights and biases of a Convolution, InnerProduct, Scale or BatchNorm layer."""
    bottom = shapes.get(layer.bottom[0]) if layer.bottom else None
    if not bottom:
        return 0
    if layer.type == "Convolution":
        p = layer.convolution_param
        k = list(p.kernel_size) or [p.kernel_h, p.kernel_w]
        kh, kw = k[0], k[-1]
        return p.num_output * (bottom[1] // max(1, p.group)) * kh * kw + \
            (p.num_output if p.bias_term else 0)
    if layer.type == "InnerProduct":
        p = layer.inner_product_param
        return p.num_output * math.prod(bottom[1:]) + (p.num_output if p.bias_term else 0)
    if layer.type == "Scale":
        return bottom[1] * (2 if layer.scale_param.bias_term else 1)
    if layer.type == "BatchNorm":
        return 2 * bottom[1] + 1
    return 0
