"""Predicted mode of ``ucudnn reproduce`` (no GPU, or no Caffe): every point planned from the
shipped H200 benchmark data; the numbers are the planner's predicted convolution times, not
measurements."""
from __future__ import annotations

import time

from ..measure import shipped
from ..measure.records import plan_fields
from ..plan.network import plan_network
from ..plan.settings import PlanSettings
from .grid import Point

#: What tables and figures drawn from predicted points say about their numbers.
PREDICTED = (f"predicted from the shipped H200 benchmark data (ucudnn/data/{shipped.DATA}), "
             "not measured")


def predict_point(point: Point, ilp_policy: str) -> dict:
    """Plan ``point`` from the shipped H200 data (no GPU): predicted convolution times; each
    kernel's ``instances`` (groups) times its ``predicted_ms`` sums to ``predicted_conv_ms``."""
    if point.setting == "caffe":
        return {"status": "skipped", "error": "stock Caffe has no ucudnn plan to predict"}
    if point.setting == "shared_stock":
        return {"status": "skipped", "error": "its budget is stock Caffe's measured workspace "
                "(Note [Shared arena at stock memory]): a GPU run measures it"}
    if point.engines != "legacy":
        return {"status": "skipped", "error": f"engines {point.engines}: the shipped H200 data "
                "holds cuDNN's legacy algorithms only (Note [Predictions from legacy "
                "measurements]): a GPU run measures the graph family"}
    if point.net not in shipped.nets():
        return {"status": "skipped",
                "error": f"no shipped benchmark data for {point.net} (ucudnn/data/"
                         f"{shipped.DATA}: {', '.join(shipped.nets())})"}
    layers = shipped.layers(point.net)
    benches, missing = shipped.lookup(layers)
    if missing:
        (name, op), why = next(iter(missing.items()))
        return {"status": "skipped", "error": f"layer {name} {op}: {why}"}
    netwide = point.setting in ("ilp", "shared")
    settings = PlanSettings(policy=ilp_policy if netwide else point.policy,
                            optimizer=point.setting if netwide else "dp", limit=point.limit)
    t0 = time.perf_counter()
    plan = plan_network(layers, benches, settings, strict=False)
    solve = time.perf_counter() - t0
    kernels = {k.name: {"layer": k.layer, "op": k.op, "instances": k.groups,
                        "plan": k.plan.describe(),
                        "chunks": plan_fields(k.op, k.plan),
                        "predicted_ms": k.plan.time_ms, "ws_bytes": k.plan.ws_bytes}
               for k in plan.kernels}
    return {"status": "predicted", "source": "predicted from ucudnn/data/h200 (no GPU run)",
            "predicted_conv_ms": plan.time_ms, "workspace_bytes": plan.held_bytes,
            "kernels": kernels, "plan_s": solve, "notes": plan.notes,
            "ilp_budget_bytes": plan.budget if netwide else None}
