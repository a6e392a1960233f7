"""The patched Caffe on a GPU: `caffe time` with and without ucudnn_param, equivalence of
results (tools/ucudnn_compare), bad input, and the layer gtests (workspace fallback).

Needs a Caffe built by scripts/build_caffe.sh (third_party/caffe/build, or the build folder in
$UCUDNN_CAFFE_BUILD) and a GPU; skipped otherwise. The embedded interpreter of Caffe is given
this environment's packages and the same ucudnn (tests/support/child_env.py).
"""
import itertools
import json
import re
import subprocess
import pytest

from gtests import run_gtests
from repo_paths import NETS
from ucudnn.caffe.log import parse_caffe_time
from ucudnn.caffe.records import ENV as RECORDS_ENV
from ucudnn.caffe.records import kernel_plans, read_records, summarize

pytestmark = pytest.mark.gpu

MIB = 1 << 20


@pytest.fixture(scope="module")
def caffe(caffe_tools, tmp_path_factory):
    from ucudnn.caffe.proto import load_caffe_pb2
    return dict(caffe_tools, env=dict(caffe_tools["env"], UCUDNN_LOG="INFO"),
                pb2=load_caffe_pb2(), dir=tmp_path_factory.mktemp("nets"))


def _net(caffe, name, batch, **ucudnn):
    """prototxt/NAME at mini-batch ``batch``, with net-wide ucudnn_param ``ucudnn`` (none:
    stock Caffe); the written path."""
    from ucudnn.caffe.params import set_param
    from ucudnn.caffe.proto import read_net, write_net
    net = read_net(caffe["pb2"], str(NETS / f"{name}.prototxt"))
    for shape in net.layer[0].dummy_data_param.shape:
        shape.dim[0] = batch
    if ucudnn:
        set_param(net.ucudnn_param, ucudnn)
    tag = "_".join(f"{k}{v}" for k, v in sorted(ucudnn.items())) or "stock"
    path = caffe["dir"] / f"{name}_{batch}_{tag}.prototxt"
    write_net(net, str(path))
    return path


_RUNS = itertools.count()


def _run(caffe, args, timeout=900, env=None, records=None):
    """Run a Caffe tool; ``records``: a list that receives the plan records the core wrote
    ($UCUDNN_RECORDS, a fresh file per run)."""
    e = dict(caffe["env"], **(env or {}))
    path = caffe["dir"] / f"records_{next(_RUNS)}.jsonl"
    e[RECORDS_ENV] = str(path)
    r = subprocess.run([str(caffe["bin"] / args[0]), *map(str, args[1:])],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e,
                       timeout=timeout)
    if records is not None:
        records.extend(read_records(path))
    return r.returncode, r.stdout


def _solver_text(model, **fields):
    """A short fixed-rate SGD solver for ``model``; ``fields`` add or override."""
    f = {"net": f'"{model}"', "base_lr": 0.001, "lr_policy": '"fixed"', "momentum": 0.9,
         "max_iter": 4, "display": 1, "snapshot_after_train": "false", "solver_mode": "GPU"}
    f.update(fields)
    return "".join(f"{k}: {v}\n" for k, v in f.items())


def _train(caffe, tmp_path, model, gpus, env=None, **fields):
    """`caffe train -gpu GPUS` with :func:`_solver_text`; its output and plan records, once
    training ran to the end."""
    solver = tmp_path / "solver.prototxt"
    solver.write_text(_solver_text(model, **fields))
    recs = []
    rc, out = _run(caffe, ["caffe", "train", "-solver", solver, "-gpu", gpus], timeout=900,
                   env=env, records=recs)
    assert rc == 0, out[-4000:]
    assert "Optimization Done" in out
    return out, recs


def _conv_layers(caffe, name):
    """The net's convolution layers: name -> whether their backward-data kernel runs, i.e.
    whether a bottom is computed by the net rather than read from its input layer (Caffe
    plans backward-data only then: Note [ucudnn in Caffe] in caffe_patch/0002)."""
    from ucudnn.caffe.proto import read_net
    net = read_net(caffe["pb2"], str(NETS / f"{name}.prototxt"))
    inputs = {t for l in net.layer if l.type in ("DummyData", "Data", "Input") for t in l.top}
    return {l.name: not set(l.bottom) <= inputs for l in net.layer if l.type == "Convolution"}


@pytest.mark.parametrize("name", ["alexnet", "resnet18"])
def test_caffe_time_with_and_without_ucudnn(caffe, name):
    recs = []
    rc, out = _run(caffe, ["caffe", "time", "-model", _net(caffe, name, 64), "-iterations", 3,
                           "-gpu", 0], records=recs)
    assert rc == 0, out[-4000:]
    stock = parse_caffe_time(out)
    assert recs == [] and "ucudnn" not in out

    model = _net(caffe, name, 64, policy="powerOfTwo", limit=64 * MIB)
    rc, out = _run(caffe, ["caffe", "time", "-model", model, "-iterations", 3, "-gpu", 0],
                   records=recs)
    assert rc == 0, out[-4000:]
    t = parse_caffe_time(out)
    plans = summarize(recs)
    convs = _conv_layers(caffe, name)
    assert sorted({k.layer for k in plans.kernels.values()}) == sorted(convs)
    for layer, bwd_data in convs.items():
        assert (f"{layer}/bwd_data" in plans.kernels) == bwd_data, layer
        for op in ("fwd", "bwd_filter") + (("bwd_data",) if bwd_data else ()):
            k = plans.kernels[f"{layer}/{op}"]
            assert k.predicted_ms > 0 and k.ws_bytes <= 64 * MIB, k
            assert k.bench_s is not None and k.plan_s is not None
            assert k.sizes_benchmarked + k.sizes_cached == k.sizes
            assert k.batch == 64 and k.device == 0
    # every benchmark is recorded, and the grouped layers' instances are Caffe's group count
    assert {(r["layer"], r["op"]) for r in recs if r["kind"] == "bench"} == {
        (k.layer, k.op) for k in plans.kernels.values()}
    if name == "alexnet":
        assert plans.kernels["conv2/fwd"].instances == 2
    assert set(t.layers) == set(stock.layers)
    print(f"{name} batch 64: stock {stock.median_ms:.2f} ms, powerOfTwo 64 MiB "
          f"{t.median_ms:.2f} ms per forward-backward")


# strict fp32: FMA math, and no Winograd (up to 2e-2 off for AlexNet's 5x5 conv2 on the
# H200 -- cuDNN's algorithm, not micro-batching; see ucudnn.plan.dp.WINOGRAD_ALGOS)
STRICT = "math: FMA exclude_winograd: true benchmark_repeats: 1"
FMA = f"{STRICT} workspace_limit: {64 * MIB}"
VARIANTS = [f"policy: UNDIVIDED {FMA}", f"policy: POWER_OF_TWO {FMA}", f"policy: ALL {FMA}",
            f"policy: POWER_OF_TWO optimizer: ILP {FMA}",
            f"policy: POWER_OF_TWO optimizer: SHARED {FMA}",
            # the variants above plan with both families (the default); the legacy
            # algorithms alone, and the graph API's engine configs alone
            f"policy: POWER_OF_TWO engines: LEGACY {FMA}",
            f"policy: POWER_OF_TWO optimizer: SHARED engines: GRAPH {FMA}",
            f"policy: POWER_OF_TWO micro_batch_size: 8 micro_batch_size: 4 {STRICT} "
            "workspace_limit: 0"]


def _split_variant(caffe, name, batch):
    """A powerOfTwo variant under which one kernel of ``name`` (its second convolution layer,
    all three ops) is micro-batched whatever this GPU's timings: it plans from a benchmark
    cache seeded for it (Note [Forcing a split] in tests/support/seeded_split.py; which limit
    splits a kernel on real timings depends on the GPU, cuDNN and benchmark noise).
    ``(variant, layer, plan text)``."""
    from seeded_split import seed_split, split_setting
    from ucudnn.caffe.prototxt import read_prototxt
    from ucudnn.plan.conv import ConvShape
    layer = read_prototxt(NETS / f"{name}.prototxt", batch=batch)[1]
    cache = caffe["dir"] / f"split_{name}_{batch}.sqlite"
    plan = seed_split(cache, ConvShape.from_layer(layer), batch, math="fma")
    return split_setting(cache, 64 * MIB, STRICT), layer.name, plan


# AlexNet at 128: on the H200 no limit from 256 KiB to 48 MiB splits any AlexNet kernel at
# batch 32 (measured 2026-11-30); at 256 most kernels split at 8 MiB with default math
# (results/h200/reproduce/)
@pytest.mark.parametrize("name,batch", [("alexnet", 128), ("resnet18", 32)])
def test_results_equal_stock_caffe(caffe, name, batch):
    """Each policy and the ILP against stock Caffe, strict fp32 everywhere
    (NVIDIA_TF32_OVERRIDE=0 for stock Caffe's cuDNN and cuBLAS, math FMA for ucudnn): the
    loss after two passes (gradients accumulated), and every convolution layer's top data,
    bottom diff and parameter gradients on the same inputs from the net (see Note [Comparing
    nets] in tools/ucudnn_compare.cpp for why blobs are not compared across whole nets).
    One more variant plans one layer micro-batched (:func:`_split_variant`)."""
    recs = []
    split, split_layer, split_plan = _split_variant(caffe, name, batch)
    variants = VARIANTS + [split]
    rc, out = _run(caffe, ["ucudnn_compare", "--model", _net(caffe, name, batch),
                           "--reference", "stock", "--variants", ";".join(variants),
                           "--iterations", 2, "--tolerance", 1e-4, "--gpu", 0],
                   env={"NVIDIA_TF32_OVERRIDE": "0"}, records=recs)
    lines = [l for l in out.splitlines() if l.startswith("ucudnn_compare:")]
    print("\n".join(lines))
    assert rc == 0, out[-6000:]
    assert len([l for l in lines if ": OK" in l]) == len(variants)
    assert "all variants match" in out
    # the plans really split the mini-batch: the split variant's layer, all three ops
    plans = {(k.layer, k.op, k.plan) for k in kernel_plans(recs)}
    assert {(split_layer, op, split_plan) for op in ("fwd", "bwd_filter", "bwd_data")} <= plans, \
        sorted(p for p in plans if p[0] == split_layer)


BAD = [
    ("policy: FOO", "policy"),
    ("workspace_limit: -1", "ucudnn_param.workspace_limit"),
    ("optimizer: ILP total_workspace: -5", "ucudnn_param.total_workspace"),
    ("micro_batch_size: 0", "ucudnn_param.micro_batch_size"),
    ("benchmark_repeats: 0", "ucudnn_param.benchmark_repeats"),
    ("math: FAST", "math"),
    # the shared arena is net-wide (Note [Shared arena in Caffe]); a budget no GPU has
    ("optimizer: SHARED", "ucudnn_param.optimizer"),
    ("optimizer: ILP total_workspace: 1000000000000000", "ucudnn_param.total_workspace"),
]


@pytest.mark.parametrize("bad,field", BAD, ids=[b for b, _ in BAD])
def test_bad_ucudnn_param_stops_naming_layer_and_field(caffe, bad, field):
    model = _net(caffe, "alexnet", 8, policy="powerOfTwo", limit=8 * MIB)
    text = model.read_text()
    # put the bad value on conv2 only (text edit: the writer refuses invalid values)
    i = text.index('name: "conv2"')
    j = text.index("convolution_param", i)
    model = model.with_name("bad.prototxt")
    model.write_text(text[:j] + f"ucudnn_param {{ {bad} }}\n  " + text[j:])
    rc, out = _run(caffe, ["caffe", "time", "-model", model, "-iterations", 1, "-gpu", 0],
                   timeout=300)
    assert rc != 0, out[-3000:]
    errors = [l for l in out.splitlines() if "conv2" in l and field in l]
    assert errors, out[-3000:]
    print(errors[0])


@pytest.mark.parametrize("name", ["alexnet", "resnet18"])
def test_shared_arena_in_caffe_time(caffe, name):
    """Note [Shared arena in Caffe]: with the net-wide SHARED optimizer the net holds one arena
    -- the largest pass of one layer, as the plan records say (ucudnn/caffe/records.py) --
    within the budget (8 MiB x group calls), every layer's passes within it, and the run
    ends normally."""
    recs = []
    model = _net(caffe, name, 64, policy="powerOfTwo", optimizer="shared", limit=8 * MIB)
    rc, out = _run(caffe, ["caffe", "time", "-model", model, "-iterations", 3, "-gpu", 0],
                   records=recs)
    assert rc == 0, out[-4000:]
    plans = summarize(recs)
    calls = sum(k.instances for k in plans.kernels.values())
    arenas = [int(m) for m in re.findall(r"ucudnn: shared arena on GPU 0: (\d+) B", out)]
    assert arenas, out[-3000:]
    assert arenas[-1] == plans.workspace_bytes() <= 8 * MIB * calls
    assert all(k.optimizer == "shared" for k in plans.kernels.values())
    # the arena is used: some kernel got more than the 8 MiB a DP kernel would
    assert max(k.ws_bytes for k in plans.kernels.values()) > 8 * MIB
    t = parse_caffe_time(out)
    print(f"{name} batch 64, shared arena of {arenas[-1] / MIB:.1f} MiB (budget "
          f"{8 * calls} MiB): {t.median_ms:.2f} ms per forward-backward")


def test_shared_arena_budget_beyond_the_gpu_stops(caffe):
    model = _net(caffe, "alexnet", 8, policy="powerOfTwo", optimizer="shared",
                 budget=10 ** 15)
    rc, out = _run(caffe, ["caffe", "time", "-model", model, "-iterations", 1, "-gpu", 0],
                   timeout=300)
    assert rc != 0
    errors = [l for l in out.splitlines() if "ucudnn_param.total_workspace" in l
              and "more than the GPU's" in l and "layer 'conv1'" in l]
    assert errors, out[-3000:]


def test_layer_gtests(caffe):
    """The gtests of the patch (workspace allocation fallback with the GPU's memory really
    taken; groups and two bottoms; dilated layers against im2col's, NCHW and NHWC; 3-D ones) and
    Caffe's own cuDNN convolution tests."""
    r = run_gtests(caffe, "UcudnnConvolutionLayerTest*:CuDNNConvolutionLayerTest*")
    print("\n".join(l for l in r.stdout.splitlines()
                    if "workspace:" in l or "plan:" in l or "fwd " in l or "[  " in l))
    assert r.returncode == 0, r.stdout[-6000:]
    for test in ("TestFailedWorkspaceAllocationFallsBack", "TestDilatedEqualsIm2col",
                 "TestDilatedNhwcEqualsIm2col", "TestConv3dEqualsIm2col"):
        assert f"[       OK ] UcudnnConvolutionLayerTest.{test}" in r.stdout, test
    assert re.search(r"\[  PASSED  \] \d+ tests", r.stdout)


@pytest.mark.gpus(2)
@pytest.mark.parametrize("optimizer", ["dp", "shared"])
def test_multi_gpu_training(caffe, tmp_path, optimizer):
    """`caffe train -gpu 0,1` (NCCL, one solver thread per GPU): every GPU's layers plan in
    their own thread through the embedded interpreter, and training runs to the end; with
    the shared optimizer, one arena per GPU. From an empty cache every kernel is benchmarked
    once, not once per solver: the root solver's net is set up (and planned) before the
    other GPUs' solvers start, and they find its measurements in the cache (same GPU model)."""
    if "USE_NCCL:BOOL=ON" not in (caffe["build"] / "CMakeCache.txt").read_text():
        pytest.skip("Caffe built without NCCL (scripts/build_caffe.sh finds it where installed)")
    model = _net(caffe, "alexnet", 32, policy="powerOfTwo", limit=64 * MIB, optimizer=optimizer)
    out, recs = _train(caffe, tmp_path, model, "0,1",
                       env={"UCUDNN_CACHE": str(tmp_path / "empty.sqlite")})
    benched = [(r["layer"], r["op"]) for r in recs
               if r["kind"] == "bench" and r["sizes_benchmarked"]]
    cached = [r for r in recs if r["kind"] == "bench" and not r["sizes_benchmarked"]]
    assert benched and len(benched) == len(set(benched)), benched
    assert cached and {r["device"] for r in cached} >= {1}
    if optimizer == "shared":
        assert {int(g) for g in re.findall(r"ucudnn: shared arena on GPU (\d+):", out)} == {0, 1}
    conv1 = [r for r in recs if r["kind"] == "kernel" and (r["layer"], r["op"]) == ("conv1", "fwd")]
    # planned by each GPU's solver thread, on its own device
    assert len({r["thread"] for r in conv1}) >= 2 and {r["device"] for r in conv1} >= {0, 1}


@pytest.mark.gpus(2)
def test_bench_devices_inside_caffe(caffe, tmp_path):
    """$UCUDNN_BENCH_DEVICES=0,1: before its first ucudnn layer the net's kernels are measured
    over both GPUs (Note [Benchmarks over several GPUs in one process]), each once, and the
    layers, planning on GPU 0, read every measurement from the cache."""
    model = _net(caffe, "resnet18", 32, policy="all", limit=64 * MIB)
    recs = []
    rc, out = _run(caffe, ["caffe", "time", "-model", model, "-iterations", 2, "-gpu", 0],
                   env={"UCUDNN_CACHE": str(tmp_path / "empty.sqlite"),
                        "UCUDNN_BENCH_DEVICES": "0,1"}, records=recs)
    assert rc == 0, out[-4000:]
    bench = [r for r in recs if r["kind"] == "bench"]
    # the prefetch: each distinct kernel (shape, op) measured once, on both GPUs together
    measured = [(json.dumps(r["shape"], sort_keys=True), r["op"]) for r in bench
                if r["sizes_benchmarked"]]
    assert measured and len(measured) == len(set(measured)), measured
    assert {r["device"] for r in bench if r["sizes_benchmarked"]} == {0, 1}
    # the layers, planning on GPU 0 afterwards: every kernel's benchmark read the cache
    planned = {(k.layer, k.op) for k in kernel_plans(recs)}
    from_cache = {(r["layer"], r["op"]) for r in bench if not r["sizes_benchmarked"]}
    assert planned and planned <= from_cache, planned - from_cache
    assert {r["device"] for r in recs if r["kind"] == "kernel"} == {0}


def test_bad_bench_devices_stop_naming_the_variable(caffe, tmp_path):
    model = _net(caffe, "alexnet", 8, policy="powerOfTwo", limit=8 * MIB)
    rc, out = _run(caffe, ["caffe", "time", "-model", model, "-iterations", 1, "-gpu", 0],
                   env={"UCUDNN_BENCH_DEVICES": "0,0"})
    assert rc != 0
    assert "$UCUDNN_BENCH_DEVICES: expected distinct GPU indices" in out, out[-3000:]


@pytest.mark.parametrize("setting", [dict(policy="powerOfTwo", limit=8 * MIB),
                                     dict(policy="powerOfTwo", optimizer="ilp", limit=8 * MIB)],
                         ids=["dp", "ilp"])
def test_train_and_test_nets_with_different_batch_sizes(caffe, tmp_path, setting):
    """`caffe train` with a TEST phase: the train net (batch 64) and the test net (batch 16)
    plan their own kernels for their own batch, and training and testing run."""
    from ucudnn.caffe.params import set_param
    from ucudnn.caffe.proto import read_net, write_net
    pb2 = caffe["pb2"]
    net = read_net(pb2, str(NETS / "cifar10.prototxt"))
    data = net.layer[0]
    test_data = pb2.LayerParameter()
    test_data.CopyFrom(data)
    test_data.name = "cifar_test"
    for layer, phase, batch in ((data, pb2.TRAIN, 64), (test_data, pb2.TEST, 16)):
        layer.ClearField("include")
        layer.include.add().phase = phase
        for shape in layer.dummy_data_param.shape:
            shape.dim[0] = batch
    net.layer.insert(1, test_data)
    set_param(net.ucudnn_param, setting)
    model = tmp_path / "train_test.prototxt"
    write_net(net, str(model))
    out, recs = _train(caffe, tmp_path, model, "0", max_iter=6, test_iter=2, test_interval=3)
    assert "Test net output #0:" in out
    batches = {k.batch for k in kernel_plans(recs) if (k.layer, k.op) == ("conv1", "fwd")}
    assert batches == {64, 16}, batches


def _fusion_check(caffe, net, *fusions):
    """``net_fusion_check NET --gpu FUSIONS...``: its exit status and output."""
    tool = caffe["bin"] / "net_fusion_check"
    if not tool.is_file():
        pytest.skip(f"no {tool} (scripts/build_caffe.sh builds it)")
    r = subprocess.run([str(tool), str(net), "--gpu", *fusions], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, timeout=600,
                       env=dict(caffe["env"], GLOG_minloglevel="2"))
    print(r.stdout)
    return r.returncode, r.stdout


def test_eltwise_relu_fusion_gives_the_same_results_on_the_gpu(caffe):
    """caffe_patch/0010 on the GPU (Note [Eltwise + ReLU fusion]): ResNet-18 at batch 2, then
    6, in Caffe's own GPU layers (engine CAFFE: no cuDNN algorithm whose sums change order
    from run to run), with ``fusion { eltwise_relu: true }`` against every fusion off: every
    blob's data, each loss and every parameter gradient identical (``net_fusion_check
    --gpu``)."""
    from repo_paths import REPO
    net = REPO / "tests" / "data" / "cpu_nets" / "resnet18_cpu.prototxt"
    rc, out = _fusion_check(caffe, net, "eltwise_relu")
    assert out.startswith("8 ReLU layer(s) fused into an Eltwise layer, 0 into"), out
    assert rc == 0 and out.rstrip().endswith("IDENTICAL"), out


@pytest.mark.parametrize("share_diffs", [False, True])
def test_split_sum_fusion_gives_the_same_results_on_the_gpu(caffe, share_diffs):
    """caffe_patch/0010 on the GPU (Note [Split sum fusion]): ResNet-18 as above, the Eltwise
    + ReLU fusion with and without its Split's sum folded in, against every fusion off: every
    blob, loss and parameter gradient identical. Seven Splits fold (every residual block's
    output but the last, which goes to pool5). With ``share_diffs`` the Splits' top diffs
    must stay alive until the Eltwise layers' backward (Note [Shared activation gradients])."""
    from repo_paths import REPO
    from ucudnn.caffe.proto import read_net, write_net
    net = read_net(caffe["pb2"], str(REPO / "tests" / "data" / "cpu_nets" /
                                     "resnet18_cpu.prototxt"))
    net.share_diffs = share_diffs
    path = caffe["dir"] / f"resnet18_split_sum_{share_diffs}.prototxt"
    write_net(net, str(path))
    rc, out = _fusion_check(caffe, path, "eltwise_relu", "split_sum")
    assert out.startswith("8 ReLU layer(s) fused into an Eltwise layer, 0 into a BatchNorm "
                          "layer; 7 Split layer(s) summed by an Eltwise layer\n"), out
    assert rc == 0 and out.rstrip().endswith("IDENTICAL"), out


def _resnet18_fused_bn(caffe, tag, global_stats, share_diffs):
    """The checks' ResNet-18 (batch 2) with its 20 BatchNorm layers on engine FUSED (and
    ``use_global_stats`` where asked) and the net's ``share_diffs``, written as TAG.prototxt;
    its path."""
    from repo_paths import REPO
    from ucudnn.caffe.proto import read_net, write_net
    pb2 = caffe["pb2"]
    net = read_net(pb2, str(REPO / "tests" / "data" / "cpu_nets" / "resnet18_cpu.prototxt"))
    bns = [l for l in net.layer if l.type == "BatchNorm"]
    assert len(bns) == 20
    for layer in bns:
        layer.batch_norm_param.engine = pb2.BatchNormParameter.FUSED
        if global_stats:
            layer.batch_norm_param.use_global_stats = True
    net.share_diffs = share_diffs
    path = caffe["dir"] / f"{tag}.prototxt"
    write_net(net, str(path))
    return path


@pytest.mark.parametrize("global_stats, share_diffs", [(False, False), (True, False),
                                                      (False, True)])
def test_batch_norm_relu_fusion_gives_the_same_results_on_the_gpu(caffe, global_stats,
                                                                  share_diffs):
    """caffe_patch/0010 on the GPU (Note [BatchNorm + ReLU fusion]): ResNet-18 as above but
    with FUSED BatchNorm (deterministic: its sums finish in a fixed order), both fusions on
    against both off: every blob, loss and parameter gradient identical. With
    ``use_global_stats`` the forward applies the ReLU and the ReLU layer runs its own
    backward; without, the training backward masks the gradient itself. With
    ``share_diffs`` (caffe_patch/0007) both nets share activation gradients, as the fastest
    setting runs them."""
    path = _resnet18_fused_bn(caffe, f"resnet18_fused_bn_{global_stats}_{share_diffs}",
                              global_stats, share_diffs)
    rc, out = _fusion_check(caffe, path)
    # conv1's and the first of each block's BatchNorm + Scale take the ReLU after them; the
    # last of each block's is applied by its Eltwise layer (Note [BatchNorm + Eltwise fusion])
    assert out.startswith("8 ReLU layer(s) fused into an Eltwise layer, 9 into a BatchNorm "
                          "layer; 7 Split layer(s) summed by an Eltwise layer\n"
                          "8 BatchNorm layer(s) applied by an Eltwise layer\n"), out
    assert rc == 0 and out.rstrip().endswith("IDENTICAL"), out


@pytest.mark.parametrize("global_stats, share_diffs, split_sum", [
    (False, False, False), (False, False, True), (False, True, True), (True, False, True)])
def test_batch_norm_eltwise_fusion_gives_the_same_results_on_the_gpu(caffe, global_stats,
                                                                     share_diffs, split_sum):
    """caffe_patch/0010 on the GPU (Note [BatchNorm + Eltwise fusion]): ResNet-18 with FUSED
    BatchNorm as above; the last BatchNorm + Scale of each of its 8 blocks applied by the
    block's Eltwise SUM + ReLU, against every fusion off: every other blob, each loss and
    every parameter gradient identical, and a forward stopped at each such Scale layer gives
    the BatchNorm's output, the rest of that iteration the same loss and gradients. The
    backward's gradient goes to the shortcut's diff, which with ``split_sum`` is computed from
    the Split's two diffs, and with ``share_diffs`` may share their buffers; with
    ``use_global_stats`` only the forward is fused."""
    path = _resnet18_fused_bn(
        caffe, f"resnet18_bn_eltwise_{global_stats}_{share_diffs}_{split_sum}", global_stats,
        share_diffs)
    fusions = ["eltwise_relu", "batch_norm_eltwise"] + (["split_sum"] if split_sum else [])
    rc, out = _fusion_check(caffe, path, *fusions)
    assert out.startswith(f"8 ReLU layer(s) fused into an Eltwise layer, 0 into a BatchNorm "
                          f"layer; {7 if split_sum else 0} Split layer(s) summed by an Eltwise "
                          f"layer\n8 BatchNorm layer(s) applied by an Eltwise layer\n"), out
    stops = [l for l in out.splitlines() if l.startswith("forward to ")]
    assert len(stops) == 8 and all("largest difference 0;" in l for l in stops), out
    assert rc == 0 and out.rstrip().endswith("IDENTICAL"), out


def test_layout_gtests(caffe):
    """The gtests of caffe_patch/0011 (test_layout.cpp: the net transform, the
    LayoutConversion layer with a gradient check, Pooling and FUSED BatchNorm in NHWC against
    NCHW on the same values) and Caffe's own pooling tests (0011 changes the pooling
    kernels)."""
    r = run_gtests(caffe, "Layout*:*PoolingLayerTest*")
    print("\n".join(l for l in r.stdout.splitlines() if l.startswith("[  ")))
    assert r.returncode == 0, r.stdout[-8000:]
    for name in ("LayoutTransformTest.ConversionsWhereTheLayoutsMeet",
                 "LayoutConversionLayerTest/3.TestForwardBackwardAndGradient",
                 "LayoutGpuTest/0.TestCaffePooling", "LayoutGpuTest/1.TestFusedBatchNorm",
                 "LayoutGpuTest/0.TestCuDNNAveragePooling"):
        assert f"[       OK ] {name}" in r.stdout, name


def _resnet18_ucudnn(caffe, share_diffs):
    """ResNet-18 at batch 2 (the checks' net) with its layers' own engines dropped (cuDNN
    convolutions through ucudnn, FUSED BatchNorm, Caffe's pooling), strict fp32 (math FMA: no
    TF32, so two layouts differ only in the order of their sums)."""
    from repo_paths import REPO
    from ucudnn.caffe.proto import read_net, write_net
    net = read_net(caffe["pb2"], str(REPO / "tests" / "data" / "cpu_nets" /
                                     "resnet18_cpu.prototxt"))
    for layer in net.layer:
        for field in ("convolution_param", "batch_norm_param", "pooling_param"):
            if layer.HasField(field):
                getattr(layer, field).ClearField("engine")
    net.ucudnn_param.math = caffe["pb2"].UcudnnParameter.FMA
    net.share_diffs = share_diffs
    path = caffe["dir"] / f"resnet18_ucudnn_fma_{share_diffs}.prototxt"
    write_net(net, str(path))
    return path


@pytest.mark.parametrize("share_diffs", [False, True])
def test_nhwc_net_gives_the_nchw_results_on_the_gpu(caffe, share_diffs):
    """caffe_patch/0011 (Note [NHWC in Caffe]): ResNet-18 with ``ucudnn_param.layout: NHWC``
    against the same net in NCHW, same weights and inputs, batch 2, 2 and 6 (a Reshape), both
    fusions on (Caffe's defaults), with and without share_diffs (``net_layout_check``, the
    rules of Note [Comparing nets] in tools/ucudnn_compare.cpp): the loss and every blob's
    data (transposed back where NHWC) within 1e-3 of the largest magnitude, and every
    Convolution, BatchNorm (its folded Scale and ReLU included) and Pooling layer that runs
    NHWC on the NCHW net's inputs: top data, bottom diff and parameter gradients likewise."""
    tool = caffe["bin"] / "net_layout_check"
    if not tool.is_file():
        pytest.skip(f"no {tool} (scripts/build_caffe.sh builds it)")
    r = subprocess.run([str(tool), str(_resnet18_ucudnn(caffe, share_diffs))],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=900, env=dict(caffe["env"], GLOG_minloglevel="2"))
    print(r.stdout[-3000:])
    assert r.returncode == 0 and "WITHIN" in r.stdout, r.stdout[-6000:]
    rounds = [l for l in r.stdout.splitlines() if l.startswith("round ")]
    assert len(rounds) == 3, r.stdout[-6000:]
    assert len([l for l in r.stdout.splitlines() if l.startswith("NHWC layers on the same "
                                                                 "inputs")]) == 3, r.stdout
    # every activation from conv1 to pool5: 20 convolutions' tops (BatchNorm, Scale and ReLU
    # in place), 8 Eltwise sums, 16 Split tops, pool1, pool5 and data_nhwc
    assert "\n47 blob(s) NHWC\n" in r.stdout, r.stdout[-3000:]
