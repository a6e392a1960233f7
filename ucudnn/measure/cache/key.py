"""The cache key: what a benchmark depends on, its validation, its text form, and how an
entry's key answers a lookup.

Note [Workspace cap and timing in the key]
    cudnnFind only runs the algorithms whose workspace fits in what it is offered, and the core
    offers ``min(cap, free memory - 512 MiB)`` (8 GiB cap by default, halved when the
    allocation fails). A benchmark taken under memory pressure therefore lacks the algorithms
    that needed more, and must not plan as if complete. Times differ by method too: cudnnFind's
    own times (``"find"``) are 13-29 % off what plans run at on the H200, the core's re-timing
    of each algorithm back to back with CUDA events (``"events5"`` for 5 runs) is not
    (Note [Find times] in cython/ucudnn/_kernel.pyx). Both are key fields:
    ``CacheKey.workspace_cap`` (bytes offered to Find) and ``CacheKey.timing``.

    Matching (:meth:`CacheKey.usable_for`, ``BenchCache.get_many``): a lookup asks with the
    cap it needs and a timing; an entry is usable when its timing is the same and its cap is at
    least the asked one. Argument: an algorithm's time and workspace do not depend on how much
    more workspace Find was offered than the algorithm uses, and every algorithm that fits in a
    smaller cap fits in a larger one, so an entry measured with a larger cap holds everything
    a smaller-cap measurement would (plus algorithms the planner filters out by its own limit).
    The converse fails, so a smaller cap never answers a larger ask. Timings are never mixed.
    The graph family's pruned search keeps that argument for the tiers of ``GRAPH_TIERS`` in
    ucudnn/vocab.py: it tries the fastest-ranked configs that fit each tier below its cap too
    (Note [Graph choices within the cap] in cython/ucudnn/_graph.pyx). Slab choices do not
    keep it, so a 3-D kernel's graph entry at one sample is the exception (Note [Slab
    choices and larger caps] in ucudnn/measure/cache/reads.py).
    Of several usable entries of one batch size, the one with the largest cap (then the newest)
    is returned. Writes replace only the entry of the exact (key, cap, timing, batch).

    The recorded cap is what the core reports it offered (``Kernel.last_benchmark_workspace``,
    Note [Offered workspace] in ucudnn/measure/bench.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

from ...plan.conv import ConvShape
from ...plan.table import OPS
from ...vocab import DTYPES, FAMILIES, MATH_MODES, format_size

__all__ = ["CacheKey", "timing_name", "shape_from_key", "key_from_row", "batch_problem",
           "DEFAULT_WORKSPACE_CAP", "DEFAULT_TIMING", "UNKNOWN_CAP"]

#: What the core offers cudnnFind by default (``Kernel.benchmark(workspace_cap=None)``).
DEFAULT_WORKSPACE_CAP = 8 << 30
#: The core's default timing: re-timed with CUDA events, median of 5 (``time_iters=5``).
DEFAULT_TIMING = "events5"
#: ``workspace_cap`` of entries migrated from schema 1 (cap unknown; Note [Schema migration]).
UNKNOWN_CAP = -1
_TIMING_RE = re.compile(r"^(find|events[1-9][0-9]*)$")


def timing_name(time_iters: int) -> str:
    """The key's ``timing`` for the core's ``time_iters``: ``"find"`` (0: cudnnFind's own
    times) or ``"events<N>"`` (re-timed with CUDA events, median of N back-to-back runs)."""
    if not isinstance(time_iters, int) or isinstance(time_iters, bool) or time_iters < 0:
        raise ValueError(f"time_iters must be an integer >= 0, got {time_iters!r}")
    return "find" if time_iters == 0 else f"events{time_iters}"


@dataclass(frozen=True)
class CacheKey:
    """What a benchmark depends on, except the micro-batch size (a separate column).

    ``workspace_cap``: bytes offered to cudnnFind (in a lookup: the least a usable entry must
    have been offered); ``timing``: ``"find"`` or ``"events<N>"`` (:func:`timing_name`).
    Defaults are the core's defaults, 8 GiB and ``"events5"``. See Note [Workspace cap and
    timing in the key] for how lookups match; ``UNKNOWN_CAP`` marks entries migrated from
    schema 1, never usable for planning."""
    gpu: str
    cudnn_version: int
    dtype: str
    math: str
    op: str
    shape: ConvShape
    workspace_cap: int = DEFAULT_WORKSPACE_CAP
    timing: str = DEFAULT_TIMING
    family: str = "legacy"      # the family of choices measured (Note [Choices])

    def __post_init__(self):
        if not isinstance(self.gpu, str) or not self.gpu:
            raise ValueError(f"cache key field 'gpu' must be a non-empty string, got {self.gpu!r}")
        if (not isinstance(self.cudnn_version, int) or isinstance(self.cudnn_version, bool)
                or self.cudnn_version < 0):
            raise ValueError(f"cache key field 'cudnn_version' must be an integer >= 0, "
                             f"got {self.cudnn_version!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"cache key field 'dtype': unknown dtype {self.dtype!r} "
                             f"(expected one of {', '.join(DTYPES)})")
        if self.math not in MATH_MODES:
            raise ValueError(f"cache key field 'math': unknown math mode {self.math!r} "
                             f"(expected one of {', '.join(MATH_MODES)})")
        if self.op not in OPS:
            raise ValueError(f"cache key field 'op': {self.op!r} is not one of {', '.join(OPS)}")
        if not isinstance(self.shape, ConvShape):
            raise ValueError(f"cache key field 'shape' must be a ConvShape, got {self.shape!r}")
        if (not isinstance(self.workspace_cap, int) or isinstance(self.workspace_cap, bool)
                or (self.workspace_cap < 0 and self.workspace_cap != UNKNOWN_CAP)):
            raise ValueError(f"cache key field 'workspace_cap' must be a byte count >= 0, "
                             f"got {self.workspace_cap!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"cache key field 'family': {self.family!r} is not one of "
                             f"{', '.join(FAMILIES)}")
        if not isinstance(self.timing, str) or not _TIMING_RE.match(self.timing):
            raise ValueError(f"cache key field 'timing': {self.timing!r} is not 'find' or "
                             "'events<N>' (N >= 1)")

    @property
    def legacy(self) -> bool:
        """Migrated from schema 1: cap unknown, never used for planning."""
        return self.workspace_cap == UNKNOWN_CAP

    def kernel_columns(self) -> Tuple[str, int, str, str, str, str, str]:
        """The kernel's identity and the family measured: gpu, cudnn_version, dtype, math,
        op, shape text, family."""
        return (self.gpu, self.cudnn_version, self.dtype, self.math, self.op, self.shape.key(),
                self.family)

    def columns(self) -> Tuple:
        """Every stored column of the key: :meth:`kernel_columns`, timing, workspace_cap."""
        return self.kernel_columns() + (self.timing, self.workspace_cap)

    def usable_for(self, asked: "CacheKey") -> bool:
        """Whether an entry stored under this key answers a lookup for ``asked``: same kernel,
        same timing, a cap at least the asked one (Note [Workspace cap and timing in the
        key]); a legacy entry answers only a lookup for legacy entries."""
        if self.kernel_columns() != asked.kernel_columns() or self.timing != asked.timing:
            return False
        if asked.legacy or self.legacy:
            return self.legacy and asked.legacy
        return self.workspace_cap >= asked.workspace_cap

    def describe_measurement(self) -> str:
        """``8.0GiB offered, events5`` (``cap unknown (schema 1)``)."""
        cap = "cap unknown (schema 1)" if self.legacy else f"{format_size(self.workspace_cap)} offered"
        return f"{cap}, {self.timing}"

    def text(self) -> str:
        """Stable one-line form, e.g. for listings."""
        cap = "unknown" if self.legacy else str(self.workspace_cap)
        return "|".join(str(c) for c in self.kernel_columns()) + f"|cap={cap}|{self.timing}"


_KEY_ITEM = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]*)")


def shape_from_key(text: str) -> ConvShape:
    """Inverse of :meth:`ConvShape.key` (packed strides come back as ``None``)."""
    kw = {}
    for name, value in _KEY_ITEM.findall(text):
        if value.startswith("["):
            kw[name] = tuple(int(x) for x in value[1:-1].split(",") if x)
        elif value == "None":
            kw[name] = None
        elif name == "layout":
            kw[name] = value
        else:
            kw[name] = int(value)
    shape = ConvShape(**kw)
    packed = ConvShape(**{**kw, "x_strides": None, "y_strides": None})
    x = None if shape.x_strides == packed.packed_x_strides() else shape.x_strides
    y = None if shape.y_strides == packed.packed_y_strides() else shape.y_strides
    return ConvShape(**{**kw, "x_strides": x, "y_strides": y})


def key_from_row(gpu, cudnn_version, dtype, math, op, shape, workspace_cap, timing,
                 family) -> CacheKey:
    """The key of a stored entry's columns, checked as every key is; ValueError naming the
    field (``cache key field 'op': ...``, ``cache key field 'shape': ...``)."""
    if not isinstance(shape, str):
        raise ValueError(f"cache key field 'shape': must be text, got {shape!r}")
    try:
        conv = shape_from_key(shape)
    except (TypeError, ValueError) as e:
        raise ValueError(f"cache key field 'shape': cannot read {shape!r} ({e})") from None
    return CacheKey(gpu, cudnn_version, dtype, math, op, conv, workspace_cap, timing, family)


def batch_problem(batch) -> Optional[str]:
    """What is wrong with a stored entry's micro-batch size, or None."""
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        return f"field 'batch': must be an integer >= 1, got {batch!r}"
    return None
