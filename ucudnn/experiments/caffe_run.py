"""One Caffe process of a point: the variant prototxt, ``caffe time`` with plan records, and
what both say.

Caffe's timing is read from its log (:func:`ucudnn.caffe.log.parse_caffe_time`: Caffe's own
lines, which we do not control); what ucudnn planned from the plan records the core appends to
``$UCUDNN_RECORDS`` (:mod:`ucudnn.caffe.records`), set per process to a file next to its log.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..caffe.log import CaffeLogError, parse_caffe_time
from ..caffe.params import set_param
from ..caffe.proto import read_net, write_net
from ..caffe.records import ENV as RECORDS_ENV
from ..caffe.records import RecordError, read_records, summarize
from ..paths import PACKAGE
from .caffe_input import fill_inputs_once
from .gpu_memory import run_watched
from .grid import FUSIONS, STOCK_SETTINGS, Point, parse_net

#: The folder holding the ``ucudnn`` package: Caffe's embedded interpreter imports the same.
PACKAGE_ROOT = PACKAGE.parent


def variant_prototxt(pb2, source: Path, point: Point, dest: Path, cache_path: Optional[str],
                     ilp_policy: str, bn_engine_field: bool = False,
                     share_diffs: bool = False,
                     fusions: Optional[Sequence[str]] = None,
                     force_backward: bool = False,
                     input_fill: str = "constant") -> Dict[str, str]:
    """Write ``source`` with the point's net-wide ``ucudnn_param`` (its families of choices
    included) and BatchNorm engine to
    ``dest``; returns its layers' types by name, in the net's order. ``bn_engine_field``: the Caffe
    binary knows ``batch_norm_param.engine`` (caffe_patch/0009), so the engine is written on
    every BatchNorm layer even where it is BVLC's (Note [BatchNorm engines]). ``share_diffs``:
    the net's ``share_diffs: true`` (caffe_patch/0007, Note [Shared activation gradients] in
    Caffe's net.cpp), for every point alike; ``fusions``: the fusions to turn on in the net's
    ``fusion`` (``grid.FUSIONS``, caffe_patch/0010), every other one
    off; None leaves the net's field as it is. ``force_backward``: the net's
    ``force_backward: true`` (a deploy net's iterations then run the backward pass too). An
    im2col point's convolutions get ``engine: CAFFE`` (Note [im2col points] in grid.py). A
    ucudnn point's ``layout`` is its net's ``ucudnn_param.layout`` (Note [NHWC in Caffe] in
    caffe_patch/0011). ``input_fill`` "constant": the DummyData inputs made constant
    (:func:`fill_once`); "gaussian": drawn once as their fillers say
    (:func:`.caffe_input.fill_inputs_once`)."""
    net = read_net(pb2, str(source))
    if input_fill not in ("constant", "gaussian"):
        raise ValueError(f"input_fill {input_fill!r}: constant or gaussian")
    if input_fill == "constant":
        fill_once(net)
    batch = parse_net(point.net)[1]
    if batch is not None:
        set_batch(net, batch, source)
    if input_fill == "gaussian":
        fill_inputs_once(net, source)
    net.ClearField("ucudnn_param")
    if share_diffs:
        net.share_diffs = True
    if force_backward:
        net.force_backward = True
    if fusions is not None:
        for name in FUSIONS:
            setattr(net.fusion, name, name in fusions)
    for layer in net.layer:
        layer.ClearField("ucudnn_param")
    if point.bn != "caffe" and not bn_engine_field:
        raise ValueError(f"BatchNorm engine {point.bn!r} needs a Caffe with caffe_patch/0009")
    for layer in net.layer:
        if layer.type == "BatchNorm" and bn_engine_field:
            layer.batch_norm_param.engine = getattr(pb2.BatchNormParameter, point.bn.upper())
    if point.setting == "im2col":           # Note [im2col points] in grid.py
        for layer in net.layer:
            if layer.type == "Convolution":
                layer.convolution_param.engine = pb2.ConvolutionParameter.CAFFE
    elif point.setting not in STOCK_SETTINGS:
        if point.setting in ("ilp", "shared"):
            set_param(net.ucudnn_param, {"policy": ilp_policy, "optimizer": point.setting,
                                         "limit": point.limit})
        elif point.setting == "shared_stock":
            if point.limit is None:
                raise ValueError("shared_stock: no budget (stock Caffe's workspace not measured)")
            set_param(net.ucudnn_param, {"policy": ilp_policy, "optimizer": "shared",
                                         "budget": point.limit})
        else:
            set_param(net.ucudnn_param, {"policy": point.policy, "optimizer": "dp",
                                         "limit": point.limit})
        set_param(net.ucudnn_param, {"engines": point.engines})
        if point.layout != "NCHW":  # a Caffe without caffe_patch/0011 has no such field
            set_param(net.ucudnn_param, {"layout": point.layout})
        if cache_path:
            net.ucudnn_param.cache_path = cache_path
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_net(net, str(dest))
    return {layer.name: layer.type for layer in net.layer}


def set_batch(net, batch: int, source) -> None:
    """Set the batch of ``net``'s inputs (Note [Nets at another batch] in grid.py): the first
    dimension of every DummyData and Input shape and of the net's ``input_shape``s. A net
    whose input is another layer (Data, ImageData, Python ...) is refused, naming ``source``."""
    shapes = [s for layer in net.layer if layer.type == "DummyData"
              for s in layer.dummy_data_param.shape]
    shapes += [s for layer in net.layer if layer.type == "Input" for s in layer.input_param.shape]
    shapes += list(net.input_shape)
    if not shapes:
        raise ValueError(f"{source}: a batch can be set only for DummyData, Input or "
                         "input_shape inputs, and this net has none")
    for s in shapes:
        s.dim[0] = batch


def fill_once(net) -> None:
    """Make every DummyData filler constant. DummyData draws a non-constant filler again on
    the CPU at every forward pass (about 200 ms for AlexNet's 256x3x227x227 gaussian input,
    measured on the GPU host, four times its convolutions): with constant fillers it fills
    once and ``caffe time`` measures the network. Every sample of the batch is then the same
    (:func:`.caffe_input.fill_inputs_once` keeps them gaussian, drawn once)."""
    for layer in net.layer:
        if layer.type == "DummyData":
            for f in layer.dummy_data_param.data_filler:
                if f.type != "constant":
                    value = f.std if f.type == "gaussian" and f.std else 1.0
                    f.Clear()
                    f.type, f.value = "constant", value


def run_caffe_time(caffe: str, model: Path, iterations: int, gpu: int, log_path: Path,
                   timeout: float, env: Optional[Dict[str, str]] = None,
                   records_path: Optional[Path] = None, planned: bool = True,
                   memory_interval: float = 0.02, gpu_states: bool = False) -> dict:
    """Run ``caffe time``; a record with ``status`` ok or failed: Caffe's timing from its log
    (``log_path``), ucudnn's plans from the records at ``records_path`` (default: next to the
    log, ``NAME.records.jsonl``; emptied first). ``planned``: the net has ucudnn_param, so a
    run without kernel records failed. NVML samples the process every ``memory_interval``
    seconds; ``gpu_states``: they also log the GPU's state (``gpu_state``, Note [GPU state of
    a process] in nvml.py)."""
    records_path = records_path or log_path.with_suffix(".records.jsonl")
    cmd = [caffe, "time", "-model", str(model), "-iterations", str(iterations), "-gpu", str(gpu)]
    e = dict(os.environ)
    # Caffe's embedded interpreter imports the same ucudnn (and PuLP) as this process
    e["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in sys.path if p])
    e.update({"GLOG_logtostderr": "1", "UCUDNN_LOG": "INFO"})
    e.update(env or {})
    e[RECORDS_ENV] = str(records_path)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    if records_path.exists():
        records_path.unlink()            # a retried point's earlier process
    run = run_watched(cmd, timeout=timeout, env=e, log_path=log_path,  # Note [Measured memory]
                      interval=memory_interval, states=gpu_states)
    text = run.log_text()
    rc = None if run.timed_out else run.rc
    rec = {"command": " ".join(shlex.quote(c) for c in cmd), "wall_s": round(run.wall_s, 3),
           "log": log_path.name, "peak_gpu_memory_bytes": run.peak_gpu_memory_bytes}
    if run.nvml_error:
        rec["peak_gpu_memory_error"] = run.nvml_error
    if gpu_states:
        rec["gpu_state"] = run.gpu_state
    if records_path.exists():
        rec["records"] = records_path.name
    if rc != 0:
        why = "timed out after %.0f s" % timeout if rc is None else f"exit status {rc}"
        return dict(rec, status="failed", error=f"caffe time: {why}", log_tail=text[-3000:])
    try:
        t = parse_caffe_time(text)
        plans = plan_record(read_records(records_path))
    except (CaffeLogError, RecordError) as ex:
        return dict(rec, status="failed", error=str(ex), log_tail=text[-3000:])
    if planned and not plans["kernels"]:
        return dict(rec, status="failed", log_tail=text[-3000:],
                    error=f"no plan records in {records_path.name} (${RECORDS_ENV}): the core "
                    "did not write them")
    return dict(rec, status="ok", source="caffe time", **timing_record(t), **plans)


def timing_record(t) -> dict:
    """The JSON form of a :class:`~ucudnn.caffe.log.CaffeTime`."""
    return {
        "iterations": t.iterations, "iteration_ms": t.iteration_ms,
        "whole_iteration_ms": t.whole_iteration_ms, "timing": t.timing,
        "median_ms": t.median_ms, "per_layer_median_ms": t.per_layer_median_ms,
        "mean_ms": t.forward_backward_ms,
        "forward_ms": t.forward_ms, "backward_ms": t.backward_ms,
        # a list: the layers' order (the JSON is written with sorted keys)
        "layers": [dict(name=n, **v) for n, v in t.layers.items()],
    }


def plan_record(records: List[dict]) -> dict:
    """What a point keeps of its process's plan records (Note [Results schema])."""
    s = summarize(records)
    kernels = {k: dataclasses.asdict(v) for k, v in s.kernels.items()}
    return {
        "kernels": kernels, "predicted_conv_ms": s.predicted_conv_ms(),
        "workspace_bytes": s.workspace_bytes(), "bench_s": s.bench_s, "plan_s": s.plan_s,
        "sizes_benchmarked": sum(k.sizes_benchmarked or 0 for k in s.kernels.values()),
        "sizes_cached": sum(k.sizes_cached or 0 for k in s.kernels.values()),
        "ilp_solve_s": s.ilp_solve_s, "ilp_budget_bytes": s.ilp_budget_bytes,
        "replans": s.replans,
    }
