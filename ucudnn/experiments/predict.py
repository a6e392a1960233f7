"""Predicted mode of ``ucudnn reproduce`` (no GPU, or no Caffe): every point planned from the
shipped H200 benchmark data; the numbers are the planner's predicted convolution times, not
measurements."""
from __future__ import annotations

import time
from importlib import resources

from ..measure.records import plan_fields
from .grid import Point


def predict_point(point: Point, ilp_policy: str) -> dict:
    """Plan ``point`` from the shipped H200 data (no GPU): predicted convolution times."""
    from ..plan.network import plan_network, read_layers
    from ..plan.table import group_by_kernel, parse_table
    base = resources.files("ucudnn") / "data" / "h200"
    bench = base / f"{point.net}_bench.csv"
    if point.setting == "caffe":
        return {"status": "skipped", "error": "stock Caffe has no ucudnn plan to predict"}
    if point.setting == "shared_stock":
        return {"status": "skipped", "error": "its budget is stock Caffe's measured workspace "
                "(Note [Shared arena at stock memory]): a GPU run measures it"}
    if not bench.is_file():
        return {"status": "skipped",
                "error": f"no shipped benchmark data for {point.net} (ucudnn/data/h200)"}
    with resources.as_file(base / f"{point.net}_layers.csv") as p:
        layers = read_layers(p)
    benches = group_by_kernel(parse_table(bench.read_text(encoding="utf-8"), source=str(bench)))
    t0 = time.perf_counter()
    if point.setting in ("ilp", "shared"):
        plan = plan_network(layers, benches, policy=ilp_policy, limit=point.limit,
                            optimizer=point.setting, strict=False)
    else:
        plan = plan_network(layers, benches, policy=point.policy, limit=point.limit,
                            optimizer="dp", strict=False)
    solve = time.perf_counter() - t0
    kernels = {k.name: {"layer": k.layer, "op": k.op, "plan": k.plan.describe(),
                        "chunks": plan_fields(k.op, k.plan),
                        "predicted_ms": k.plan.time_ms, "ws_bytes": k.plan.ws_bytes}
               for k in plan.kernels}
    return {"status": "predicted", "source": "predicted from ucudnn/data/h200 (no GPU run)",
            "predicted_conv_ms": plan.time_ms, "workspace_bytes": plan.held_bytes,
            "kernels": kernels, "plan_s": solve, "notes": plan.notes,
            "ilp_budget_bytes": plan.budget if point.setting in ("ilp", "shared") else None}
