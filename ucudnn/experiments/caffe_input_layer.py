"""The Python layer of Note [Inputs drawn once] (:mod:`.caffe_input`): ``FilledOnce`` draws
its tops once, at its first reshape, and then does nothing.

Caffe imports this module by the name in ``python_param.module`` and calls ``FilledOnce``
with the layer's LayerParameter. pycaffe is imported at the top: its import registers the
converters that this call and the layer's blobs need, so it must run before Caffe calls the
layer (inside the ``caffe`` tool nothing else imports pycaffe). Blobs are taken by index:
pycaffe's blob vectors convert an element on ``top[i]``, not when iterated. Nothing in the
package imports this module.
"""
import json

import caffe

from .caffe_input import SEED, values


class FilledOnce(caffe.Layer):
    def setup(self, bottom, top):
        if len(bottom):
            raise ValueError("FilledOnce takes no bottom")
        spec = json.loads(self.param_str)
        self.shapes, self.fillers = spec["shapes"], spec["fillers"]
        if len(self.shapes) != len(top) or len(self.fillers) != len(top):
            raise ValueError(f"FilledOnce: {len(top)} tops, {len(self.shapes)} shapes, "
                             f"{len(self.fillers)} fillers")
        self.seed, self.filled = spec.get("seed", SEED), False

    def reshape(self, bottom, top):
        if self.filled:             # Caffe reshapes before every forward pass: once is enough
            return
        for i in range(len(top)):
            top[i].reshape(*self.shapes[i])
            top[i].data[...] = values(self.shapes[i], self.fillers[i], self.seed + i)
        self.filled = True

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass
