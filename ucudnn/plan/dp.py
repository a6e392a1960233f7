"""Per-kernel planning: dynamic programming over micro-batch sizes.

A *kernel* is one convolution operation of one layer (forward, backward-data or
backward-filter) at mini-batch size N. Its benchmark maps each candidate micro-batch size b to
the algorithms cuDNN measured at b (:class:`~ucudnn.plan.table.AlgoPerf`). A *plan* splits N into
micro-batches b1 + b2 + ... = N and names one algorithm for each; the chunks run one after
another on one shared workspace, so a plan's time is the sum of its chunks' times and its
workspace the maximum of theirs.

Note [DP with a workspace limit]
    best(b) is the fastest algorithm at size b whose workspace fits the limit M.
    T(0) = 0, T(n) = min over b in S, b <= n of best(b) + T(n - b). The plan for N is read back
    from the argmin table. O(N * |S|).

Note [Dividing must beat the noise]
    A plan's predicted time is a sum of benchmark times, each good to a few per cent, and a
    divided plan adds calls whose host cost the benchmark sees only in part. On the H200
    (cuDNN 9.19, DeepBench fp16 and bf16 at 128 MiB, each divided plan timed in six rounds
    beside the undivided one: results/h200/cudnn919/) every divided plan measured more than
    3 % slower than undivided had been predicted at most 5.8 % faster (graph NHWC 0.9 % and
    3.7 %, then 1.038x and 1.044x slower; legacy NHWC fp16 5.8 %, then 1.33x slower), and
    the next, predicted 11 % faster, measured 10 % faster. So the per-kernel DP keeps the
    undivided plan unless the divided one is predicted DIVIDE_MARGIN times faster; where no
    undivided choice fits the limit, the divided plan stands. The ILP and the shared arena
    choose among whole fronts (Note [Desirable set]) and trade one kernel's time for another's
    workspace, so the margin is not theirs.

Note [Desirable set]
    The Pareto front of all plans over (time, workspace): a plan survives unless another is no
    slower and needs no more workspace. Because time adds and workspace takes the maximum, a
    plan dominated on a suffix is dominated as a whole, so F(n) = front{ (a, f) : b in S,
    a in front(b), f in F(n - b) } is exact. The network ILP chooses one plan per kernel from it.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from operator import itemgetter
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .settings import candidate_sizes
from .table import AlgoPerf
from ..vocab import UNLIMITED, PlanError, choice_name, format_size

__all__ = [
    "Chunk", "Plan", "best_algorithms", "plan_kernel", "min_partition", "pareto_front",
    "desirable_set", "undivided_plan", "WINOGRAD_ALGOS", "without_algorithms", "DIVIDE_MARGIN",
    "deterministic_only", "determinism_problem",
]

#: Note [Dividing must beat the noise]
DIVIDE_MARGIN = 1.10


@dataclass(frozen=True)
class Chunk:
    """One micro-batch of a plan: its size and the choice it runs (an algorithm and math
    type, or a graph engine config: Note [Choices] in ucudnn/vocab.py)."""
    batch: int
    algo: int
    math: int
    time_ms: float
    ws_bytes: int
    engine: str = ""


@dataclass(frozen=True)
class Plan:
    n: int
    chunks: Tuple[Chunk, ...]

    @property
    def time_ms(self) -> float:
        return sum(c.time_ms for c in self.chunks)

    @property
    def ws_bytes(self) -> int:
        return max((c.ws_bytes for c in self.chunks), default=0)

    @property
    def micro_batches(self) -> List[int]:
        return [c.batch for c in self.chunks]

    def runs(self) -> List[Tuple[Chunk, int]]:
        """Runs of equal consecutive chunks (same size, algorithm and math), in plan order:
        ``[(chunk, count)]``."""
        runs: List[list] = []
        for c in self.chunks:
            last = runs[-1][0] if runs else None
            if last is not None and (last.batch, last.algo, last.math, last.engine) == (
                    c.batch, c.algo, c.math, c.engine):
                runs[-1][1] += 1
            else:
                runs.append([c, 1])
        return [(c, k) for c, k in runs]

    def describe(self, op: Optional[str] = None) -> str:
        """``128x2:algo6, 1x1:algo0``: runs of equal chunks, largest first (the C API's and
        Caffe's form). With ``op``, for people: cuDNN's names, ``128x2:IMPLICIT_PRECOMP_GEMM``
        (and ``/fma`` for a math mode other than the default)."""
        if op is None:
            return ", ".join(f"{c.batch}x{k}:{c.engine}" if c.engine else
                             f"{c.batch}x{k}:algo{c.algo}" + ("" if c.math == 0 else f"/m{c.math}")
                             for c, k in self.runs())
        return ", ".join(f"{c.batch}x{k}:{choice_name(op, c.algo, c.math, c.engine)}"
                         for c, k in self.runs())


# cuDNN's Winograd algorithms per operation (cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t:
# WINOGRAD and WINOGRAD_NONFUSED). In fp32 they are the least accurate: on the H200 (cuDNN
# 9.14, FMA math) WINOGRAD_NONFUSED is ~1e-5 off a float64 reference for 3x3 filters but up
# to 2e-2 for AlexNet's grouped 5x5 conv2 (tests/gpu/test_caffe_gpu.py). Others are ~1e-6.
WINOGRAD_ALGOS = {"fwd": frozenset({6, 7}), "bwd_data": frozenset({4, 5}),
                  "bwd_filter": frozenset({4, 5})}


# Note [Winograd in both families]
#     A graph-API engine config is not a legacy algorithm (one algorithm is several engines,
#     NVIDIA/cudnn-frontend#20), so "no Winograd" cannot be said by algorithm number there.
#     What an engine says of itself are its numerical notes, and ``exclude_winograd`` drops
#     the legacy Winograd algorithms (WINOGRAD_ALGOS) and the graph engines noted WINOGRAD
#     (any tile: vocab.WINOGRAD_NOTES), asking the core (Kernel.engine_notes: the cache keeps
#     an engine config's text only). It does not make the graph family as exact as the
#     legacy one: on the H200 (cuDNN 9.14, FMA math, TF32 off) AlexNet's grouped 5x5 conv2
#     planned with the graph family was 5.6e-4 to 1.45e-3 off stock Caffe in backward-filter
#     with its Winograd and FFT engines excluded, where the legacy plans are ~1e-6 off
#     (tests/gpu/test_caffe_gpu.py); which engine is that far off is open.


# Note [Deterministic plans]
#     PyTorch's ``torch.backends.cudnn.deterministic`` and ``torch.use_deterministic_algorithms``
#     pick only cuDNN choices whose results are bitwise the same run to run; settings
#     ``deterministic`` (``ucudnn plan --deterministic``, ucudnn.torch at call time) do the same
#     here. What is deterministic is what cuDNN says at measurement: for a legacy algorithm and
#     math type the ``determinism`` of cudnnFind's perf record, for a graph engine config the
#     absence of the NONDETERMINISTIC numerical note on its engine (as PyTorch's Conv_v8
#     filters them). The benchmark records it in each choice (``AlgoPerf.deterministic``), the
#     benchmark cache keeps it (schema 8, Note [Schema migration] in
#     ucudnn/measure/cache/schema.py) and tables carry it in their ``deterministic`` column.
#
#     A measurement made before that has no answer: None, "not known deterministic". A
#     deterministic plan never takes such a choice, as it never takes one cuDNN calls
#     non-deterministic (``deterministic_only``); a benchmark through the cache for a
#     deterministic plan measures such sizes again and stores the answer
#     (ucudnn.measure.bench.measure), while a table or shipped data without the column cannot
#     be planned deterministically: the planner's error names the kernel and says how many of
#     its choices were of unknown determinism. Guessing from algorithm numbers was rejected:
#     cuDNN's answer depends on the version and the problem, and a wrong guess would break the
#     very promise asked for. ``deterministic_only`` keeps every size as a key (an empty list
#     where none is deterministic), so strict planning does not mistake "none deterministic"
#     for "not measured"; a kernel left with no choice at all is a :class:`PlanError` naming
#     the layer and op (ucudnn.plan.network), as any kernel the planner cannot plan.
#
#     Micro-batching keeps a fixed plan reproducible: the chunks run one after another on one
#     stream in the plan's order, each a deterministic choice, and backward-filter adds each
#     micro-batch's gradient into the filter gradient (beta 1 after the first) in that same
#     fixed order, so the sum is formed identically every run. The plan itself is fixed once
#     made (ties broken by workspace, then choice: ``best_algorithms``); two processes that
#     measure anew may still plan differently, each bitwise reproducible with itself.


def deterministic_only(bench: Mapping[int, Sequence[AlgoPerf]]) -> Dict[int, List[AlgoPerf]]:
    """``bench`` with only the choices known deterministic (Note [Deterministic plans]); every
    size stays, with an empty list where none is."""
    return {b: [p for p in perfs if p.deterministic is True] for b, perfs in bench.items()}


def determinism_problem(bench: Mapping[int, Sequence[AlgoPerf]]) -> Optional[str]:
    """Why ``bench`` offers no deterministic choice at any size (None where it does): how
    many of its choices cuDNN called non-deterministic and how many were of unknown
    determinism (Note [Deterministic plans])."""
    perfs = [p for ps in bench.values() for p in ps]
    if any(p.deterministic is True for p in perfs):
        return None
    unknown = sum(p.deterministic is None for p in perfs)
    text = (f"no deterministic choice measured (deterministic planning): "
            f"{len(perfs) - unknown} of its {len(perfs)} choices are non-deterministic")
    if unknown:
        text += (f", {unknown} of unknown determinism (measured before ucudnn recorded it: "
                 "measure the kernel again, or plan from a table with a 'deterministic' "
                 "column)")
    return text


def without_algorithms(bench: Mapping[int, Sequence[AlgoPerf]], algos) -> dict:
    """``bench`` without the algorithms ``algos`` (sizes left with none are dropped)."""
    return without_choices(bench, lambda p: p.algo in algos)


def without_choices(bench: Mapping[int, Sequence[AlgoPerf]],
                    drop: Callable[[AlgoPerf], bool]) -> dict:
    """``bench`` without the choices ``drop`` says (sizes left with none are dropped)."""
    out = {}
    for b, perfs in bench.items():
        kept = [p for p in perfs if not drop(p)]
        if kept:
            out[b] = kept
    return out


def best_algorithms(bench: Mapping[int, Sequence[AlgoPerf]], limit: int = UNLIMITED
                    ) -> dict:
    """``{b: fastest AlgoPerf at b with ws_bytes <= limit}`` (sizes with none are left out).

    Ties go to the smaller workspace, then the lower algorithm number: deterministic plans.
    """
    out = {}
    for b, perfs in bench.items():
        fits = [p for p in perfs if p.ws_bytes <= limit]
        if fits:
            out[b] = min(fits, key=lambda p: (p.time_ms, p.ws_bytes, p.algo, p.math, p.engine))
    return out


def _chunk(b: int, p: AlgoPerf) -> Chunk:
    return Chunk(b, p.algo, p.math, p.time_ms, p.ws_bytes, p.engine)


def _usable_sizes(bench, policy, n, sizes, strict, name) -> List[int]:
    cands = candidate_sizes(policy, n, sizes, name)
    missing = [b for b in cands if b not in bench]
    if missing and strict:
        raise PlanError(f"{name}: no measurements for micro-batch size(s) "
                        f"{_short_list(missing)} needed by the policy")
    return [b for b in cands if b in bench]


def _short_list(xs: Sequence[int]) -> str:
    xs = list(xs)
    return str(xs) if len(xs) <= 8 else f"[{xs[0]}, {xs[1]}, ..., {xs[-1]}] ({len(xs)} sizes)"


def plan_kernel(bench: Mapping[int, Sequence[AlgoPerf]], n: int, policy: str = "powerOfTwo",
                limit: int = UNLIMITED, sizes: Optional[Iterable[int]] = None, *,
                strict: bool = True, name: str = "kernel",
                margin: float = DIVIDE_MARGIN) -> Plan:
    """The fastest plan for mini-batch ``n`` whose workspace is at most ``limit`` bytes; a
    divided one only where it is predicted ``margin`` times faster than the fastest undivided
    one within ``limit`` (Note [Dividing must beat the noise]; ``margin=1`` plans by the
    predictions alone).

    ``strict``: every candidate size must have been measured (else :class:`PlanError`);
    with ``strict=False`` unmeasured sizes are skipped (planning from a table measured with
    fewer sizes than the policy names).
    """
    if limit < 0:
        raise PlanError(f"{name}: workspace_limit must not be negative, got {limit}")
    usable = _usable_sizes(bench, policy, n, sizes, strict, name)
    best = best_algorithms({b: bench[b] for b in usable}, limit)
    total, parts = min_partition({b: p.time_ms for b, p in best.items()}, n)
    if total == float("inf"):
        S = sorted(best)
        raise PlanError(
            f"{name}: no plan for batch {n} within workspace limit {format_size(limit)}: "
            f"no algorithm fits at micro-batch size(s) {_short_list(S) if S else '(none)'}")
    chunks = [_chunk(b, best[b]) for b in parts]
    whole = best.get(n)
    if whole is not None and parts != [n] and total * margin > whole.time_ms:
        return Plan(n, (_chunk(n, whole),))    # Note [Dividing must beat the noise]
    chunks.sort(key=lambda c: (-c.batch, c.algo, c.math, c.engine))
    return Plan(n, tuple(chunks))


def min_partition(cost: Mapping[int, float], n: int) -> Tuple[float, List[int]]:
    """Note [DP with a workspace limit]: the least sum of ``cost[b]`` over a partition of ``n``
    into sizes of ``cost``, and the parts (``inf`` and ``[]`` where none exists). Ties go to
    the larger micro-batch (fewer chunks)."""
    S = sorted(b for b in cost if 1 <= b <= n)
    pairs = [(b, cost[b]) for b in S]
    INF = float("inf")
    T = [0.0] + [INF] * n
    choice = [0] * (n + 1)
    k = 0                       # sizes <= m: pairs[:k] (the plain loop a warm search runs most)
    for m in range(1, n + 1):
        while k < len(S) and S[k] <= m:
            k += 1
        tm, cm = INF, 0
        for b, c in pairs[:k]:
            t = c + T[m - b]
            # '<=' with ascending b: ties go to the larger micro-batch (fewer chunks)
            if t <= tm:
                tm, cm = t, b
        T[m], choice[m] = tm, cm
    parts, m = [], n
    if T[n] < INF:
        while m:
            parts.append(choice[m])
            m -= choice[m]
    return T[n], parts


def undivided_plan(bench, n, limit=UNLIMITED, *, name="kernel") -> Plan:
    """The baseline: the fastest single algorithm for the whole mini-batch within ``limit``."""
    return plan_kernel(bench, n, "undivided", limit, name=name)


def pareto_front(items: Iterable, key=lambda p: (p.time_ms, p.ws_bytes)) -> list:
    """Items not dominated under ``key`` = (time, workspace), sorted by workspace ascending.

    An item is dominated when another is no slower and needs no more workspace and differs in
    at least one; of exact ties the first one seen is kept.
    """
    best = []
    for item in sorted(items, key=lambda p: (key(p)[1], key(p)[0])):
        t, w = key(item)
        if best and key(best[-1])[0] <= t:
            continue        # an item with no more workspace is no slower
        best.append(item)
    return best


_WS_THEN_TIME = itemgetter(1, 0)


def _front_of_tuples(items: list) -> list:
    """:func:`pareto_front` of ``(time, ws, ...)`` tuples (sorted in place; the same result,
    with a C-level sort key: desirable_set builds millions of candidates for policy all)."""
    items.sort(key=_WS_THEN_TIME)
    best, least = [], float("inf")
    for e in items:
        if e[0] < least:
            best.append(e)
            least = e[0]
    return best


def desirable_set(bench: Mapping[int, Sequence[AlgoPerf]], n: int, policy: str = "powerOfTwo",
                  sizes: Optional[Iterable[int]] = None, limit: int = UNLIMITED, *,
                  strict: bool = True, name: str = "kernel") -> List[Plan]:
    """Pareto front of plans for ``n`` over (time, workspace); see Note [Desirable set]."""
    usable = _usable_sizes(bench, policy, n, sizes, strict, name)
    per_size = {}
    for b in usable:
        front = pareto_front([p for p in bench[b] if p.ws_bytes <= limit],
                             key=lambda p: (p.time_ms, p.ws_bytes))
        if front:
            per_size[b] = [_chunk(b, p) for p in front]
    # F[m]: list of (time, ws, chunk, predecessor index into F[m - b]) forming the front,
    # workspace ascending (so time descending); Fws[m]: its workspaces, for bisect
    F: List[list] = [[(0.0, 0, None, -1)]] + [[] for _ in range(n)]
    Fws: List[list] = [[0]] + [[] for _ in range(n)]
    S = sorted(per_size)
    for m in range(1, n + 1):
        cands = []
        for b in S:
            if b > m:
                break
            prev, prev_ws = F[m - b], Fws[m - b]
            if not prev:
                continue
            for c in per_size[b]:
                # suffixes needing no more workspace than c all give c's workspace: only the
                # fastest of them (the last) can be on the front
                k = bisect_right(prev_ws, c.ws_bytes)
                if k:
                    cands.append((c.time_ms + prev[k - 1][0], c.ws_bytes, c, k - 1))
                for j in range(k, len(prev)):
                    cands.append((c.time_ms + prev[j][0], prev[j][1], c, j))
        F[m] = _front_of_tuples(cands)
        Fws[m] = [e[1] for e in F[m]]
    if not F[n]:
        raise PlanError(f"{name}: no plan for batch {n} within workspace limit {format_size(limit)}")
    plans = []
    for idx in range(len(F[n])):
        chunks, m, i = [], n, idx
        while m:
            _, _, c, j = F[m][i]
            chunks.append(c)
            m, i = m - c.batch, j
        chunks.sort(key=lambda c: (-c.batch, c.algo, c.math, c.engine))
        plans.append(Plan(n, tuple(chunks)))
    return plans
