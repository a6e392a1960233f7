"""``ucudnn.torch.plan(model, example_inputs)``: a model's convolution kernels with their plans,
predicted times and workspaces, as ``ucudnn plan`` prints them for a prototxt.

The convolutions are found by running the model once on fake tensors (``FakeTensorMode``:
shapes only, nothing computed, whatever the model's device; its parameters and buffers are
replaced by fakes for the call, so that the model is left as it was) with a forward hook on every
convolution module, PyTorch's or converted. Each 2-D or 3-D call becomes a
:class:`~ucudnn.plan.layers.LayerSpec` (a module called twice: two layers, the second named
``name#2``), its benchmark data comes from where ``ucudnn plan`` gets it
(:func:`ucudnn.measure.sources.gather_net`: the cache, this GPU, the shipped data) and the one
network planner plans it (:func:`ucudnn.plan.network.plan_network`); the document and the text
are the CLI's (:func:`ucudnn.cli.plan.plan_json`, :func:`ucudnn.cli.plan.print_plan`).

A training step's kernels are listed: forward, backward-filter, and backward-data where the
convolution's input needs a gradient. A transposed convolution is the backward-data of the
convolution from its output to its input (Note [PyTorch convolutions in the core] in
:mod:`.geometry`), so its layer is that convolution's, and its forward is the layer's
``bwd_data``. A grouped convolution is planned as Caffe runs it (one group's kernel, called
once per group); ucudnn.torch runs it as one grouped cuDNN call, planned when it first runs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from torch import nn

from ..cli.plan import plan_json, print_plan, strict_json
from ..measure.sources import gather_net
from ..plan.layers import LayerSpec
from ..plan.network import NetworkPlan, plan_network
from .convert import settings_from, why_kept
from .geometry import DTYPE_NAMES, layer_spec
from .netwide import model_calls
from .runtime import torch_deterministic, torch_tf32

__all__ = ["plan", "PlanReport"]

@dataclass
class PlanReport:
    """``doc``: the JSON document of Note [plan --json] in ucudnn/cli/plan.py, with
    ``kept_by_pytorch`` [{layer, module, reason}] added; ``plan``: the network plan (None where
    nothing is planned); ``layers``: the layers planned; ``kept``: the convolutions not
    planned, with the reason."""
    doc: dict
    plan: Optional[NetworkPlan]
    layers: List[LayerSpec] = field(default_factory=list)
    kept: List[Tuple[str, str, str]] = field(default_factory=list)

    def json(self) -> str:
        return strict_json(self.doc)

    def print(self) -> None:
        """Print the plan as ``ucudnn plan`` does, then what stays PyTorch's."""
        if self.plan is not None:
            print_plan(self.doc, self.plan)
        else:
            print(f"network {self.doc['network']}: no convolution to plan")
        for name, kind, why in self.kept:
            print(f"stays PyTorch's: {name} ({kind}): {why}")


def plan(model: nn.Module, example_inputs, *, limit=None, policy=None, optimizer=None,
         engines=None, math=None, sizes=None, cache=None, budget=None,
         name: Optional[str] = None, show: bool = False, deterministic=None) -> PlanReport:
    """Plan ``model``'s convolutions for ``example_inputs`` (a tensor or a tuple of the
    forward's arguments) with the settings ``ucudnn plan`` takes (as for
    :func:`ucudnn.torch.convert`: ``ilp`` and ``shared`` plan the whole net's kernels
    together, here with grouped convolutions as Caffe runs them). ``show``: print it too.
    ``deterministic``: as for :func:`ucudnn.torch.convert`; None (the default) follows
    PyTorch's deterministic flags now (Note [Deterministic calls] in :mod:`.runtime`), and
    ``math`` None its TF32 flag for fp32 layers (Note [TF32 calls])."""
    inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if deterministic is None and torch_deterministic():
        deterministic = True
    base = settings_from(limit, policy, optimizer, engines, math, sizes, cache, budget,
                         deterministic)

    def fma_now(dtype):
        """math "fma" for an fp32 layer while PyTorch's TF32 is off, unless ``math`` is
        given (Note [TF32 calls] in :mod:`.runtime`)."""
        return {"math": "fma"} if (math is None and DTYPE_NAMES[dtype] == "float32"
                                   and not torch_tf32()) else {}
    label = name or type(model).__name__
    layers, settings, kept, seen = [], {}, [], {}
    for call_name, module, x, y in model_calls(model, inputs):
        seen[call_name] = seen.get(call_name, 0) + 1
        layer_name = call_name if seen[call_name] == 1 else f"{call_name}#{seen[call_name]}"
        why = why_kept(module)
        kind = type(module).__name__
        if why is not None and why != "already converted":     # converted: it runs
            kept.append((layer_name, kind, why))
            continue
        layers.append(layer_spec(layer_name, module, x, y))
        settings[layer_name] = base.replace(dtype=DTYPE_NAMES[x.dtype], **fma_now(x.dtype))
    kept_doc = [{"layer": n, "module": k, "reason": r} for n, k, r in kept]
    if not layers:
        doc = {"network": label, "kernels": [], "kept_by_pytorch": kept_doc,
               "notes": ["no convolution to plan"]}
        report = PlanReport(doc, None, [], kept)
    else:
        got = gather_net(layers, settings, cache_path=base.cache_path)
        t0 = time.perf_counter()
        net = plan_network(layers, got.benches, settings)
        solve_s = time.perf_counter() - t0
        net.notes[:0] = got.notes
        doc = plan_json(net, label, got.source, layers, solve_s,
                        list(base.sizes) if base.sizes else None)
        doc["kept_by_pytorch"] = kept_doc
        report = PlanReport(doc, net, layers, kept)
    if show:
        report.print()
    return report
