"""Planning live kernels (ucudnn.measure.runtime, what the C API calls for Caffe) on the fake
core: one kernel (prepare_kernel, replan_kernel), a whole net (plan_net, ucudnn_net_plan) equal
to plan_network on the same tables, the records they write, the pruned search at run time and
the fallbacks (Note [Falling back])."""
import logging
import lzma
from functools import lru_cache

import pytest

from fake_core import CoreError, replay
from repo_paths import ALL_SIZES
from ucudnn.caffe import records as rr
from ucudnn.measure import bench, for_plan, runtime, shipped
from ucudnn.measure.planner_state import planner_state
from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import plan_kernel
from ucudnn.plan.layers import LayerSpec
from ucudnn.plan.network import plan_network
from ucudnn.plan.settings import PlanSettings, plan_workspace
from ucudnn.plan.table import AlgoPerf, group_by_kernel, parse_table
from ucudnn.vocab import InputError, PlanError


def legacy(**kw) -> PlanSettings:
    """Settings planning the legacy family: the fake core's models here are legacy algorithms
    (both families, the default: test_engines.py)."""
    return PlanSettings(engines="legacy", **kw)


SHAPE = ConvShape(16, 8, 8, 16, 3, 3, 1, 1)
MiB = 1 << 20


def kib_per_sample(kern, b):
    """Algorithm 1: four times faster than algorithm 0, 1 KiB of workspace per sample."""
    return [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.25 * b + 0.1, 1024 * b)]


# -- one kernel ------------------------------------------------------------------------------

def test_runtime_records_dp_plan_bench_and_replan(fake_core, records_file, caplog):
    fake_core.model = kib_per_sample
    k = fake_core.Kernel(SHAPE, "bwd_filter", 8, "float32", "default", "conv1", 2)
    # a kernel of the same shape measured size 1 before: the cache serves it
    bench.measure(fake_core.Kernel(SHAPE, "bwd_filter", 8, name="twin"), [1])
    with caplog.at_level(logging.INFO, logger="ucudnn"):
        runtime.prepare_kernel(k, legacy(limit=4096))
        runtime.replan_kernel(k, 0)
    assert [c.sizes for c in fake_core.calls] == [(1,), (2, 4, 8)]
    bench_r, dp, replan = rr.read_records(records_file)
    assert bench_r["kind"] == "bench" and bench_r["layer"] == "conv1"
    assert bench_r["instances"] == 2
    assert (bench_r["sizes"], bench_r["sizes_benchmarked"], bench_r["sizes_cached"]) == (4, 3, 1)
    assert bench_r["shape"]["c"] == 16 and bench_r["policy"] == "powerOfTwo"
    assert bench_r["search"] == "exhaustive" and bench_r["search_rounds"] is None
    assert dp["kind"] == "kernel" and dp["stage"] == "dp" and dp["optimizer"] == "dp"
    assert dp["limit_bytes"] == dp["plan_limit_bytes"] == 4096
    assert dp["kernel_id"] == bench_r["kernel_id"] == replan["kernel_id"]
    assert sum(r["batch"] * r["count"] for r in dp["plan"]) == 8
    assert all(r["ws_bytes"] <= 4096 for r in dp["plan"]) and dp["ws_bytes"] <= 4096
    assert dp["plan_text"] == "4x2:algo1" and dp["ws_bytes"] == 4096
    assert {r["algo_name"] for r in dp["plan"]} <= {"ALGO_0", "ALGO_1"}
    assert dp["predicted_ms"] < dp["undivided"]["predicted_ms"]    # micro-batching pays
    assert dp["bench_s"] >= 0 and dp["plan_s"] >= 0 and "slot" not in dp
    assert replan["stage"] == "replan" and replan["ws_bytes"] == 0
    assert replan["plan"] == [{"batch": 8, "count": 1, "algo": 0, "algo_name": "ALGO_0",
                               "math": 0, "time_ms": 8.0, "ws_bytes": 0}]
    s = rr.summarize(rr.read_records(records_file))
    k1 = s.kernels["conv1/bwd_filter"]
    assert s.replans == 1 and k1.replans == 1 and k1.sizes_benchmarked == 3
    assert s.predicted_conv_ms() == pytest.approx(2 * 8.0)
    # people read cuDNN's names; the C API's describe() keeps algoN
    assert any("ALGO_1" in m for m in caplog.messages)
    assert k.plan.describe() == "8x1:algo0"
    state = planner_state(k)
    assert state.settings == legacy(limit=4096) and state.bench_record["sizes"] == 4
    assert set(state.timing) == {"bench_s", "plan_s"}


def test_prepare_kernel_plans_one_kernel_with_the_dp_only(fake_core, caplog):
    for optimizer in ("ilp", "shared"):
        k = fake_core.Kernel(SHAPE, "fwd", 8, name="c")
        with pytest.raises(InputError, match=rf"layer 'c': field 'optimizer': {optimizer} plans "
                                             "a net's kernels together"):
            runtime.prepare_kernel(k, legacy(optimizer=optimizer))
    assert fake_core.calls == []
    with pytest.raises(PlanError, match="layer 'c': kernel was never benchmarked"):
        runtime.replan_kernel(fake_core.Kernel(SHAPE, "fwd", 8, name="c"), 0)
    # an explicit size above a live kernel's mini-batch is left out (a host reshapes nets;
    # the command line refuses such sizes instead), with a warning
    with caplog.at_level(logging.WARNING, logger="ucudnn"):
        k = runtime.prepare_kernel(fake_core.Kernel(SHAPE, "fwd", 8, name="c"),
                                   legacy(sizes=(4, 16)))
    assert "layer 'c': micro_batch_size 16 above the mini-batch 8 left out" in caplog.text
    state = planner_state(k)
    assert sorted(state.bench) == [4, 8] and state.settings.sizes == (4,)


def test_exclude_winograd_leaves_those_algorithms_out(fake_core):
    fake_core.model = lambda kern, b: [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(7, 0.1 * b, 0)]
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="c")
    runtime.prepare_kernel(k, legacy(exclude_winograd=True))
    assert {c.algo for c in k.plan.chunks} == {0}
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="c")
    runtime.prepare_kernel(k, legacy())     # from the cache now
    assert {c.algo for c in k.plan.chunks} == {7} and len(fake_core.calls) == 1


def test_a_plan_cudnn_rejects_falls_back(fake_core, caplog):
    """Note [Falling back]: the rejected (size, algorithm) is dropped and the kernel planned
    again; a workspace cuDNN says is larger than the benchmark's is corrected, then planned
    again within the limit."""
    fake_core.model = kib_per_sample
    k = fake_core.Kernel(SHAPE, "fwd", 8, name="c")
    fake_core.unsupported.add(("c", "fwd", 4, 1))
    with caplog.at_level(logging.WARNING, logger="ucudnn"):
        runtime.prepare_kernel(k, legacy(limit=4096))
    assert any("layer 'c' fwd: dropping micro-batch 4 algorithm IMPLICIT_PRECOMP_GEMM (1): "
               "c: workspace size of algorithm 1 at batch 4: CUDNN_STATUS_NOT_SUPPORTED" in m
               for m in caplog.messages)
    assert k.plan.describe() == "2x4:algo1" and k.workspace_size == 2048
    assert all(p.algo != 1 for p in planner_state(k).bench[4])
    # cuDNN needs more than the cache said for the 2-sample chunks: corrected, planned again
    fake_core.true_workspace[("c", "fwd", 2, 1)] = 5000
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ucudnn"):
        plan = runtime.replan_kernel(k, 4096)
    assert any("cuDNN needs 4.9KiB for the plan, the benchmark said 2.0KiB" in m
               for m in caplog.messages)
    assert plan.describe() == "1x8:algo1" and k.workspace_size == 1024
    assert next(p for p in planner_state(k).bench[2] if p.algo == 1).ws_bytes == 5000


@lru_cache(maxsize=None)
def _resnet18_table():
    path = ALL_SIZES / "resnet18_bench.csv.xz"
    with lzma.open(path, "rt") as f:
        return group_by_kernel(parse_table(f.read(), source=path.name))


def test_pruned_search_at_run_time(fake_core, tmp_path, records_file, monkeypatch):
    """Note [Pruned search at run time]: a kernel of policy ``all`` replayed from the H200 table
    of ResNet-18's l1_3x3 forward (every size 1..256 recorded): with ``UCUDNN_SEARCH=pruned``
    the plan is the exhaustive one's (within 1 %) from a fraction of the sizes, re-plans use
    the sizes measured, the records say which search ran; the ILP measures every size."""
    table = _resnet18_table()[("l1_3x3", "fwd")]
    fake_core.gpus = ["replayed H200"]
    fake_core.model = replay(_resnet18_table())
    layer = next(l for l in shipped.layers("resnet18") if l.name == "l1_3x3")
    shape = ConvShape.from_layer(layer)

    def asked():
        return [b for c in fake_core.calls for b in c.sizes]

    limit = 8 << 20
    full = plan_kernel(table, 256, "all", limit)
    monkeypatch.delenv(for_plan.SEARCH_ENV, raising=False)     # pruned is the default
    assert for_plan.search_mode() == "pruned"
    k = fake_core.Kernel(shape, "fwd", 256, name="l1_3x3")
    runtime.prepare_kernel(k, legacy(policy="all", limit=limit,
                                           cache_path=str(tmp_path / "pruned.sqlite")))
    assert full.time_ms <= k.plan.time_ms <= 1.01 * full.time_ms
    cold = k.plan
    assert len(asked()) == len(set(asked())) <= 80                  # of 256
    assert len(fake_core.calls) > 1                                 # in rounds
    assert k.held == [True, False]        # the benchmark's buffers set up once for the search
    rec = rr.read_records(records_file)[0]
    assert rec["kind"] == "bench" and rec["search"] == "pruned"
    assert rec["sizes"] == rec["sizes_benchmarked"] == len(asked()) and rec["search_rounds"] >= 1
    runtime.replan_kernel(k, 1 << 20)
    assert {c.batch for c in k.plan.chunks} <= set(asked()) and k.workspace_size <= 1 << 20
    # warm: the same search again reads the cache only
    n = len(fake_core.calls)
    again = fake_core.Kernel(shape, "fwd", 256, name="l1_3x3")
    runtime.prepare_kernel(again, legacy(policy="all", limit=limit,
                                               cache_path=str(tmp_path / "pruned.sqlite")))
    assert len(fake_core.calls) == n and again.plan == cold
    assert planner_state(again).bench_record["sizes_benchmarked"] == 0

    fake_core.calls.clear()
    monkeypatch.setenv(for_plan.SEARCH_ENV, "exhaustive")
    k = fake_core.Kernel(shape, "fwd", 256, name="l1_3x3")
    runtime.prepare_kernel(k, legacy(policy="all", limit=limit,
                                           cache_path=str(tmp_path / "exhaustive.sqlite")))
    assert sorted(asked()) == list(range(1, 257)) and k.plan.time_ms == full.time_ms
    assert k.held == []                   # one benchmark call: nothing to keep

    fake_core.calls.clear()               # the ILP needs every limit's optimum: all sizes
    monkeypatch.setenv(for_plan.SEARCH_ENV, "pruned")
    k = fake_core.Kernel(shape, "fwd", 256, name="l1_3x3")
    for_plan.measure_for_plan(k, legacy(policy="all", optimizer="ilp", limit=limit,
                                             cache_path=str(tmp_path / "ilp.sqlite")))
    assert sorted(asked()) == list(range(1, 257))
    assert planner_state(k).bench_record["search"] == "exhaustive"

    # a failed benchmark frees the kept buffers all the same
    def broken(kern, b):
        raise CoreError("cudnnFindConvolutionForwardAlgorithmEx: CUDNN_STATUS_EXECUTION_FAILED")
    fake_core.model = broken
    k = fake_core.Kernel(shape, "fwd", 256, name="l1_3x3")
    with pytest.raises(CoreError, match="EXECUTION_FAILED"):
        runtime.prepare_kernel(k, legacy(policy="all", limit=limit,
                                               cache_path=str(tmp_path / "broken.sqlite")))
    assert k.held == [True, False]

    monkeypatch.setenv(for_plan.SEARCH_ENV, "fastest")
    with pytest.raises(InputError, match="UCUDNN_SEARCH: unknown search 'fastest'"):
        runtime.prepare_kernel(fake_core.Kernel(SHAPE, "fwd", 8, name="c"),
                               legacy(policy="all", limit=limit))
    # the settings' own search wins over the environment
    assert for_plan.search_mode("exhaustive") == "exhaustive"


# -- a net (ucudnn_net_plan) -------------------------------------------------------------------

LAYERS = [LayerSpec("c1", 8, 3, 16, 16, 8, 3, 3, pad=1, bwd_data=False),
          LayerSpec("c2", 8, 8, 16, 16, 8, 3, 3, pad=1, groups=2),
          LayerSpec("c3", 8, 8, 8, 8, 16, 1, 7, pad=(0, 3), stride=(1, 1))]


def _model(kern, b):
    """Per-kernel differences (by shape and op), so that the optimizers' choices differ."""
    s = kern.shape
    work = s.c * s.k * s.r * s.s / 64
    extra = {"fwd": 0.0, "bwd_data": 0.3, "bwd_filter": 0.1}[kern.op]
    return [AlgoPerf(0, (work + extra) * b / 50, 0),
            AlgoPerf(1, (work + extra) * b / 200 + 0.02, int(work * b * 700)),
            AlgoPerf(2, (work + extra) * b / 400 + 0.05, int(work * b * 3000))]


def _tables(core, layers, settings):
    """What the fake core's benchmark gives for every kernel offered the workspace its plans
    may use (Note [Workspace a plan may use]): plan_network's input."""
    offered = plan_workspace(settings, layers)
    out = {}
    for l in layers:
        for op in l.ops:
            kern = core.Kernel(ConvShape.from_layer(l), op, l.n, name=l.name, instances=l.groups)
            out[l.name, op] = {b: sorted((p for p in core.perfs(kern, b)
                                          if p.ws_bytes <= offered[l.name]),
                                         key=lambda p: (p.time_ms, p.ws_bytes, p.algo))
                               for b in range(1, l.n + 1)}
    return out


def _summary(plan):
    return ([(k.layer, k.op, k.instance, k.plan, k.baseline, k.optimizer, k.limit, k.slot)
             for k in plan.kernels], plan.workspace_bytes, plan.arena_bytes, plan.budget)


SETTINGS = {
    "dp": {n: legacy(limit=40_000) for n in ("c1", "c2", "c3")},
    "ilp": {n: legacy(optimizer="ilp", limit=30_000) for n in ("c1", "c2", "c3")},
    "shared": {n: legacy(optimizer="shared", budget=200_000) for n in ("c1", "c2", "c3")},
    "mixed": {"c1": legacy(limit=20_000), "c2": legacy(optimizer="ilp", limit=9000),
              "c3": legacy(optimizer="shared", budget=60_000, policy="all")},
}


def test_a_net_opens_each_cache_once(fake_core, tmp_path, monkeypatch):
    """Note [One open cache per net]: planning a net (plan_net, and live.plan_kernels, which
    the scripts and the pruned measuring run) opens each cache file once, whatever the number
    of kernels; a kernel planned alone opens its own."""
    from ucudnn.measure.cache.file import CacheFile
    from ucudnn.measure.live import plan_kernels
    fake_core.model = _model
    opened = []
    init = CacheFile.__init__

    def counted(self, path=None, *a, **kw):
        opened.append(path)
        init(self, path, *a, **kw)
    monkeypatch.setattr(CacheFile, "__init__", counted)
    one, two = str(tmp_path / "one.sqlite"), str(tmp_path / "two.sqlite")
    runtime.plan_net(LAYERS, {"c1": legacy(cache_path=one), "c2": legacy(cache_path=two),
                              "c3": legacy(cache_path=one)})
    assert sorted(opened) == [one, two]
    opened.clear()
    kernels = [(l, op) for l in LAYERS for op in l.ops]
    planned = plan_kernels(kernels, legacy(policy="all", limit=40_000, cache_path=one))
    assert len(planned) == len(kernels) > 1 and opened == [one]
    opened.clear()
    runtime.prepare_kernel(fake_core.Kernel(SHAPE, "fwd", 8, name="alone"),
                           legacy(cache_path=one))
    assert opened == [one]


def test_benchmarks_offer_the_workspace_plans_may_use(fake_core):
    """Note [Workspace a plan may use]: a net's DP kernels are benchmarked with their limit
    offered, those of the ILP and the shared arena with the budget of the calls they plan
    together; a kernel planned alone with its limit; never more than the core's default cap
    (an unlimited kernel)."""
    from ucudnn.measure.cache import DEFAULT_WORKSPACE_CAP
    from ucudnn.vocab import UNLIMITED
    fake_core.model = _model
    runtime.plan_net(LAYERS, SETTINGS["mixed"])
    offered = {(c.name, c.op): c.workspace_cap for c in fake_core.calls}
    netwide = sum(l.calls for l in LAYERS if l.name != "c1")
    assert offered == {(l.name, op): (20_000 if l.name == "c1" else
                                      (9000 * netwide if l.name == "c2" else 60_000))
                       for l in LAYERS for op in l.ops}
    fake_core.calls.clear()
    runtime.plan_net(LAYERS, SETTINGS["shared"])
    assert {c.workspace_cap for c in fake_core.calls} == {200_000}
    fake_core.calls.clear()
    runtime.prepare_kernel(fake_core.Kernel(SHAPE, "fwd", 8, name="alone"), legacy(limit=5000))
    runtime.prepare_kernel(fake_core.Kernel(SHAPE, "fwd", 8, name="free"),
                           legacy(limit=UNLIMITED))
    assert [c.workspace_cap for c in fake_core.calls] == [5000, DEFAULT_WORKSPACE_CAP]


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_plan_net_equals_plan_network_on_the_same_tables(fake_core, records_file, setting):
    """What ucudnn_net_plan runs: every kernel created on the core, benchmarked through the
    cache, planned by plan_network, resolved; the plan (kernels, baselines, slots, workspace)
    is plan_network's on the tables the benchmarks gave."""
    fake_core.model = _model
    settings = SETTINGS[setting]
    live = runtime.plan_net(LAYERS, settings, name="small")
    ref = plan_network(LAYERS, _tables(fake_core, LAYERS, settings), settings)
    assert _summary(live.plan) == _summary(ref)
    assert set(live.kernels) == {(l.name, op) for l in LAYERS for op in l.ops}
    for k in live.plan.kernels:
        kern = live.kernels[k.layer, k.op]
        assert kern.plan == k.plan and kern.workspace_size == k.plan.ws_bytes
        assert kern.instances == k.groups and planner_state(kern).settings == settings[k.layer]
    assert live.workspace_bytes == ref.workspace_bytes
    assert live.arena_bytes == (ref.arena_bytes or 0)
    assert {len(c.sizes) for c in fake_core.calls} <= {4, 8}     # one call per kernel
    assert len(fake_core.calls) == 8
    recs = rr.read_records(records_file)
    assert [r["kind"] for r in recs] == ["bench"] * 8 + ["kernel"] * 8 + ["net"]
    net = recs[-1]
    assert (net["net"], net["kernels"], net["calls"]) == ("small", 8, 2 + 2 * 3 + 3)
    assert net["workspace_bytes"] == ref.workspace_bytes
    assert net["arena_bytes"] == ref.arena_bytes and net["budget_bytes"] == ref.budget
    assert net["predicted_ms"] == pytest.approx(ref.time_ms)
    assert [(m["layer"], m["op"], m["optimizer"]) for m in net["members"]] == [
        (k.layer, k.op, k.optimizer) for k in ref.kernels]
    kernels = [r for r in recs if r["kind"] == "kernel"]
    assert [r["stage"] for r in kernels] == [k.optimizer for k in ref.kernels]
    assert all(r["slot"] == {"arena": k.slot.arena, "offset": k.slot.offset,
                             "stride": k.slot.stride, "bytes": k.slot.bytes}
               for r, k in zip(kernels, ref.kernels))
    s = rr.summarize(recs)
    assert s.held_bytes == ref.held_bytes and s.workspace_bytes() == ref.held_bytes
    assert s.predicted_conv_ms() == pytest.approx(ref.time_ms)


def test_plan_net_falls_back_for_the_whole_net(fake_core, caplog):
    """Note [Falling back] for a net: a chunk cuDNN rejects is dropped from its kernel's
    benchmark and the whole net planned again (the ILP's division changes with it)."""
    fake_core.model = _model
    settings = SETTINGS["ilp"]
    first = runtime.plan_net(LAYERS, settings)
    chosen = next(k for k in first.plan.kernels if k.plan.chunks[0].algo != 0)
    c = chosen.plan.chunks[0]
    fake_core.unsupported.add((chosen.layer, chosen.op, c.batch, c.algo))
    with caplog.at_level(logging.WARNING, logger="ucudnn"):
        live = runtime.plan_net(LAYERS, settings)
    assert any(f"dropping micro-batch {c.batch} algorithm" in m for m in caplog.messages)
    tables = _tables(fake_core, LAYERS, settings)
    tables[chosen.layer, chosen.op][c.batch] = [p for p in tables[chosen.layer, chosen.op][c.batch]
                                                if p.algo != c.algo]
    assert _summary(live.plan) == _summary(plan_network(LAYERS, tables, settings))
    again = next(k for k in live.plan.kernels if (k.layer, k.op) == (chosen.layer, chosen.op))
    assert (c.batch, c.algo) not in {(x.batch, x.algo) for x in again.plan.chunks}


def test_plan_net_within_a_cap(fake_core, tmp_path):
    """After a host could not allocate a plan's workspace it asks again within a cap: the
    net's own workspace and arena together within it."""
    fake_core.model = _model
    for setting in ("dp", "ilp", "mixed"):
        # a cache of its own: another setting's entries, offered more, would be read
        settings = {n: s.replace(cache_path=str(tmp_path / f"{setting}.sqlite"))
                    for n, s in SETTINGS[setting].items()}
        free = runtime.plan_net(LAYERS, settings)
        cap = free.plan.held_bytes // 3
        capped = runtime.plan_net(LAYERS, settings, cap=cap)
        assert capped.plan.held_bytes <= cap < free.plan.held_bytes
        assert _summary(capped.plan) == _summary(plan_network(
            LAYERS, _tables(fake_core, LAYERS, settings), settings, cap=cap))


def test_plan_net_refuses_what_a_live_net_cannot_be(fake_core):
    with pytest.raises(InputError, match="layer 'x': field 'count': a live net describes each "
                                         "layer once, got 2"):
        runtime.plan_net([LayerSpec("x", 8, 3, 8, 8, 4, 3, 3, count=2)],
                         {"x": legacy()})
    assert fake_core.calls == []
