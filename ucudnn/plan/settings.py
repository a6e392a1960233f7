"""The one settings record of a plan (:class:`PlanSettings`) and its defaults.

Every way in builds it: the command line (``ucudnn plan``, ``ucudnn prototxt``,
:mod:`ucudnn.cli.options`), a prototxt's ``ucudnn_param`` (:mod:`ucudnn.caffe.params`, which
Caffe's net reaches through the C API) and the C API's ``ucudnn_plan_options`` of one kernel.
Values are checked here, with the field named; enumerations take any spelling (Note [Enum
spellings] in :mod:`ucudnn.vocab`).

Note [Default settings]
    There is one set of defaults, and they are Caffe's: ``workspace_limit`` 8 MiB per kernel
    call (stock Caffe's fixed limit), policy ``powerOfTwo``, optimizer ``dp``, cuDNN's default
    math, one cudnnFind per size (Note [Find repeats] in :mod:`ucudnn.measure.bench`). So
    ``ucudnn plan`` without options predicts what Caffe runs for ``ucudnn_param {}``, and
    turning ucudnn on never gives a layer more workspace than stock Caffe did. The command line
    does not default to a larger limit: a prediction made under another limit than Caffe's
    would not be the plan Caffe runs. Ask for more with ``--limit`` (the README's examples use
    64 MiB, where micro-batching pays most on the H200). The families of choices default to
    ``both``, cuDNN's legacy algorithms and the graph API's engine configs, each micro-batch
    size taking the faster: measured in Caffe on the H200 (shared arena, 64 MiB, 3 processes
    each), ResNet-18 ran 42.4 against 43.6 ms and ResNet-50 70.2 against 73.3 ms with the
    legacy algorithms alone (results/h200/engines/). Predictions from data that holds the
    legacy family only say so (Note [Predictions from legacy measurements]).

Note [Workspace budget]
    The ILP and the shared arena divide one ``budget`` (bytes). Unset (None; caffe.proto: no
    ``total_workspace`` field) it is ``limit`` x the net's cuDNN calls, the memory the DP would
    give the same kernels, so the settings compare at equal memory. A budget that is set is
    that many bytes, 0 included (only zero-workspace algorithms): ``--budget 0`` and
    ``total_workspace: 0`` mean the same everywhere.

Note [Workspace a plan may use]
    No plan of a kernel planned alone (the DP) uses more workspace than its ``limit``, and
    none of a kernel of the ILP or the shared arena more than the net's budget
    (:func:`plan_workspace`). That is all its benchmark needs to offer cudnnFind and the
    graph engines: offering more measures algorithms no plan can take, and a process that
    plans where it runs (Caffe) would hold the larger workspace (the core's default cap is
    8 GiB) while it benchmarks, which can set its peak GPU memory.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from ..vocab import (DTYPE, ENGINE, LAYOUT, MATH, NETWIDE_OPTIMIZERS, OPTIMIZER, POLICY,
                     SEARCH, InputError, PlanError, parse_size)

__all__ = ["PlanSettings", "DEFAULTS", "candidate_sizes", "plan_workspace", "FIND_REPEATS",
           "DEFAULT_LIMIT"]

#: cudnnFind calls per micro-batch size (their median); Note [Find repeats] in
#: ucudnn/measure/bench.py.
FIND_REPEATS = 1
#: Stock Caffe's workspace per cuDNN call (Note [Default settings]).
DEFAULT_LIMIT = 8 << 20


@dataclass(frozen=True)
class PlanSettings:
    """How to plan a kernel (Note [Default settings], Note [Workspace budget]).

    ``sizes``: explicit candidate micro-batch sizes (override ``policy``); ``limit``: bytes
    per kernel call (the DP's bound, and the undivided baseline's); ``budget``: bytes for the
    net's ILP or shared arena; ``repeats``: cudnnFind calls per size; ``search``: how policy
    ``all`` finds its sizes (None: ``$UCUDNN_SEARCH``, else pruned); ``cache_path``: the benchmark cache (None: ``$UCUDNN_CACHE`` or
    the default); ``engines``: the families of cuDNN choices; ``layout``: the activations'
    layout of the net, net-wide (caffe.proto's ``ucudnn_param.layout``): Caffe runs its
    one-group convolutions in it and its grouped ones NCHW, and each layer's
    :class:`~ucudnn.plan.layers.LayerSpec` says which (Note [NHWC in Caffe] in Caffe's
    ``include/caffe/util/layout.hpp``); ``deterministic``: plan only choices that cuDNN
    says are bitwise reproducible (Note [Deterministic plans] in :mod:`ucudnn.plan.dp`)."""
    policy: str = "powerOfTwo"
    sizes: Optional[Tuple[int, ...]] = None
    limit: int = DEFAULT_LIMIT
    budget: Optional[int] = None
    optimizer: str = "dp"
    math: str = "default"
    dtype: str = "float32"
    repeats: int = FIND_REPEATS
    search: Optional[str] = None
    exclude_winograd: bool = False
    cache_path: Optional[str] = None
    engines: str = "both"
    layout: str = "NCHW"
    deterministic: bool = False

    def __post_init__(self):
        set_ = object.__setattr__
        for f, choices in (("policy", POLICY), ("optimizer", OPTIMIZER), ("math", MATH),
                           ("dtype", DTYPE), ("engines", ENGINE), ("layout", LAYOUT)):
            set_(self, f, choices(getattr(self, f), f))
        if self.search is not None:
            set_(self, "search", SEARCH(self.search, "search"))
        set_(self, "limit", parse_size(self.limit, "limit"))
        if self.budget is not None:
            set_(self, "budget", parse_size(self.budget, "budget"))
        if self.sizes is not None:
            sizes = list(self.sizes)
            bad = [b for b in sizes if not isinstance(b, int) or isinstance(b, bool) or b < 1]
            if bad or not sizes:
                raise InputError(f"sizes: micro-batch sizes must be positive integers, got "
                                 f"{sizes}")
            set_(self, "sizes", tuple(sorted(set(sizes))))
        if not isinstance(self.repeats, int) or isinstance(self.repeats, bool) or \
                self.repeats < 1:
            raise InputError(f"repeats: must be a positive integer, got {self.repeats!r}")
        set_(self, "exclude_winograd", bool(self.exclude_winograd))
        set_(self, "deterministic", bool(self.deterministic))
        if self.cache_path == "":
            set_(self, "cache_path", None)

    def replace(self, **changes) -> "PlanSettings":
        return dataclasses.replace(self, **changes)

    @property
    def netwide(self) -> bool:
        """The ILP or the shared arena: planned with the net's other kernels."""
        return self.optimizer in NETWIDE_OPTIMIZERS

    def candidate_sizes(self, n: int, where: str = "") -> List[int]:
        """The micro-batch sizes a kernel of mini-batch ``n`` may use; an explicit size larger
        than ``n`` is refused (:class:`PlanError` naming ``where``)."""
        return candidate_sizes(self.policy, n, self.sizes, where)

    def budget_for(self, calls: int) -> int:
        """The ILP's or the arena's budget for ``calls`` cuDNN calls (Note [Workspace
        budget])."""
        return self.budget if self.budget is not None else self.limit * calls


#: The defaults (Note [Default settings]).
DEFAULTS = PlanSettings()


def plan_workspace(settings: Mapping[str, PlanSettings], layers) -> Dict[str, int]:
    """Per layer name, the most workspace a plan of its kernels may use (Note [Workspace a
    plan may use]): its ``limit``, or for the ILP and the shared arena the budget of the net's
    cuDNN calls that those optimizers plan together (Note [Workspace budget]). ``layers``:
    :class:`~ucudnn.plan.layers.LayerSpec` (their ``calls``)."""
    netwide_calls = sum(l.calls for l in layers if settings[l.name].netwide)
    return {l.name: (settings[l.name].budget_for(netwide_calls) if settings[l.name].netwide
                     else settings[l.name].limit) for l in layers}


def candidate_sizes(policy: str, n: int, sizes: Optional[Iterable[int]] = None,
                    where: str = "") -> List[int]:
    """Micro-batch sizes a policy may use for mini-batch size ``n``.

    ``sizes`` (an explicit list) overrides the policy; N itself is always a candidate, so the
    undivided plan stays reachable. An explicit size above ``n`` is an error."""
    if not isinstance(n, int) or n < 1:
        raise PlanError(f"batch: mini-batch size must be a positive integer, got {n!r}")
    if sizes is not None:
        sizes = list(sizes)
        bad = [s for s in sizes if not isinstance(s, int) or s < 1]
        if bad:
            raise PlanError(f"micro_batch_sizes: sizes must be positive integers, got {bad}")
        big = sorted(s for s in sizes if s > n)
        if big:
            raise PlanError(f"{where + ': ' if where else ''}micro_batch_size {big[0]} is "
                            f"larger than the mini-batch ({n})")
        return sorted(set(sizes) | {n})
    policy = POLICY(policy)
    if policy == "undivided":
        return [n]
    if policy == "all":
        return list(range(1, n + 1))
    out, b = [], 1
    while b < n:
        out.append(b)
        b *= 2
    return out + [n]
