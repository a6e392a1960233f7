"""Network-wide workspace division as an integer linear program (a multiple-choice knapsack).

For each kernel k choose exactly one plan c from its desirable set D_k (binary x[k, c]):

    minimise    sum_k w_k sum_c t_k(c) x[k, c]
    subject to  sum_c x[k, c] = 1                  for every k
                sum_k w_k sum_c m_k(c) x[k, c] <= M_total

w_k (default 1) is how many instances share kernel k's plan, each with its own workspace
(Caffe runs a grouped layer's kernel once per group, each group on its own workspace slot).

Solved with PuLP's bundled CBC solver (``PULP_CBC_CMD``). The solution is checked after the
solve: optimal status, exactly one plan per kernel, the budget respected.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, Hashable, List, Mapping, Sequence

from .dp import Plan, PlanError
from .units import format_size

__all__ = ["IlpResult", "solve_workspace_division", "IlpError"]


class IlpError(PlanError):
    """The ILP cannot be solved as asked (budget too small, solver failure, ...)."""


@dataclass
class IlpResult:
    choices: Dict[Hashable, Plan]
    budget: int
    solve_seconds: float
    status: str
    n_variables: int = 0
    weights: Dict[Hashable, int] = field(default_factory=dict)

    @property
    def total_time_ms(self) -> float:
        return sum(self.weights.get(k, 1) * p.time_ms for k, p in self.choices.items())

    @property
    def total_ws_bytes(self) -> int:
        return sum(self.weights.get(k, 1) * p.ws_bytes for k, p in self.choices.items())


def _solver(msg: bool = False, time_limit: float | None = None):
    import pulp
    return pulp.PULP_CBC_CMD(msg=msg, timeLimit=time_limit)


def solve_workspace_division(fronts: Mapping[Hashable, Sequence[Plan]], budget: int, *,
                             weights: Mapping[Hashable, int] | None = None,
                             msg: bool = False, time_limit: float | None = None) -> IlpResult:
    """Choose one plan per kernel from ``fronts`` minimising total time within ``budget`` bytes.

    ``weights[k]``: instances of kernel k (default 1), each with its own workspace."""
    if budget < 0:
        raise IlpError(f"workspace_budget: must not be negative, got {budget}")
    w = {k: 1 for k in fronts}
    for k, v in (weights or {}).items():
        if k not in fronts:
            raise IlpError(f"weights: {k!r} is not a kernel of the problem")
        if not isinstance(v, int) or v < 1:
            raise IlpError(f"kernel {k}: weight must be a positive integer, got {v!r}")
        w[k] = v
    empty = [k for k, f in fronts.items() if not f]
    if empty:
        raise IlpError(f"kernel {empty[0]}: empty desirable set")
    if not fronts:
        return IlpResult({}, budget, 0.0, "Optimal")
    need = sum(w[k] * min(p.ws_bytes for p in f) for k, f in fronts.items())
    if need > budget:
        raise IlpError(f"workspace_budget: {format_size(budget)} ({budget} B) is below the "
                       f"smallest total workspace of any plan, {format_size(need)} ({need} B)")
    try:
        import pulp
    except ImportError as e:  # pragma: no cover - pulp is a dependency
        raise IlpError("the ILP optimizer needs PuLP (pip install 'pulp>=3,<4')") from e

    keys = list(fronts)
    prob = pulp.LpProblem("ucudnn_workspace_division", pulp.LpMinimize)
    x: Dict[tuple, pulp.LpVariable] = {}
    for i, k in enumerate(keys):
        for j, _ in enumerate(fronts[k]):
            x[i, j] = pulp.LpVariable(f"x_{i}_{j}", cat=pulp.LpBinary)
    # Work in microseconds and KiB-scaled bytes: CBC's tolerances are absolute.
    prob += pulp.lpSum(w[k] * fronts[k][j].time_ms * 1000.0 * x[i, j]
                       for i, k in enumerate(keys) for j in range(len(fronts[k])))
    for i, k in enumerate(keys):
        prob += pulp.lpSum(x[i, j] for j in range(len(fronts[k]))) == 1, f"one_plan_{i}"
    prob += pulp.lpSum(w[k] * fronts[k][j].ws_bytes / 1024.0 * x[i, j]
                       for i, k in enumerate(keys) for j in range(len(fronts[k]))
                       ) <= budget / 1024.0, "budget"
    t0 = time.perf_counter()
    prob.solve(_solver(msg, time_limit))
    seconds = time.perf_counter() - t0
    status = pulp.LpStatus[prob.status]
    if status != "Optimal":
        raise IlpError(f"ILP solver (CBC) finished with status {status!r}")

    choices: Dict[Hashable, Plan] = {}
    for i, k in enumerate(keys):
        chosen = [j for j in range(len(fronts[k])) if (x[i, j].value() or 0) > 0.5]
        if len(chosen) != 1:
            raise IlpError(f"kernel {k}: the solver chose {len(chosen)} plans, expected exactly 1")
        choices[k] = fronts[k][chosen[0]]
    result = IlpResult(choices, budget, seconds, status, len(x), w)
    if result.total_ws_bytes > budget:
        raise IlpError(f"ILP solution needs {result.total_ws_bytes} B, over the budget {budget} B")
    return result
