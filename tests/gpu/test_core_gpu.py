"""The core on a GPU: micro-batched results equal undivided ones.

Strict fp32 (CUDNN_FMA_MATH) so that algorithms agree to float rounding. PyTorch (on the GPU
host) provides device buffers and an independent reference convolution.
"""
import math
import threading
import time

import pytest

from ucudnn.plan.conv import ConvShape
from ucudnn.plan.dp import Chunk, Plan, plan_kernel
from ucudnn.vocab import InputError, Status

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="the GPU tests use PyTorch for buffers")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible", allow_module_level=True)
from ucudnn import _core  # noqa: E402  (a GPU host builds the core)
from gpu_kernels import handle as _handle, run_kernel as _run  # noqa: E402

F = torch.nn.functional
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False



def _rel_err(a, b):
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


def _close(a, b, what, tol=1e-4):
    err = _rel_err(a, b)
    assert err <= tol, f"{what}: max relative error {err:.3g} > {tol:.3g}"


def _forced_plans(kern):
    """Plans that exercise micro-batching: the DP plan at 64 MiB, and a fixed split into
    powers of two whose chunks use different algorithms (rotating through those measured)."""
    n = kern.n
    sizes = sorted({b for b in (1, 2, 4, 8, 16, 32, 64, 128, n) if b <= n})
    bench = _bench(kern, sizes)
    plans = [plan_kernel(bench, n, "powerOfTwo", 64 << 20)]
    chunks, left = [], n
    for b in sorted(sizes, reverse=True):
        while b <= left and b != n and bench[b]:
            p = bench[b][len(chunks) % len(bench[b])]
            chunks.append(Chunk(b, p.algo, p.math, p.time_ms, p.ws_bytes))
            left -= b
    assert left == 0
    plans.append(Plan(n, tuple(chunks)))
    return plans


def _tolerance(kern, plan, a, b, like, ref, beta, init):
    """cuDNN's algorithms differ in accuracy (FFT, Winograd). A micro-batched plan may be as
    far from the reference as its least accurate algorithm run undivided, not further:
    tolerance = 2 x the worst such error, at least 1e-5."""
    worst = 0.0
    for algo, math_ in {(c.algo, c.math) for c in plan.chunks}:
        try:
            kern.set_plan(Plan(kern.n, (Chunk(kern.n, algo, math_, 0.0, 0),)))
        except _core.CudnnError:
            continue                       # not available undivided: no bound from it
        out = init.clone()
        _run(kern, a, b, out, beta=beta)
        worst = max(worst, _rel_err(out, ref))
    return max(1e-5, 2 * worst)


def _bench(kern, sizes):
    from ucudnn.measure.bench import _perfs
    return {b: _perfs(r) for b, r in kern.benchmark(sizes, 1).items()}


def _undivided_algo0(kern):
    kern.set_plan(Plan(kern.n, (Chunk(kern.n, 0, 3, 0.0, 0),)))



SHAPES = {
    # name: (N, C, H, W, K, R, S, pad, stride, dilation)
    "alexnet_conv1": (250, 3, 227, 227, 96, 11, 11, 0, 4, 1),
    "alexnet_conv3": (250, 256, 13, 13, 384, 3, 3, 1, 1, 1),
    "resnet_l2_3x3s2": (250, 64, 56, 56, 128, 3, 3, 1, 2, 1),
    "resnet_l2_down": (250, 64, 56, 56, 128, 1, 1, 0, 2, 1),
    "dilated_odd": (37, 16, 30, 30, 24, 3, 3, 2, 1, 2),
}


def _tensors(N, C, H, W, K, R, S, pad, stride, dil, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(N, C, H, W, device="cuda", generator=g)
    w = torch.randn(K, C, R, S, device="cuda", generator=g) / math.sqrt(C * R * S)
    y = F.conv2d(x, w, stride=stride, padding=pad, dilation=dil)
    dy = torch.randn_like(y)
    return x, w, y, dy


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_micro_batched_equals_undivided(name, op, beta):
    N, C, H, W, K, R, S, pad, stride, dil = SHAPES[name]
    shape = ConvShape(C, H, W, K, R, S, pad, pad, stride, stride, dil, dil)
    kern = _core.Kernel(shape, op, N, "float32", "fma", name)
    x, w, y_ref, dy = _tensors(N, C, H, W, K, R, S, pad, stride, dil)
    a, b, like = {"fwd": (x, w, y_ref), "bwd_data": (w, dy, x), "bwd_filter": (x, dy, w)}[op]
    init = torch.randn_like(like)

    _undivided_algo0(kern)
    ref = init.clone()
    _run(kern, a, b, ref, beta=beta)
    if op == "fwd":      # an independent check of the undivided path itself
        _close(ref, y_ref + beta * init, f"{name} fwd vs torch")

    for plan in _forced_plans(kern):
        tol = _tolerance(kern, plan, a, b, like, ref, beta, init)
        kern.set_plan(plan)
        out = init.clone()
        _run(kern, a, b, out, beta=beta)
        _close(out, ref, f"{name} {op} beta={beta} plan {plan.describe()}", tol)


@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_filter"])
def test_same_algorithm_split_equals_undivided(op):
    """Micro-batching itself changes nothing: one algorithm, split or not, gives the same
    result (backward-filter only re-associates the sum over samples)."""
    N, C, H, W, K, R, S, pad, stride, dil = SHAPES["alexnet_conv3"]
    shape = ConvShape(C, H, W, K, R, S, pad, pad, stride, stride, dil, dil)
    kern = _core.Kernel(shape, op, N, "float32", "fma", "same_algo")
    x, w, y_ref, dy = _tensors(N, C, H, W, K, R, S, pad, stride, dil, seed=3)
    a, b, like = {"fwd": (x, w, y_ref), "bwd_data": (w, dy, x), "bwd_filter": (x, dy, w)}[op]
    bench = _bench(kern, [N, 128, 64, 32, 16, 8, 2])
    common = set.intersection(*({(p.algo, p.math) for p in perfs} for perfs in bench.values()))
    assert common, "no algorithm available at every size"
    split = (128, 64, 32, 16, 8, 2)
    for algo, m in sorted(common):
        kern.set_plan(Plan(N, (Chunk(N, algo, m, 0.0, 0),)))
        ref = torch.zeros_like(like)
        _run(kern, a, b, ref)
        kern.set_plan(Plan(N, tuple(Chunk(s, algo, m, 0.0, 0) for s in split)))
        out = torch.zeros_like(like)
        _run(kern, a, b, out)
        _close(out, ref, f"{op} algo {algo} split", 1e-5 if op != "bwd_filter" else 1e-4)


def test_grouped_strided_views_match_torch_groups():
    """Caffe's grouped layers: one kernel per group over strided views of the whole blob."""
    N, G, C, H, W, K, R = 250, 2, 96, 27, 27, 256, 5
    x, _, _, _ = _tensors(N, C, H, W, K, R, R, 2, 1, 1)
    w = torch.randn(K, C // G, R, R, device="cuda") / math.sqrt(C // G * R * R)
    # float64 references: PyTorch's own fp32 backward-filter picks Winograd here, which is
    # 2.7e-2 off (measured on the H200); our accurate algorithms are ~1e-6 off
    xd, wd = x.double(), w.double()
    y_ref = F.conv2d(xd, wd, padding=2, groups=G).float()
    dy = torch.randn_like(y_ref)
    dx_ref = torch.nn.grad.conv2d_input(x.shape, wd, dy.double(), padding=2, groups=G).float()
    dw_ref = torch.nn.grad.conv2d_weight(xd, w.shape, dy.double(), padding=2, groups=G).float()
    cg, kg = C // G, K // G
    shape = ConvShape(cg, H, W, kg, R, R, 2, 2, 1, 1, 1, 1, 1,
                      x_strides=(C * H * W, H * W, W, 1), y_strides=(K * H * W, H * W, W, 1))
    y, dx, dw = torch.zeros_like(y_ref), torch.zeros_like(x), torch.zeros_like(w)
    esz = 4
    for op, out in (("fwd", y), ("bwd_data", dx), ("bwd_filter", dw)):
        kern = _core.Kernel(shape, op, N, "float32", "fma", f"conv2_g/{op}")
        plan = _forced_plans(kern)[1]
        # only algorithms accurate to fp32 rounding here: the point is the strided views
        accurate = {"fwd": {0, 1, 2}, "bwd_data": {0, 1}, "bwd_filter": {0, 1, 3}}[op]
        plan = Plan(N, tuple(c for c in plan.chunks if c.algo in accurate) or
                    (Chunk(N, 0, 3, 0.0, 0),))
        if sum(c.batch for c in plan.chunks) != N:
            rest = N - sum(c.batch for c in plan.chunks)
            plan = Plan(N, plan.chunks + (Chunk(rest, 0, 3, 0.0, 0),))
        kern.set_plan(plan)
        assert len(kern.plan.chunks) > 1
        for g in range(G):
            xo, yo, wo = g * cg * H * W * esz, g * kg * H * W * esz, g * kg * cg * R * R * esz
            ws = torch.empty(max(1, kern.workspace_size), dtype=torch.uint8, device="cuda")
            a, b, o = {"fwd": (x.data_ptr() + xo, w.data_ptr() + wo, y.data_ptr() + yo),
                       "bwd_data": (w.data_ptr() + wo, dy.data_ptr() + yo, dx.data_ptr() + xo),
                       "bwd_filter": (x.data_ptr() + xo, dy.data_ptr() + yo, dw.data_ptr() + wo)}[op]
            kern.run(_handle(), a, b, o, ws.data_ptr(), kern.workspace_size)
    torch.cuda.synchronize()
    _close(y, y_ref, "grouped fwd", tol=1e-5)
    _close(dx, dx_ref, "grouped bwd_data", tol=1e-5)
    _close(dw, dw_ref, "grouped bwd_filter", tol=1e-5)


def test_cudnn_group_count_descriptor():
    N, G, C, H, K, R = 64, 4, 32, 14, 64, 3
    shape = ConvShape(C, H, H, K, R, R, 1, 1, 1, 1, 1, 1, G)
    x = torch.randn(N, C, H, H, device="cuda")
    w = torch.randn(K, C // G, R, R, device="cuda")
    y_ref = F.conv2d(x, w, padding=1, groups=G)
    kern = _core.Kernel(shape, "fwd", N, "float32", "fma", "grouped")
    for plan in _forced_plans(kern):
        kern.set_plan(plan)
        y = torch.zeros_like(y_ref)
        _run(kern, x, w, y)
        _close(y, y_ref, f"cudnn groups plan {plan.describe()}")


def test_workspace_too_small_is_a_clear_error():
    shape = ConvShape(64, 28, 28, 64, 3, 3, 1, 1)
    kern = _core.Kernel(shape, "fwd", 32, "float32", "default", "small_ws")
    bench = _bench(kern, [32])
    big = max(bench[32], key=lambda p: p.ws_bytes)
    assert big.ws_bytes > 0
    kern.set_plan(Plan(32, (Chunk(32, big.algo, big.math, big.time_ms, big.ws_bytes),)))
    x = torch.randn(32, 64, 28, 28, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    y = torch.empty(32, 64, 28, 28, device="cuda")
    with pytest.raises(InputError, match="small_ws.*workspace") as err:
        kern.run(_handle(), x.data_ptr(), w.data_ptr(), y.data_ptr(), 0, 0)
    assert err.value.status == Status.INVALID
    # time_run checks every run: the first failure stops the loop and is raised
    with pytest.raises(InputError, match="small_ws.*workspace"):
        _core.time_run(kern, _handle(), x.data_ptr(), w.data_ptr(), y.data_ptr(), 0, 0, iters=3)
    ws = torch.empty(max(1, kern.workspace_size), dtype=torch.uint8, device="cuda")
    # back to back (Note [Plans timed back to back]) and each run between its own events:
    # every event each mode reads was recorded
    for back_to_back in (True, False):
        times = _core.time_run(kern, _handle(), x.data_ptr(), w.data_ptr(), y.data_ptr(),
                               ws.data_ptr(), kern.workspace_size, iters=3, warmup=1,
                               back_to_back=back_to_back)
        assert len(times) == 3 and all(t > 0 for t in times)


def test_one_cudnn_handle_per_thread():
    """Note [Thread handles]: a thread's planning calls share one cached cuDNN handle, which is
    destroyed when the thread exits."""
    shape = ConvShape(16, 14, 14, 16, 3, 3, 1, 1)
    kern = _core.Kernel(shape, "fwd", 8, "float32", "fma", "handles")
    kern.workspace_for(8, 0, 3)
    mine = _core.thread_handle_stats()
    for _ in range(5):
        kern.workspace_for(8, 0, 3)
    assert _core.thread_handle_stats()["created_on_thread"] == mine["created_on_thread"]
    assert mine["on_thread"] >= 1

    before = _core.thread_handle_stats()
    seen = {}

    def work():
        try:
            for b in (1, 2, 4, 8, 8):
                kern.workspace_for(b, 0, 3)
            kern.set_plan(Plan(8, (Chunk(4, 0, 3, 0.0, 0), Chunk(4, 0, 3, 0.0, 0))))
            seen.update(_core.thread_handle_stats())
        except Exception as e:      # reported below, in the test's thread
            seen["error"] = e

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert "error" not in seen, seen.get("error")
    assert seen["on_thread"] == 1 and seen["created_on_thread"] == 1, seen
    # the pthread key destructor runs after the Python thread state is gone: wait for it
    deadline = time.monotonic() + 10
    while (_core.thread_handle_stats()["destroyed"] < before["destroyed"] + 1
           and time.monotonic() < deadline):
        time.sleep(0.01)
    after = _core.thread_handle_stats()
    assert after["destroyed"] >= before["destroyed"] + 1, (before, after)
    assert after["created"] >= before["created"] + 1


def test_unsupported_algorithm_falls_back(tmp_path):
    """A plan naming an algorithm cuDNN rejects is dropped and the kernel planned again."""
    from ucudnn.measure import runtime
    from ucudnn.measure.planner_state import planner_state
    from ucudnn.plan.table import AlgoPerf
    from ucudnn.plan.settings import PlanSettings
    shape = ConvShape(64, 28, 28, 64, 3, 3, 1, 1)
    kern = _core.Kernel(shape, "fwd", 16, "float32", "fma", "fallback")
    runtime.prepare_kernel(kern, PlanSettings(policy="undivided", limit=64 << 20, math="fma",
                                              cache_path=str(tmp_path / "c.sqlite")))
    # a fake, impossibly fast entry for an algorithm number cuDNN does not have
    table = planner_state(kern).bench
    table[16] = [AlgoPerf(99, 0.0001, 0, 3)] + table[16]
    plan = runtime.replan_kernel(kern, 64 << 20)
    assert all(c.algo != 99 for c in plan.chunks)
    assert kern.plan is plan


def test_ilp_divides_budget_among_live_kernels(tmp_path):
    """The network path of the C API (ucudnn_net_plan: runtime.plan_net): the live kernels of
    a net planned together, one budget for all, every plan resolved by cuDNN."""
    from ucudnn.measure import runtime
    from ucudnn.measure.live import _baseline
    from ucudnn.measure.planner_state import planner_state
    from ucudnn.plan.layers import LayerSpec
    from ucudnn.plan.settings import PlanSettings
    layers = [LayerSpec("ilp0", 64, 64, 28, 28, 64, 3, 3, pad=1, bwd_data=False),
              LayerSpec("ilp1", 64, 128, 14, 14, 128, 3, 3, pad=1, bwd_data=False),
              LayerSpec("ilp2", 64, 64, 56, 56, 128, 1, 1, stride=2, bwd_data=False)]
    budget = 24 << 20
    s = PlanSettings(optimizer="ilp", budget=budget, math="fma",
                     cache_path=str(tmp_path / "c.sqlite"))
    live = runtime.plan_net(layers, {l.name: s for l in layers})
    kernels = [live.kernels[k.layer, k.op] for k in live.plan.kernels]
    assert len(kernels) == 6
    assert all(k.plan is not None and planner_state(k).bench for k in kernels)
    assert sum(k.workspace_size for k in kernels) <= budget
    assert [k.plan for k in kernels] == [kp.plan for kp in live.plan.kernels]
    # each ILP plan is no slower than the undivided plan at the same share of the budget
    share = budget // len(kernels)
    assert live.plan.time_ms <= sum(_baseline(k, share).time_ms for k in kernels) + 1e-9
    # and still computes the same result as the undivided zero-workspace algorithm
    k = live.kernels["ilp0", "fwd"]
    x = torch.randn(64, 64, 28, 28, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    y = torch.zeros(64, 64, 28, 28, device="cuda")
    _run(k, x, w, y)
    _close(y, F.conv2d(x.double(), w.double(), padding=1).float(), "ILP plan fwd", 1e-5)


def test_benchmark_workspace_is_the_largest_need_under_the_cap():
    """Note [Benchmark workspace]: with the legacy family alone the benchmark holds only the
    largest workspace an algorithm asks for within the cap, records the cap as offered, and
    every algorithm cudnnFind ran fits in it."""
    N, C, H, W, K, R, S, pad, stride, dil = SHAPES["alexnet_conv3"]
    shape = ConvShape(C, H, W, K, R, S, pad, pad, stride, stride, dil, dil)
    kern = _core.Kernel(shape, "fwd", 64, "float32", "default", "sized")
    cap = 8 << 30
    res = kern.benchmark([16, 64], 1, workspace_cap=cap)
    assert kern.last_benchmark_workspace == cap
    need = kern._legacy_need([16, 64], cap)
    assert 0 < need < cap
    ran = [r for recs in res.values() for r in recs if r[1] == 0]
    assert ran and max(r[3] for r in ran) <= need
    assert kern.last_benchmark_held == max(1 << 20, need)
    # a cap below the largest need: the offer is the cap, and what needs more is left out
    small = need // 2
    res = kern.benchmark([16, 64], 1, workspace_cap=small)
    assert kern.last_benchmark_workspace == small
    assert all(r[3] <= small for recs in res.values() for r in recs if r[1] == 0)


def test_benchmark_workspace_of_both_families_is_their_largest_need():
    """Note [Benchmark workspace] with the engine configs too: their plans are built before
    the workspace is allocated, so the benchmark holds the largest need of either family
    under the cap -- far below an 8 GiB cap -- and still records the cap as offered."""
    N, C, H, W, K, R, S, pad, stride, dil = SHAPES["alexnet_conv3"]
    shape = ConvShape(C, H, W, K, R, S, pad, pad, stride, stride, dil, dil)
    kern = _core.Kernel(shape, "bwd_filter", 64, "float32", "default", "sized both")
    cap, sizes = 8 << 30, [16, 64]
    res = kern.benchmark(sizes, 1, workspace_cap=cap, families=("legacy", "graph"))
    assert kern.last_benchmark_workspace == cap
    configs = [r for recs in res.values() for r in recs if r[5] and r[3] > 0]
    assert configs, "no engine config with a workspace at these sizes"
    held = kern.last_benchmark_held
    assert held == max(1 << 20, kern._legacy_need(sizes, cap), max(r[3] for r in configs))
    assert held < cap
    assert all(r[3] <= held for recs in res.values() for r in recs if r[1] == 0)


def test_held_benchmark_buffers_serve_calls_in_rounds():
    """Kernel.hold_benchmark_buffers (Note [Pruned search at run time]): sizes measured in
    rounds with the buffers kept find the same algorithms as one call, offered the same
    workspace; released, the next call sets up its own again."""
    N, C, H, W, K, R, S, pad, stride, dil = SHAPES["alexnet_conv3"]
    shape = ConvShape(C, H, W, K, R, S, pad, pad, stride, stride, dil, dil)
    kern = _core.Kernel(shape, "fwd", 64, "float32", "fma", "held")

    def algos(res):
        return {b: {r[0] for r in recs if r[1] == 0} for b, recs in res.items()}

    whole = algos(kern.benchmark([8, 16, 64], 1))
    offered = kern.last_benchmark_workspace
    kern.hold_benchmark_buffers(True)
    rounds = {**algos(kern.benchmark([64], 1)), **algos(kern.benchmark([8, 16], 1))}
    assert kern.last_benchmark_workspace == offered
    kern.hold_benchmark_buffers(False)
    assert rounds == whole
    assert algos(kern.benchmark([8], 1)) == {8: whole[8]}
