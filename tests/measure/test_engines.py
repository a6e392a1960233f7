"""Both families of choices through the one cache and the one planner, on the fake core: the
``engines`` setting picks what is measured, each family is its own cache entry, a warm plan
measures nothing, and plans name engine configs (Note [Choices] in ucudnn/vocab.py)."""
import pytest

from fake_core import with_engine_configs
from ucudnn.caffe import records as rr
from ucudnn.measure import bench, for_plan, runtime
from ucudnn.measure.cache import BenchCache
from ucudnn.measure.planner_state import planner_state
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
    kinds = {bool(p.engine) for perfs in planner_state(k).bench.values() for p in perfs}
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
        # (within the limit the benchmark offers at every size: Note [Workspace a plan may use])
        return with_engine_configs(kern, b) + [AlgoPerf(-1, 0.7 * b, b * MiB // 2, 0, "eng9")]
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
    table = planner_state(k).bench
    later = [b for b in table if b not in fake_core.calls[0].sizes]
    assert later and all("eng9" not in {p.engine for p in table[b]} for b in later)
    assert all("eng9" in {p.engine for p in table[b]} for b in fake_core.calls[0].sizes)
    assert first >= 2
    # warm: the search from every size the cache holds for the family, the cache only
    calls, rounds = len(fake_core.calls), planner_state(k).bench_record["search_rounds"]
    warm = fake_core.Kernel(SHAPE, "fwd", 64, name="conv1")
    runtime.prepare_kernel(warm, PlanSettings(limit=64 * MiB, engines="graph", policy="all",
                                              search="pruned", cache_path=str(tmp_path / "c")))
    assert len(fake_core.calls) == calls and rounds > 1
    assert planner_state(warm).bench_record["search_rounds"] == 1 and warm.plan == k.plan
    assert front_configs({1: [AlgoPerf(-1, 1.0, 10, 0, "eng3[k1=2]"), AlgoPerf(0, 2.0, 0),
                              AlgoPerf(-1, 3.0, 5, 0, "eng4")]}) == {"eng3[k1=2]"}


def test_focus_takes_the_front_configs_else_their_engines_else_all():
    from ucudnn.vocab import focus_configs
    proposed = ["eng1[k2=6]", "eng1[k2=12]", "eng4", "eng9[k1=0]"]
    assert focus_configs(proposed, None) == proposed
    assert focus_configs(proposed, {"eng1[k2=12]", "eng7"}) == ["eng1[k2=12]"]
    assert focus_configs(proposed, {"eng1[k2=3]"}) == ["eng1[k2=6]", "eng1[k2=12]"]
    assert focus_configs(proposed, {"eng5"}) == proposed


# -- Note [Refused engines]: a refusal reaches the sizes measured before it ----------------------

def shadowing(kern, b):
    """:func:`with_engine_configs` and eng9, which eng7 beats on time and workspace at every
    size: while eng7 is accepted, the check never runs eng9."""
    from ucudnn.plan.table import AlgoPerf
    return with_engine_configs(kern, b) + [AlgoPerf(-1, 0.2 * b + 0.05, 3 * b * MiB, 0, "eng9")]


def _every_config_checked_or_beaten(kern, bench):
    """Each graph config of ``bench`` at a size was accepted by the check there, or is beaten
    on time and workspace by one that was; none is of a refused engine."""
    for b, perfs in bench.items():
        accepted = [p for p in perfs if p.engine in kern.accepted_configs.get(b, ())]
        for p in perfs:
            if not p.engine:
                continue
            assert parse_engine(p.engine)[0] not in kern.refused_engines, (b, p)
            assert p in accepted or any(a.time_ms <= p.time_ms and a.ws_bytes <= p.ws_bytes
                                        for a in accepted), (b, p)


@pytest.mark.parametrize("eng9_bad", [False, True])
def test_an_engine_refused_later_in_a_call_has_its_earlier_sizes_measured_again(fake_core,
                                                                               eng9_bad):
    fake_core.model = shadowing
    fake_core.inaccurate_at = {7: {5}, **({9: set(range(1, 9))} if eng9_bad else {})}
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    got = bench.measure_kernel(k, range(1, 9), engines="graph")
    assert [c.sizes for c in fake_core.calls] == [tuple(range(1, 9)), (1, 2, 3, 4)]
    assert set(k.refused_engines) == ({7, 9} if eng9_bad else {7})
    _every_config_checked_or_beaten(k, got)
    engines = {p.engine for perfs in got.values() for p in perfs}
    assert engines == ({"eng0"} if eng9_bad else {"eng0", "eng9"})


def test_a_refusal_is_kept_in_the_cache_and_reaches_its_earlier_entries(fake_core, tmp_path):
    fake_core.model = shadowing
    cache = str(tmp_path / "c.sqlite")
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    first = bench.measure(k, [1, 2, 4], cache_path=cache, engines="graph")
    assert all("eng7[k3=1]" in {p.engine for p in perfs} for perfs in first.values())
    # another process: eng7 fails at 8, after it was accepted at 1, 2 and 4 (in the cache)
    fake_core.inaccurate_at = {7: {8}}
    k2 = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    got = bench.measure(k2, [1, 2, 4, 8], cache_path=cache, engines="graph")
    assert [c.sizes for c in fake_core.calls] == [(1, 2, 4), (8,), (1, 2, 4)]
    assert set(k2.refused_engines) == {7}
    _every_config_checked_or_beaten(k2, got)
    key = bench.cache_key(SHAPE, "fwd", family="graph")
    with BenchCache(cache) as c:
        assert set(c.refusals(key)) == {7} and "eng7[k3=1] at batch 8" in c.refusals(key)[7]
        stored = c.get_many(key, [1, 2, 4, 8])
    assert stored == got
    # a third process starts from the refusal: what the cache lacks is measured with it
    fake_core.inaccurate_at = {}
    k3 = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    got3 = bench.measure(k3, [3, 4], cache_path=cache, engines="graph")
    assert fake_core.calls[-1].sizes == (3,) and set(k3.refused_engines) == {7}
    assert all("eng7[k3=1]" not in {p.engine for p in perfs} for perfs in got3.values())


def test_an_entry_holding_a_refused_engine_is_absent_to_every_lookup(tmp_path):
    from ucudnn.plan.table import AlgoPerf
    from ucudnn.measure.cache import CacheKey
    key = CacheKey("GPU", 91400, "float32", "default", "fwd", SHAPE, family="graph")
    with BenchCache(tmp_path / "c.sqlite") as c:
        c.put(key, 1, [AlgoPerf(-1, 1.0, 0, 0, "eng12[k3=1]"), AlgoPerf(-1, 2.0, 0, 0, "eng1")])
        c.put(key, 2, [AlgoPerf(-1, 2.0, 0, 0, "eng1")])
        c.put(key, 3, [AlgoPerf(-1, 2.0, 0, 0, "eng120")])     # another engine: eng120
        c.put(key, 5, [AlgoPerf(-1, 1.0, 0, 0, "eng12/4")])     # engine 12 over slabs
        assert c.refuse(key, {12: "off"}) == 1 and c.refuse(key, {12: "again"}) == 0
        assert c.refusals(key) == {12: "off"}
        assert sorted(c.get_many(key, [1, 2, 3, 5])) == [2, 3] and c.batches(key) == [2, 3]
        assert len(c) == 2 and c.entries() == [(key, [2, 3])]
        other = CacheKey("GPU", 91400, "float32", "fma", "fwd", SHAPE, family="graph")
        assert c.refusals(other) == {}                       # per kernel: math is part of it
        c.put(key, 1, [AlgoPerf(-1, 2.0, 0, 0, "eng1")])     # measured again: usable
        assert sorted(c.get_many(key, [1, 2, 3])) == [1, 2, 3]
        with pytest.raises(ValueError, match="engines are refused in the graph family"):
            c.refuse(CacheKey("GPU", 91400, "float32", "default", "fwd", SHAPE), {1: "x"})
        c.put(key, 4, [AlgoPerf(-1, 1.0, 0, 0, "eng12")])
        c.export_cache(tmp_path / "copy.sqlite")
    with BenchCache(tmp_path / "merged.sqlite") as m:
        got = m.import_cache(tmp_path / "copy.sqlite")
        assert got.stored == 3 and got.refusals == 1          # the entry at 4 is left out
        assert m.refusals(key) == {12: "off"} and m.batches(key) == [1, 2, 3]


def test_a_larger_cap_entry_without_slabs_does_not_answer_a_3d_ask_below_its_fastest(
        tmp_path):
    """Note [Slab choices and larger caps]: a 3-D graph entry at one sample measured with 512
    MiB, whose fastest config needs 300 MiB, does not answer a 256 MiB ask (the slab choices
    that cap needs were never tried); the entry stored under 256 MiB does. Other sizes, a
    fastest choice that fits, 2-D kernels and the legacy family keep the rule."""
    from ucudnn.plan.table import AlgoPerf
    from ucudnn.measure.cache import CacheKey
    M = 1 << 20
    shape3 = ConvShape.nd(32, 32, (16, 16, 16), (3, 3, 3), 1, 1, 1, layout="NCDHW")
    fast, slow = AlgoPerf(-1, 1.0, 300 * M, 0, "eng22"), AlgoPerf(-1, 20.0, 0, 0, "eng0")
    slab = AlgoPerf(-1, 1.1, 130 * M, 0, "eng22/2")

    def key(shape, cap, family="graph"):
        return CacheKey("GPU", 91900, "bfloat16", "default", "fwd", shape, family=family,
                        workspace_cap=cap)
    legacy = [AlgoPerf(1, 1.0, 300 * M, 0), AlgoPerf(0, 20.0, 0, 0)]
    with BenchCache(tmp_path / "c.sqlite") as c:
        for shape in (shape3, SHAPE):
            c.put_many(key(shape, 512 * M), {1: [fast, slow], 2: [fast, slow]})
        c.put_many(key(shape3, 512 * M, "legacy"), {1: legacy})
        assert sorted(c.get_many(key(shape3, 256 * M), [1, 2])) == [2]
        assert c.get(key(shape3, 256 * M), 1) is None
        assert c.get(key(shape3, 300 * M), 1) == [fast, slow]     # the fastest fits
        assert c.get(key(shape3, 256 * M, "legacy"), 1) == legacy
        assert c.get(key(SHAPE, 256 * M), 1) == [fast, slow]
        c.put_many(key(shape3, 256 * M), {1: [slab, slow]})
        assert c.get(key(shape3, 256 * M), 1) == [slab, slow]
        assert c.get(key(shape3, 192 * M), 1) == [slab, slow]     # its fastest fits 192 MiB
        assert c.get(key(shape3, 64 * M), 1) is None


def test_a_pruned_search_runs_again_when_a_later_round_refuses_an_engine(fake_core, tmp_path):
    from ucudnn.plan.search import start_sizes
    fake_core.model = shadowing
    settings = PlanSettings(limit=64 * MiB, engines="graph", policy="all", search="pruned")
    k = fake_core.Kernel(SHAPE, "fwd", 64, name="conv1")
    runtime.prepare_kernel(k, settings.replace(cache_path=str(tmp_path / "probe")))
    later = sorted(set(planner_state(k).bench) - set(start_sizes(64)))
    assert later and {c.engine for c in k.plan.chunks} == {"eng7[k3=1]"}
    # eng7 passes every start size and fails at a size only a later round asks for
    fake_core.calls.clear()
    fake_core.inaccurate_at = {7: {later[0]}}
    k = fake_core.Kernel(SHAPE, "fwd", 64, name="conv1")
    runtime.prepare_kernel(k, settings.replace(cache_path=str(tmp_path / "c")))
    assert set(k.refused_engines) == {7}
    _every_config_checked_or_beaten(k, planner_state(k).bench)
    assert "eng7[k3=1]" not in {c.engine for c in k.plan.chunks}
    assert set(start_sizes(64)) <= set(planner_state(k).bench)
    again = [b for c in fake_core.calls[1:] for b in c.sizes if b in fake_core.calls[0].sizes]
    assert again                         # the start sizes were measured again


def test_a_read_only_cache_cannot_hide_a_refusal_from_the_plan(fake_core, tmp_path, caplog,
                                                                 monkeypatch):
    """A refusal that a read-only cache cannot store: the sizes it holds with the refused
    engine are measured again in the process (and not stored), and the plan never uses it."""
    from ucudnn.measure import cache as cache_module
    from ucudnn.plan.search import start_sizes
    fake_core.model = shadowing
    settings = PlanSettings(limit=64 * MiB, engines="graph", policy="all", search="pruned")
    probe = fake_core.Kernel(SHAPE, "fwd", 64, name="conv1")
    runtime.prepare_kernel(probe, settings.replace(cache_path=str(tmp_path / "probe")))
    later = sorted(set(planner_state(probe).bench) - set(start_sizes(64)))
    path = tmp_path / "shared.sqlite"
    k = fake_core.Kernel(SHAPE, "fwd", 64, name="conv1")
    bench.measure(k, start_sizes(64), cache_path=str(path), engines="graph")   # eng7 in all

    class ReadOnly(BenchCache):          # as on shared storage this user cannot write
        def __init__(self, p=None, *args, **kw):
            super().__init__(p, *args, **{**kw, "readonly": True})
    monkeypatch.setattr(cache_module, "BenchCache", ReadOnly)
    before = path.read_bytes()
    try:
        fake_core.inaccurate_at = {7: {later[0]}}
        fake_core.calls.clear()
        k2 = fake_core.Kernel(SHAPE, "fwd", 64, name="conv1")
        runtime.prepare_kernel(k2, settings.replace(cache_path=str(path)))
        assert set(k2.refused_engines) == {7}
        _every_config_checked_or_beaten(k2, planner_state(k2).bench)
        assert "eng7[k3=1]" not in {c.engine for c in k2.plan.chunks}
        again = {b for c in fake_core.calls for b in c.sizes} & set(start_sizes(64))
        assert again                     # the cached start sizes were measured again
        assert "not stored" in caplog.text
    finally:
        monkeypatch.setattr(cache_module, "BenchCache", BenchCache)
    assert path.read_bytes() == before
    with BenchCache(path) as c:
        assert c.refusals(bench.cache_key(SHAPE, "fwd", family="graph")) == {}


def test_the_cached_search_treats_an_entry_holding_a_refused_engine_as_missing(fake_core,
                                                                               tmp_path):
    from ucudnn.plan.search import start_sizes
    fake_core.model = shadowing
    path = str(tmp_path / "c.sqlite")
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="conv1")
    bench.measure(k, range(1, 9), cache_path=path, engines="graph")
    key = bench.cache_key(SHAPE, "fwd", family="graph")
    assert set(start_sizes(8)) <= set(range(1, 9))
    with BenchCache(path) as c:
        found = for_plan._search_cached(c, [key], 8, 64 * MiB, lambda got: got, "conv1")
        assert found is not None and any("eng7[k3=1]" in {p.engine for p in perfs}
                                         for perfs in found.bench.values())
        assert for_plan._search_cached(c, [key], 8, 64 * MiB, lambda got: got, "conv1",
                                      refused={7: "off"}) is None
