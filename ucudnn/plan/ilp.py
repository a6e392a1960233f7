"""Network-wide workspace division as an integer linear program (a multiple-choice knapsack).

For each kernel k choose exactly one plan c from its desirable set D_k (binary x[k, c]):

    minimise    sum_k w_k sum_c t_k(c) x[k, c]
    subject to  sum_c x[k, c] = 1                  for every k
                sum_k w_k sum_c m_k(c) x[k, c] <= M_total

w_k (default 1) is how many instances share kernel k's plan, each with its own workspace
(Caffe runs a grouped layer's kernel once per group, each group on its own workspace slot).

Solved by CBC through PuLP's ``COIN_CMD`` (:func:`cbc_path`: Note [CBC]) within a time limit
(Note [ILP time limit]). The solution is checked after the solve: exactly one plan per kernel,
the budget respected; a plan CBC did not prove optimal says so.

Note [CBC]). The solution is
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
    ``LpSolveStatus`` in 4.x, equal to 1 when optimal in both) with, past a time limit,
    ``prob.sol_status`` (3.x) or ``has_solution`` (4.x) (:func:`_outcome`). The declared
    range stays below 4.0 because that is what CI tests. PuLP 4.2 (Python >= 3.12) passes
    tests/plan/test_ilp.py, tests/plan/test_network.py (the brute-force twins included) and
    tests/cli/test_plan_ilp_time.py (with a cbc on PATH) with this module, but imports numpy
    without declaring it, and reports CBC's "Optimal (within gap tolerance)" as GapLimit: the
    solve asks for gapRel=0 and accepts that status as optimal.

Note [ILP time limit]
    CBC finds a good plan fast but may take hours to prove it optimal: on a net the size of
    DenseNet-121 (120 convolutions, a dozen plans per kernel) branch and bound closes the last
    millionths of the gap slowly. So the solve stops after ``time_limit`` seconds
    (:data:`DEFAULT_TIME_LIMIT`, 60 s; None: no limit; ``ucudnn plan --ilp-time-limit``) and
    then takes
    * CBC's best plan so far where it has one, checked like an optimal one (one plan per
      kernel, the budget respected): status ``TimeLimit``;
    * else the equal-share plan (:func:`equal_share`), the DP's rule at the same total memory:
      each kernel's fastest plan within its smallest plan's workspace plus an equal share per
      call of the budget left (where every kernel has a zero-workspace plan, budget / calls
      per call, the DP's limit): status ``TimeLimitNoSolution``.
    Either way :attr:`IlpResult.proven` is False and :attr:`IlpResult.note` is one line saying
    which plan it is, with its gap to CBC's bound where CBC reported one.
    While CBC runs, ``progress`` hears a line as it starts and every :data:`PROGRESS_EVERY`
    seconds: CBC's best plan and bound so far, read off its log (CBC writes the log in blocks,
    so a line may be a few seconds behind the search).
    PuLP 3.x returns Optimal for CBC's "Stopped on time" with a solution and tells the two apart
    by ``prob.sol_status`` (2: integer feasible); 4.x returns ``TimeLimit`` and
    ``has_solution`` (:func:`_outcome`).
    PuLP writes the problem (``.mps``) and CBC its solution (``.sol``) in ``solver.tmpDir``, the
    temp folder by default, and leaves them there when CBC fails or the solve is interrupted.
    So each solve gives them, and CBC's log, a folder of its own that is removed whatever
    happens (success, time limit, failure, KeyboardInterrupt). An interrupted solve also kills
    the CBC that PuLP started (:func:`_stop_cbc`): it would run on to its time limit. SIGTERM
    would end the process at once, past every ``finally``; while a solve runs in the main
    thread of a process that keeps SIGTERM's default action, SIGTERM unwinds the solve as
    SIGINT does (:func:`_sigterm_unwinds`), and once the folder is gone and CBC killed the
    process ends by SIGTERM as it would have.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Hashable, Mapping, Optional, Sequence

from .dp import Plan
from ..vocab import PlanError
from ..vocab import format_size

__all__ = ["IlpResult", "solve_workspace_division", "IlpError", "equal_share",
           "DEFAULT_TIME_LIMIT"]

#: Seconds CBC may search unless the caller says otherwise (Note [ILP time limit]).
DEFAULT_TIME_LIMIT = 60.0
#: Seconds between progress lines while CBC runs (Note [ILP time limit]).
PROGRESS_EVERY = 5.0
#: The statuses of a plan known to be optimal: enumerated, or proved by CBC (GapLimit: PuLP
#: 4.x's name for CBC's "Optimal (within gap tolerance)", Note [PuLP versions]).
PROVEN = ("Optimal", "GapLimit")
#: CBC's objective is in microseconds (its tolerances are absolute).
_US_PER_MS = 1000.0


class IlpError(PlanError):
    """The ILP cannot be solved as asked (budget too small, solver failure, ...)."""


@dataclass
class IlpResult:
    """One plan per kernel (``choices``) within ``budget``. ``status``: ``Optimal`` or
    ``GapLimit`` (proved), ``TimeLimit`` or ``TimeLimitNoSolution`` (Note [ILP time limit]);
    ``note``: one line about a plan not proved optimal; ``gap``: its relative gap to CBC's
    bound where known."""
    choices: Dict[Hashable, Plan]
    budget: int
    solve_seconds: float
    status: str
    n_variables: int = 0
    weights: Dict[Hashable, int] = field(default_factory=dict)
    note: Optional[str] = None
    gap: Optional[float] = None

    @property
    def proven(self) -> bool:
        """The plan is optimal: enumerated, or proved by CBC."""
        return self.status in PROVEN

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


def _solver(folder: str, msg: bool = False, time_limit: Optional[float] = None):
    """CBC through PuLP, its files in ``folder`` (Note [ILP time limit]): the log there too
    unless ``msg`` (CBC's output on stdout)."""
    import pulp
    # gapRel=0: an optimal plan, not one within the default relative gap (PuLP 4 reports
    # GapLimit otherwise)
    solver = pulp.COIN_CMD(path=cbc_path(), msg=msg, timeLimit=time_limit, gapRel=0,
                           logPath=None if msg else os.path.join(folder, "cbc.log"))
    solver.tmpDir = folder
    return solver


def _status_name(status) -> str:
    """``Optimal``, ``Infeasible``, ... from what ``prob.solve`` returned (3.x or 4.x)."""
    status = getattr(status, "status", status)          # 4.x: LpSolveStats.status
    name = getattr(status, "name", None)                # 4.x: LpSolveStatus
    if name is None:
        import pulp
        name = pulp.LpStatus.get(status, str(status))   # 3.x: an int
    return str(name).replace("_", " ")


def _outcome(returned, prob) -> tuple:
    """(status, has_solution) of a CBC solve (Note [ILP time limit], Note [PuLP versions]):
    ``Optimal``/``GapLimit`` with a proved plan, ``TimeLimit`` with or without a solution,
    else PuLP's status name."""
    has_solution = getattr(returned, "has_solution", None)         # 4.x: LpSolveStats
    if has_solution is not None:
        return _status_name(returned), bool(has_solution)
    sol_status = getattr(prob, "sol_status", None)                 # 3.x: an int pair
    if returned == 1:
        # 1: optimal solution; 2: integer feasible, CBC stopped (on time) with a solution
        return ("Optimal", True) if sol_status == 1 else ("TimeLimit", sol_status == 2)
    if returned == 0:                                               # "Stopped", no solution
        return "TimeLimit", False
    return _status_name(returned), False


#: CBC's log lines with its best solution and bound so far, and its final summary.
_LOG_NODES = re.compile(r"Cbc0010I After \d+ nodes, \d+ on tree, (\S+) best solution, "
                        r"best possible (\S+)")
_LOG_FOUND = re.compile(r"Cbc00(?:04|12)I Integer solution of (\S+) found")
_LOG_OBJECTIVE = re.compile(r"^Objective value:\s+(\S+)")
_LOG_BOUND = re.compile(r"^Lower bound:\s+(\S+)")
#: CBC's objective for "no solution yet".
_NO_SOLUTION = 1e49


def _number(text: str, otherwise: Optional[float]) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return otherwise


class _CbcLog:
    """CBC's best plan and bound so far (objective units), read off its log as it grows."""

    def __init__(self, path: Optional[str]):
        self.path = path
        self.offset = 0
        self.pending = ""
        self.best: Optional[float] = None
        self.bound: Optional[float] = None

    def read(self) -> "_CbcLog":
        if self.path is None:
            return self
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except OSError:
            return self
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        for line in lines:
            m = _LOG_NODES.search(line)
            if m:
                self._found(m.group(1))
                self.bound = _number(m.group(2), self.bound)
                continue
            m = _LOG_FOUND.search(line) or _LOG_OBJECTIVE.search(line)
            if m:
                self._found(m.group(1))
                continue
            m = _LOG_BOUND.search(line)
            if m:
                self.bound = _number(m.group(1), self.bound)
        return self

    def _found(self, text: str) -> None:
        value = _number(text, None)
        if value is not None and value < _NO_SOLUTION:
            self.best = value

    @property
    def gap(self) -> Optional[float]:
        """Relative gap of the best plan to the bound."""
        if self.best is None or self.bound is None or self.best <= 0:
            return None
        return max(0.0, (self.best - self.bound) / self.best)


def _percent(gap: float) -> str:
    """``gap`` in percent, two significant digits, never in exponent notation."""
    p = gap * 100
    if p <= 0:
        return "0%"
    return f"{p:.{max(0, 1 - math.floor(math.log10(p)))}f}%"


def _progress_line(log: _CbcLog, seconds: float, time_limit: Optional[float],
                   scale: float) -> str:
    head = f"ILP: {seconds:.0f} s" + (f" of {time_limit:g} s" if time_limit else "")
    if log.best is None:
        return head + ", no plan found yet"
    text = f"{head}, best plan {log.best / scale:.3f} ms"
    if log.bound is not None:
        text += f", CBC's bound {log.bound / scale:.3f} ms"
        if log.gap is not None:
            text += f" (gap {_percent(log.gap)})"
    return text


class _Reporter:
    """Calls ``progress`` every :data:`PROGRESS_EVERY` seconds from a thread while CBC runs."""

    def __init__(self, log: _CbcLog, progress: Callable[[str], None],
                 time_limit: Optional[float], scale: float):
        self.log, self.progress, self.time_limit, self.scale = log, progress, time_limit, scale
        self.stop = threading.Event()
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self._run, name="ucudnn-ilp-progress",
                                       daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(PROGRESS_EVERY):
            self.progress(_progress_line(self.log.read(), time.perf_counter() - self.t0,
                                         self.time_limit, self.scale))

    def __enter__(self) -> "_Reporter":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def _stop_cbc(tb) -> None:
    """Kill the CBC that PuLP started and close its log, after an exception raised while PuLP
    waited for it (a KeyboardInterrupt): PuLP leaves both open. Found in the frame of PuLP's
    ``solve_CBC`` in the traceback ``tb``, whose locals both PuLP 3.x and 4.x name ``cbc`` and
    ``pipe``; nothing is done where they are not there."""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "solve_CBC":
            proc, pipe = frame.f_locals.get("cbc"), frame.f_locals.get("pipe")
            if isinstance(proc, subprocess.Popen) and proc.poll() is None:
                proc.kill()
                proc.wait()
            if pipe is not None and hasattr(pipe, "close"):
                pipe.close()
        tb = tb.tb_next


class _Terminated(BaseException):
    """SIGTERM arrived during a solve (Note [ILP time limit])."""


@contextlib.contextmanager
def _sigterm_unwinds():
    """Within: SIGTERM raises :class:`_Terminated`, so that the solve's clean-up runs; at
    the end, the default action is back and a SIGTERM that came is sent again. Nothing
    changes outside the main thread or where SIGTERM has a handler of its own."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def raise_terminated(signum, frame):
        raise _Terminated()
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise                               # where the signal is blocked
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _remove(folder: str) -> None:
    """Remove the solve's folder; once more a moment later if CBC, interrupted, was still
    writing into it."""
    shutil.rmtree(folder, ignore_errors=True)
    if os.path.exists(folder):
        time.sleep(0.2)
        shutil.rmtree(folder, ignore_errors=True)


def equal_share(fronts: Mapping[Hashable, Sequence[Plan]], weights: Mapping[Hashable, int],
                budget: int) -> Dict[Hashable, Plan]:
    """The plan without the solver (Note [ILP time limit]): each kernel's fastest plan within
    its smallest plan's workspace plus an equal share per call of what the smallest plans
    leave of ``budget``. Within the budget whenever the smallest plans are."""
    smallest = {k: min(p.ws_bytes for p in f) for k, f in fronts.items()}
    calls = sum(weights[k] for k in fronts)
    left = budget - sum(weights[k] * smallest[k] for k in fronts)
    share = max(0, left) // calls if calls else 0
    return {k: min((p for p in f if p.ws_bytes <= smallest[k] + share),
                   key=lambda p: (p.time_ms, p.ws_bytes))
            for k, f in fronts.items()}


def _checked(choices: Dict[Hashable, Plan], budget: int, seconds: float, status: str,
             n_variables: int, w: Mapping[Hashable, int], **kw) -> IlpResult:
    result = IlpResult(choices, budget, seconds, status, n_variables, dict(w), **kw)
    if result.total_ws_bytes > budget:
        raise IlpError(f"ILP solution needs {result.total_ws_bytes} B, over the budget {budget} B")
    return result


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
                             msg: bool = False,
                             time_limit: Optional[float] = DEFAULT_TIME_LIMIT,
                             progress: Optional[Callable[[str], None]] = None,
                             method: str = "auto") -> IlpResult:
    """Choose one plan per kernel from ``fronts`` minimising total time within ``budget`` bytes.

    ``weights[k]``: instances of kernel k (default 1), each with its own workspace.
    ``method``: ``cbc`` (the ILP), ``enumerate`` (exact, for small problems) or ``auto``
    (enumerate up to :data:`ENUMERATE_MAX` combinations, else CBC). ``time_limit``: seconds
    CBC may search (None: no limit), then the best plan so far (Note [ILP time limit]);
    ``progress(text)`` hears how CBC is doing; ``msg``: CBC's own output on stdout."""
    if method not in ("auto", "cbc", "enumerate"):
        raise IlpError(f"method: {method!r} is not auto, cbc or enumerate")
    if budget < 0:
        raise IlpError(f"workspace_budget: must not be negative, got {budget}")
    if time_limit is not None and not time_limit > 0:
        raise IlpError(f"time_limit: must be a positive number of seconds or None, got "
                       f"{time_limit!r}")
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
    with _sigterm_unwinds():
        folder = tempfile.mkdtemp(prefix="ucudnn-ilp-")
        try:
            return _solve_cbc(fronts, w, budget, folder, msg, time_limit, progress)
        finally:
            _remove(folder)


def _solve_cbc(fronts: Mapping[Hashable, Sequence[Plan]], w: Mapping[Hashable, int],
               budget: int, folder: str, msg: bool, time_limit: Optional[float],
               progress: Optional[Callable[[str], None]]) -> IlpResult:
    """The ILP through CBC, its files in ``folder`` (Note [ILP time limit])."""
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
    prob += pulp.lpSum(w[k] * fronts[k][j].time_ms * _US_PER_MS * x[i, j]
                       for i, k in enumerate(keys) for j in range(len(fronts[k])))
    for i, k in enumerate(keys):
        prob += pulp.lpSum(x[i, j] for j in range(len(fronts[k]))) == 1, f"one_plan_{i}"
    prob += pulp.lpSum(w[k] * fronts[k][j].ws_bytes / 1024.0 * x[i, j]
                       for i, k in enumerate(keys) for j in range(len(fronts[k]))
                       ) <= budget / 1024.0, "budget"
    solver = _solver(folder, msg, time_limit)
    log = _CbcLog(None if msg else os.path.join(folder, "cbc.log"))
    if progress is not None:
        progress(f"ILP: CBC chooses among {len(x)} plans of {len(keys)} kernels, "
                 + (f"time limit {time_limit:g} s" if time_limit else "no time limit"))
    t0 = time.perf_counter()
    try:
        if progress is not None and not msg:
            with _Reporter(log, progress, time_limit, _US_PER_MS):
                returned = prob.solve(solver)
        else:
            returned = prob.solve(solver)
    except pulp.constants.PulpError as e:
        raise IlpError(f"ILP solver (CBC) failed: {e}") from None
    except BaseException as e:          # KeyboardInterrupt while CBC runs, ...
        _stop_cbc(e.__traceback__)
        raise
    seconds = time.perf_counter() - t0
    status, has_solution = _outcome(returned, prob)
    # With gapRel=0, CBC's "Optimal (within gap tolerance)" (PuLP 4: GapLimit) is optimal up to
    # its integrality tolerance; PuLP 3 reports the same line as Optimal.
    if status not in PROVEN and status != "TimeLimit":
        raise IlpError(f"ILP solver (CBC) finished with status {status!r}")
    if status == "TimeLimit" and time_limit is None:
        raise IlpError("ILP solver (CBC) stopped before it proved a plan optimal")
    if status == "TimeLimit" and not has_solution:
        choices = equal_share(fronts, w, budget)
        return _checked(choices, budget, seconds, "TimeLimitNoSolution", len(x), w,
                        note=f"ILP: time limit of {time_limit:g} s reached before CBC found a "
                        "plan: the equal-share plan (each kernel's fastest plan within an "
                        "equal share of the budget per call), not proven optimal")

    choices: Dict[Hashable, Plan] = {}
    for i, k in enumerate(keys):
        chosen = [j for j in range(len(fronts[k])) if (x[i, j].value() or 0) > 0.5]
        if len(chosen) != 1:
            raise IlpError(f"kernel {k}: the solver chose {len(chosen)} plans, expected exactly 1")
        choices[k] = fronts[k][chosen[0]]
    if status in PROVEN:
        return _checked(choices, budget, seconds, status, len(x), w)
    log.read()
    log.best = sum(w[k] * p.time_ms for k, p in choices.items()) * _US_PER_MS
    gap = log.gap
    return _checked(choices, budget, seconds, status, len(x), w, gap=gap,
                    note=f"ILP: time limit of {time_limit:g} s reached: CBC's best plan so "
                    "far, not proven optimal (" + (f"gap {_percent(gap)} to CBC's bound)"
                                                   if gap is not None else "gap unknown)"))
