"""Both families of choices through the one cache and the one planner, on the fake core: the
``engines`` setting picks what is measured, each family is its own cache entry, a warm plan
measures nothing, and plans name engine configs (Note [Choices] in ucudnn/vocab.py)."""
import pytest

from fake_core import with_engine_configs
from ucudnn.caffe import records as rr
from ucudnn.measure import bench, runtime
from ucudnn.measure.cache import BenchCache
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.settings import PlanSettings
from ucudnn.vocab import GRAPH_ALGO, InputError, parse_engine

SHAPE = ConvShape(16, 8, 8, 16, 3, 3, 1, 1)
MiB = 1 << 20


@pytest.mark.parametrize("engines, families", [
    ("legacy", [("legacy",)]), ("graph", [("graph",)]), ("both", [("legacy",), ("graph",)])])
def test_engines_setting_measures_its_families(fake_core, tmp_path, engines, families):
    fake_core.model = with_engine_configs
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    runtime.prepare_kernel(k, PlanSettings(limit=64 * MiB, engines=engines,
                                           cache_path=str(tmp_path / "c.sqlite")))
    assert [c.families for c in fake_core.calls] == families
    kinds = {bool(p.engine) for perfs in k.bench.values() for p in perfs}
    assert kinds == {"legacy": {False}, "graph": {True}, "both": {False, True}}[engines]


def test_both_plans_the_faster_family_and_a_warm_plan_measures_nothing(fake_core, tmp_path,
                                                                        records_file):
    fake_core.model = with_engine_configs
    cache = str(tmp_path / "c.sqlite")
    settings = PlanSettings(limit=64 * MiB, engines="both", cache_path=cache)
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    runtime.prepare_kernel(k, settings)
    assert {c.engine for c in k.plan.chunks} == {"eng7[k3=1]"}
    assert all(c.algo == GRAPH_ALGO for c in k.plan.chunks)
    first = len(fake_core.calls)
    again = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    runtime.prepare_kernel(again, settings)
    assert len(fake_core.calls) == first and again.plan == k.plan
    with BenchCache(cache) as c:
        assert sorted({key.family for key in c.keys()}) == ["graph", "legacy"]
    plan_rec = [r for r in rr.read_records(records_file) if r["kind"] == "kernel"][-1]
    assert plan_rec["plan"][0]["engine"] == "eng7[k3=1]"
    assert plan_rec["plan"][0]["algo_name"] == "eng7[k3=1]"


def test_a_limit_below_the_graph_configs_workspace_falls_to_what_fits(fake_core, tmp_path):
    fake_core.model = with_engine_configs
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    runtime.prepare_kernel(k, PlanSettings(limit=0, engines="both",
                                           cache_path=str(tmp_path / "c.sqlite")))
    # at 0 bytes: algorithm 0 (1 ms per sample) or eng0 (0.6 ms per sample)
    assert {c.engine for c in k.plan.chunks} == {"eng0"} and k.plan.ws_bytes == 0


def test_unknown_engines_setting_is_an_error_naming_the_field(fake_core):
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    with pytest.raises(InputError, match="engines: unknown engine family 'fastest'"):
        bench.measure(k, [8], engines="fastest")


def test_exclude_winograd_drops_graph_engines_noted_winograd(fake_core, tmp_path):
    """Note [Winograd in both families]: graph engine configs are filtered by their numerical
    notes (asked of the core, also for choices read back from the cache)."""
    from ucudnn.vocab import WINOGRAD_NOTES
    fake_core.model = with_engine_configs
    fake_core.engine_notes = {7: 1 << 5}                   # eng7 says WINOGRAD
    assert fake_core.engine_notes[7] & WINOGRAD_NOTES
    cache = str(tmp_path / "c.sqlite")
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    runtime.prepare_kernel(k, PlanSettings(limit=64 * MiB, engines="graph", cache_path=cache))
    assert {c.engine for c in k.plan.chunks} == {"eng7[k3=1]"}
    strict = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    runtime.prepare_kernel(strict, PlanSettings(limit=64 * MiB, engines="graph",
                                                cache_path=cache, exclude_winograd=True))
    assert {c.engine for c in strict.plan.chunks} == {"eng0"}
    assert len(fake_core.calls) == 1                        # the second plan read the cache
    fake_core.engine_notes = {7: 1 << 8}                    # WINOGRAD_TILE_13x13
    tile = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    runtime.prepare_kernel(tile, PlanSettings(limit=64 * MiB, engines="graph", cache_path=cache,
                                              exclude_winograd=True, policy="all"))
    assert {c.engine for c in tile.plan.chunks} == {"eng0"}
    for kept in (1 << 3, 1 << 0):                           # FFT, as legacy FFT; tensor cores
        fake_core.engine_notes = {7: kept}
        k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
        runtime.prepare_kernel(k, PlanSettings(limit=64 * MiB, engines="graph",
                                               cache_path=cache, exclude_winograd=True))
        assert {c.engine for c in k.plan.chunks} == {"eng7[k3=1]"}


def test_pruned_search_focuses_later_rounds_on_the_front_configs(fake_core, tmp_path):
    """Note [Graph focus in the pruned search]: the first round tries every engine config,
    the later ones those on the front so far; the focus is cleared after."""
    from ucudnn.plan.search import front_configs
    from ucudnn.plan.table import AlgoPerf

    def three(kern, b):         # eng9 is never on the front: slower than eng0, more workspace
        return with_engine_configs(kern, b) + [AlgoPerf(-1, 0.7 * b, 4 * b * MiB, 0, "eng9")]
    fake_core.model = three
    k = fake_core.Kernel(SHAPE, "fwd", 64, name="conv1")
    runtime.prepare_kernel(k, PlanSettings(limit=64 * MiB, engines="graph", policy="all",
                                           search="pruned", cache_path=str(tmp_path / "c")))
    assert k.focus_seen[0] is None and len(k.focus_seen) > 1
    front = set(k.focus_seen[1])
    assert front and all(parse_engine(e)[0] in (7, 0) for e in front), front
    assert all(f >= k.focus_seen[1] for f in k.focus_seen[2:]), k.focus_seen
    assert k.graph_focus is None
    first = len(fake_core.calls[0].sizes)
    later = [b for b, perfs in k.bench.items() if b not in fake_core.calls[0].sizes]
    assert later and all("eng9" not in {p.engine for p in k.bench[b]} for b in later)
    assert all("eng9" in {p.engine for p in k.bench[b]} for b in fake_core.calls[0].sizes)
    assert first >= 2
    # warm: the search from every size the cache holds for the family, the cache only
    calls, rounds = len(fake_core.calls), k.bench_record["search_rounds"]
    warm = fake_core.Kernel(SHAPE, "fwd", 64, name="conv1")
    runtime.prepare_kernel(warm, PlanSettings(limit=64 * MiB, engines="graph", policy="all",
                                              search="pruned", cache_path=str(tmp_path / "c")))
    assert len(fake_core.calls) == calls and rounds > 1
    assert warm.bench_record["search_rounds"] == 1 and warm.plan == k.plan
    assert front_configs({1: [AlgoPerf(-1, 1.0, 10, 0, "eng3[k1=2]"), AlgoPerf(0, 2.0, 0),
                              AlgoPerf(-1, 3.0, 5, 0, "eng4")]}) == {"eng3[k1=2]"}


def test_focus_takes_the_front_configs_else_their_engines_else_all():
    from ucudnn.vocab import focus_configs
    proposed = ["eng1[k2=6]", "eng1[k2=12]", "eng4", "eng9[k1=0]"]
    assert focus_configs(proposed, None) == proposed
    assert focus_configs(proposed, {"eng1[k2=12]", "eng7"}) == ["eng1[k2=12]"]
    assert focus_configs(proposed, {"eng1[k2=3]"}) == ["eng1[k2=6]", "eng1[k2=12]"]
    assert focus_configs(proposed, {"eng5"}) == proposed
