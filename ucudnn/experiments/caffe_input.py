"""A net's DummyData inputs drawn once, as gaussian as their fillers say: the input a
comparison with PyTorch gives both sides (Note [Inputs drawn once]).

Note [Inputs drawn once]
    Caffe's DummyData draws a non-constant filler again, on the CPU, at every forward pass
    (about 200 ms for AlexNet's 256x3x227x227 gaussian input), and fills a constant one once.
    ``ucudnn reproduce`` therefore makes its fillers constant (:func:`.caffe_run.fill_once`):
    every sample of the batch is then the same, and the activations are degenerate (a
    ``caffe train`` of such a net reaches a loss near 0 within 10 iterations). To give Caffe
    the input PyTorch gets, :func:`fill_inputs_once` replaces each DummyData layer by a
    Python layer (``FilledOnce`` of :mod:`.caffe_input_layer`, run in the ``caffe`` tool's
    embedded interpreter or in pycaffe) with
    the same tops, shapes and fillers that draws its blobs once, at its first reshape, and
    then does nothing: a forward pass costs two calls into Python (reshape and forward, a few
    microseconds), no copy. Gaussian values come from :func:`gaussian`, numpy's PCG64 seeded
    with :data:`SEED`, the same function the PyTorch worker draws its input with, so both
    sides see the same numbers. Fillers other than constant and gaussian are refused.
"""
from __future__ import annotations

import json
from typing import List, Sequence

#: the seed of every input drawn for a comparison, on both sides
SEED = 0
#: the Python layer that stands for a DummyData layer (python_param.module / .layer); the
#: module imports pycaffe, so nothing in the package imports it
MODULE, LAYER = __package__ + ".caffe_input_layer", "FilledOnce"


def gaussian(shape: Sequence[int], mean: float = 0.0, std: float = 1.0, seed: int = SEED):
    """float32 gaussian values of ``shape`` (numpy array), the same for the same seed."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(std)
            + np.float32(mean))


def _fillers(layer, where: str) -> List[dict]:
    p = layer.dummy_data_param
    n = len(layer.top)
    given = list(p.data_filler)
    if len(given) not in (0, 1, n):
        raise ValueError(f"{where}: {len(given)} data_filler for {n} tops (DummyData takes 0, 1 "
                         "or one per top)")
    out = []
    for f in given or [None]:
        if f is None or f.type == "constant":
            out.append({"type": "constant", "value": f.value if f is not None else 0.0})
        elif f.type == "gaussian":
            out.append({"type": "gaussian", "mean": f.mean, "std": f.std})
        else:
            raise ValueError(f"{where}: data_filler type {f.type!r}: an input drawn once is "
                             "constant or gaussian")
    return out * n if len(out) == 1 else out


def fill_inputs_once(net, source) -> None:
    """Replace every DummyData layer of ``net`` (a NetParameter) by a ``FilledOnce``
    layer with the same tops, shapes and fillers (Note [Inputs drawn once]); ValueError
    naming ``source`` and the layer for what it cannot draw."""
    for layer in net.layer:
        if layer.type != "DummyData":
            continue
        where = f"{source}: layer {layer.name!r}"
        p = layer.dummy_data_param
        n = len(layer.top)
        shapes = [list(s.dim) for s in p.shape]
        if len(shapes) not in (1, n):
            raise ValueError(f"{where}: {len(shapes)} shape for {n} tops (an input drawn once "
                             "takes dummy_data_param.shape, 1 or one per top)")
        spec = {"shapes": shapes * n if len(shapes) == 1 else shapes,
                "fillers": _fillers(layer, where), "seed": SEED}
        layer.ClearField("dummy_data_param")
        layer.type = "Python"
        layer.python_param.module = MODULE
        layer.python_param.layer = LAYER
        layer.python_param.param_str = json.dumps(spec, sort_keys=True)


def values(shape: Sequence[int], filler: dict, seed: int):
    """The values of one top (numpy float32)."""
    import numpy as np
    if filler["type"] == "constant":
        return np.full(tuple(shape), filler["value"], dtype=np.float32)
    return gaussian(shape, filler.get("mean", 0.0), filler.get("std", 1.0), seed)

