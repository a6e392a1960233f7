"""The planners' state of a live kernel beside it (Note [Planner state beside the kernel] in
ucudnn/measure/planner_state.py), over the fake core."""
import gc
import weakref

from ucudnn.measure import planner_state as ps
from ucudnn.measure import runtime
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.settings import PlanSettings

SHAPE = ConvShape(16, 8, 8, 16, 3, 3, 1, 1)


def test_one_state_per_kernel_found_from_the_kernel(fake_core, tmp_path):
    a = fake_core.Kernel(SHAPE, "fwd", 8, name="a")
    b = fake_core.Kernel(SHAPE, "fwd", 8, name="b")
    assert ps.planner_state(a) is ps.planner_state(a)
    assert ps.planner_state(a) is not ps.planner_state(b)
    assert ps.planner_state(b) == ps.PlannerState()         # empty until measured
    settings = PlanSettings(limit=1 << 20, cache_path=str(tmp_path / "c.sqlite"))
    runtime.prepare_kernel(a, settings)
    state = ps.planner_state(a)
    assert state.settings == settings and sorted(state.bench) == [1, 2, 4, 8]
    assert state.bench_record["sizes"] == 4 and set(state.timing) == {"bench_s", "plan_s"}
    # what C API's ucudnn_kernel_replan does, handed the kernel only
    plan = runtime.replan_kernel(a, 0)
    assert a.plan is plan and ps.planner_state(b).bench is None


def test_the_state_lives_as_long_as_its_kernel(fake_core, tmp_path):
    kern = fake_core.Kernel(SHAPE, "fwd", 8, name="c")
    runtime.prepare_kernel(kern, PlanSettings(limit=1 << 20,
                                              cache_path=str(tmp_path / "c.sqlite")))
    state = weakref.ref(ps.planner_state(kern))
    alive = weakref.ref(kern)
    del kern
    gc.collect()
    assert alive() is None and state() is None
