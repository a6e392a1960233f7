"""What the planners know of a live kernel: :class:`PlannerState`, one per core ``Kernel``,
found by :func:`planner_state`.

Note [Planner state beside the kernel]
    The core's ``Kernel`` holds what the core needs to benchmark and run a convolution: its
    geometry and descriptors, the choices it benchmarks, and the plan it runs (``Kernel.plan``,
    resolved into C arrays by ``set_plan``). What the planning layer measured and decided on the
    way to that plan -- the settings the kernel was measured for, its benchmark table, the
    bench record's fields, the time measuring and planning took -- is the planners' own
    record, :class:`PlannerState`, kept here beside the kernel rather than on it. A kernel
    reaches the planners from several holders (the C API hands ``ucudnn_kernel_replan`` only
    the kernel; PyTorch's runtime keeps kernels by shape; a net's ``LiveNet`` by layer), so the
    record is found from the kernel itself: a table keyed weakly by the kernel object, whose
    entry lives as long as the kernel does and is made on first use.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..plan.settings import PlanSettings
from ..plan.table import AlgoPerf

__all__ = ["PlannerState", "planner_state"]


@dataclass
class PlannerState:
    """The planners' record of one live kernel (Note [Planner state beside the kernel]):
    ``settings`` it was measured for, ``bench`` (its table, ``{b: [AlgoPerf]}``), the
    ``bench_record`` fields of its "bench" plan record (:func:`.for_plan.measure_for_plan`),
    and ``timing`` (``{"bench_s", "plan_s"}`` of its last planning); None until set."""
    settings: Optional[PlanSettings] = None
    bench: Optional[Dict[int, List[AlgoPerf]]] = None
    bench_record: Optional[Dict[str, Any]] = None
    timing: Optional[Dict[str, float]] = None


_states: "weakref.WeakKeyDictionary[Any, PlannerState]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()        # the C API plans from several host threads


def planner_state(kern) -> PlannerState:
    """The planners' record of ``kern`` (a core ``Kernel``), made empty on first use."""
    with _lock:
        state = _states.get(kern)
        if state is None:
            state = _states[kern] = PlannerState()
        return state
