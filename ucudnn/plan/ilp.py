"""Network-wide workspace division as an integer linear program (a multiple-choice knapsack).

For each kernel k choose exactly one plan c from its desirable set D_k (binary x[k, c]):

    minimise    sum_k w_k sum_c t_k(c) x[k, c]
    subject to  sum_c x[k, c] = 1                  for every k
                sum_k w_k sum_c m_k(c) x[k, c] <= M_total

w_k (default 1) is how many instances share kernel k's plan, each with its own workspace
(Caffe runs a grouped layer's kernel once per group, each group on its own workspace slot).

Solved by CBC through PuLP's ``COIN_CMD`` (:func:`cbc_path`: Note [CBC]). The solution is
checked after the solve: optimal status, exactly one plan per kernel, the budget respected.

Note [CBC]
    PuLP 3 ships a CBC binary in its wheel; the ``pulp[cbc]`` extra adds the ``cbcbox`` wheel
    (191 MB download, 598 MB installed) with another build. Measured on this project's CI
    machine (2 cores; ``scripts/bench_ilp_solvers.py BINARY [--all]``, median of three
    solves), both give the same plans, and PuLP's own is not slower: powerOfTwo AlexNet
    0.019 / 0.011 s (cbcbox 0.066 / 0.069 s) at 8 / 64 MiB, ResNet-18 0.146 / 0.030 s
    (0.262 / 0.112 s); policy all ResNet-18 (2,745 variables) 0.649 / 0.265 s (0.434 /
    0.587 s). So ucudnn depends on ``pulp`` alone and uses cbcbox's CBC only where it is
    installed anyway, then a ``cbc`` on PATH, then PuLP's.

Note [PuLP versions]
    PuLP 3.3 deprecates constructing ``LpVariable`` directly and its bundled ``PULP_CBC_CMD``;
    PuLP 4.0 removes both, and ``LpStatus`` / ``prob.status`` with them (``solve`` returns an
    ``LpSolveStats``). This module uses only what both keep: ``prob.add_variable``,
    ``COIN_CMD(path=...)`` (:func:`cbc_path`), and the status that ``solve`` returns (an int in 3.x, an
    ``LpSolveStatus`` in 4.x, equal to 1 when optimal in both). The declared range stays below
    4.0 because that is what CI tests. PuLP 4.2 (Python >= 3.12) passes tests/plan/test_ilp.py and
    tests/plan/test_network.py (the brute-force twins included) with this module, but imports numpy
    without declaring it, and reports CBC's "Optimal (within gap tolerance)" as GapLimit: the
    solve asks for gapRel=0 and accepts that status as optimal.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Dict, Hashable, Mapping, Sequence

from .dp import Plan
from ..vocab import PlanError
from ..vocab import format_size

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


def cbc_path() -> str:
    """The CBC binary the ILP runs (Note [CBC]): cbcbox's where it is installed, else ``cbc``
    on PATH, else the one PuLP 3.x ships inside its package."""
    try:
        import cbcbox
        path = cbcbox.cbc_bin_path()
        if os.path.isfile(path):
            return path
    except (ImportError, OSError, RuntimeError):
        pass
    path = shutil.which("cbc")
    if path:
        return path
    try:
        from pulp.apis.coin_api import pulp_cbc_path        # PuLP 3.x only
    except ImportError:
        pulp_cbc_path = None
    if pulp_cbc_path and os.path.isfile(pulp_cbc_path):
        if not os.access(pulp_cbc_path, os.X_OK):
            raise IlpError(f"the CBC binary {pulp_cbc_path} that PuLP ships is not executable")
        return os.path.realpath(pulp_cbc_path)
    raise IlpError("the ILP optimizer needs the CBC solver: PuLP 3 ships one (pip install "
                   "'pulp>=3.3,<4'), or put a cbc binary on PATH")


def _solver(msg: bool = False, time_limit: float | None = None):
    import pulp
    # gapRel=0: an optimal plan, not one within the default relative gap (PuLP 4 reports
    # GapLimit otherwise)
    return pulp.COIN_CMD(path=cbc_path(), msg=msg, timeLimit=time_limit, gapRel=0)


def _status_name(status) -> str:
    """``Optimal``, ``Infeasible``, ... from what ``prob.solve`` returned (3.x or 4.x)."""
    status = getattr(status, "status", status)          # 4.x: LpSolveStats.status
    name = getattr(status, "name", None)                # 4.x: LpSolveStatus
    if name is None:
        import pulp
        name = pulp.LpStatus.get(status, str(status))   # 3.x: an int
    return str(name).replace("_", " ")


#: Largest number of plan combinations :func:`solve_workspace_division` enumerates instead of
#: calling CBC (``method="auto"``): a layer's two backward kernels (the shared arena's
#: problem, Note [Shared arena] in :mod:`ucudnn.plan.network`) have a few hundred.
ENUMERATE_MAX = 20000


def _enumerate(fronts: Mapping[Hashable, Sequence[Plan]], w: Mapping[Hashable, int],
               budget: int) -> IlpResult:
    """The same problem solved exactly by merging the fronts one kernel at a time, keeping
    only combinations that fit the budget and that no other combination beats in both time
    and workspace."""
    t0 = time.perf_counter()
    combos = [(0.0, 0, ())]                     # (time, workspace, choice per kernel so far)
    for k, front in fronts.items():
        grown = [(t + w[k] * p.time_ms, ws + w[k] * p.ws_bytes, chosen + (p,))
                 for t, ws, chosen in combos for p in front if ws + w[k] * p.ws_bytes <= budget]
        grown.sort(key=lambda c: (c[0], c[1]))
        combos, least = [], None
        for c in grown:                         # Pareto front over (time, workspace)
            if least is None or c[1] < least:
                combos.append(c)
                least = c[1]
    best = combos[0]                            # fastest; the budget check above made it fit
    choices = dict(zip(fronts, best[2]))
    return IlpResult(choices, budget, time.perf_counter() - t0, "Optimal", 0, dict(w))


def solve_workspace_division(fronts: Mapping[Hashable, Sequence[Plan]], budget: int, *,
                             weights: Mapping[Hashable, int] | None = None,
                             msg: bool = False, time_limit: float | None = None,
                             method: str = "auto") -> IlpResult:
    """Choose one plan per kernel from ``fronts`` minimising total time within ``budget`` bytes.

    ``weights[k]``: instances of kernel k (default 1), each with its own workspace.
    ``method``: ``cbc`` (the ILP), ``enumerate`` (exact, for small problems) or ``auto``
    (enumerate up to :data:`ENUMERATE_MAX` combinations, else CBC)."""
    if method not in ("auto", "cbc", "enumerate"):
        raise IlpError(f"method: {method!r} is not auto, cbc or enumerate")
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
    combinations = 1
    for f in fronts.values():
        combinations *= len(f)
    if method == "enumerate" or (method == "auto" and combinations <= ENUMERATE_MAX):
        return _enumerate(fronts, w, budget)
    try:
        import pulp
    except ImportError as e:  # pragma: no cover - pulp is a dependency
        raise IlpError("the ILP optimizer needs PuLP (pip install 'pulp[cbc]')") from e

    keys = list(fronts)
    prob = pulp.LpProblem("ucudnn_workspace_division", pulp.LpMinimize)
    x: Dict[tuple, pulp.LpVariable] = {}
    for i, k in enumerate(keys):
        for j, _ in enumerate(fronts[k]):
            x[i, j] = prob.add_variable(f"x_{i}_{j}", cat=pulp.LpBinary)
    # Work in microseconds and KiB-scaled bytes: CBC's tolerances are absolute.
    prob += pulp.lpSum(w[k] * fronts[k][j].time_ms * 1000.0 * x[i, j]
                       for i, k in enumerate(keys) for j in range(len(fronts[k])))
    for i, k in enumerate(keys):
        prob += pulp.lpSum(x[i, j] for j in range(len(fronts[k]))) == 1, f"one_plan_{i}"
    prob += pulp.lpSum(w[k] * fronts[k][j].ws_bytes / 1024.0 * x[i, j]
                       for i, k in enumerate(keys) for j in range(len(fronts[k]))
                       ) <= budget / 1024.0, "budget"
    t0 = time.perf_counter()
    status = _status_name(prob.solve(_solver(msg, time_limit)))
    seconds = time.perf_counter() - t0
    # With gapRel=0, CBC's "Optimal (within gap tolerance)" (PuLP 4: GapLimit) is optimal up to
    # its integrality tolerance; PuLP 3 reports the same line as Optimal.
    if status not in ("Optimal", "GapLimit"):
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
