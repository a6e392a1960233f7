"""`ucudnn bench`: measuring a net's kernels into the cache (on the fake core where a GPU would
measure), shards and --devices, the pruned search; refused without a GPU."""
import json


from cli_run import run
from ucudnn.cli import main
from ucudnn.plan.table import read_table


def test_bench_without_gpu(no_gpu, tmp_path):
    p = run(tmp_path, "bench", "--net", "alexnet", "--cache", tmp_path / "c.sqlite",
            "--csv", tmp_path / "o.csv", ok=False)
    assert p.returncode == 2
    assert p.stderr.startswith("ucudnn: error: bench needs a GPU: no GPU visible: ")
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "c.sqlite").exists()


def test_bench_and_plan_with_a_gpu(fake_core, tmp_path, capsys):
    """`bench` measures what the cache lacks; `plan` benchmarks what the default cache lacks,
    then finds it there. (The fake core's model: 1 MiB per sample for the fast algorithm.)"""
    cache, out = tmp_path / "c.sqlite", tmp_path / "o.csv"
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--csv", str(out),
                 "--repeats", "2", "--workspace-cap", "1GiB", "--engines", "legacy"]) == 0
    assert len(fake_core.calls) == 14                 # 5 layers x 3 ops, conv1 without bwd_data
    assert all(c.sizes == (1, 2, 4, 8, 16, 32, 64, 128, 256) and c.repeats == 2
               and c.workspace_cap == 1 << 30 for c in fake_core.calls)
    err = capsys.readouterr().err
    assert "[1/14] conv1 fwd: measuring 9 of 9 sizes" in err and "9/9 sizes done" in err
    assert len(read_table(out)) == 14 * 9 * 2
    # everything is cached now (for a cap of at most 1 GiB); --force measures again
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--workspace-cap",
                 "1GiB", "--engines", "legacy"]) == 0
    assert len(fake_core.calls) == 14
    assert "[14/14] conv5 bwd_filter: 9 sizes cached" in capsys.readouterr().err
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--ops", "fwd",
                 "--sizes", "4,256", "--force", "--engines", "legacy"]) == 0
    assert [c.sizes for c in fake_core.calls[14:]] == [(4, 256)] * 5
    # plan benchmarks what the default cache lacks, then finds it there
    capsys.readouterr()
    wide = ["plan", "--net", "resnet18", "--batch", "32", "--limit", "64MiB", "--json"]
    assert main(wide) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["source"]["kind"] == "benchmark" and first["batch"] == 32
    n_calls = len(fake_core.calls)
    assert n_calls == 19 + 32                        # 11 shapes x 3 ops - conv1 bwd_data
    # measured offering the workspace the plans may use: the limit
    assert {c.workspace_cap for c in fake_core.calls[19:]} == {64 << 20}
    assert main(wide) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["source"]["kind"] == "cache" and len(fake_core.calls) == n_calls
    assert second["totals"] == first["totals"]
    # 1 MiB per sample, 64 MiB limit: chunks of 32 fit whole
    assert all(k["micro_batches"] == [32] for k in second["kernels"])
    # the default limit is Caffe's 8 MiB: chunks of 8, from the cache (measured offering more)
    assert main(["plan", "--net", "resnet18", "--batch", "32", "--json"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert small["limit_bytes"] == 8 << 20 and small["source"]["kind"] == "cache"
    assert all(k["micro_batches"] == [8, 8, 8, 8] for k in small["kernels"])
    assert len(fake_core.calls) == n_calls
    # info shows the device
    assert main(["info"]) == 0
    assert "gpu: Fake GPU" in capsys.readouterr().out


def test_bench_shards_and_devices(fake_core, tmp_path, monkeypatch, capsys):
    """Note [Benchmarks over several GPUs]: --shard i/N measures one of N disjoint,
    equal-cost shares; --devices starts one `ucudnn bench --shard i/N` per GPU (here run in
    this process by a stand-in for Popen, which records each child's GPU) and, with --csv,
    reads the table back from the shared cache without measuring again."""
    import types

    from ucudnn.cli import main
    from ucudnn.measure import shipped
    from ucudnn.measure.for_plan import kernel_cost
    from ucudnn.measure.sources import shard_kernels
    from ucudnn.plan.settings import candidate_sizes
    layers = shipped.layers("resnet18")
    sizes_of = lambda l: candidate_sizes("all", l.n)                 # noqa: E731
    shards = shard_kernels(layers, ("fwd", "bwd_data", "bwd_filter"), sizes_of, 2)
    every = [(l.name, op) for l in layers for op in l.ops]
    assert sorted(shards[0] + shards[1]) == sorted(every) and not set(shards[0]) & set(shards[1])
    cost = {(l.name, op): kernel_cost(l, op, sizes_of(l)) for l in layers for op in l.ops}
    loads = [sum(cost[k] for k in s) for s in shards]
    assert max(loads) <= 1.1 * min(loads)                   # ResNet-18 splits evenly
    assert shard_kernels(layers, ("fwd", "bwd_data", "bwd_filter"), sizes_of, 2) == shards

    cache = tmp_path / "c.sqlite"
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--shard", "0/2",
                 "--engines", "legacy"]) == 0
    first = len(fake_core.calls)
    assert 0 < first < 14

    children = []

    def popen(cmd, env):
        assert cmd[1:4] == ["-m", "ucudnn", "bench"] and "--devices" not in cmd
        assert "--csv" not in cmd
        children.append((env["CUDA_VISIBLE_DEVICES"], cmd[cmd.index("--shard") + 1]))
        rc = main(cmd[3:])                                 # the child, in this process
        return types.SimpleNamespace(wait=lambda: rc, returncode=rc)

    monkeypatch.setattr("subprocess.Popen", popen)
    out = tmp_path / "t.csv"
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--devices", "2,3",
                 "--csv", str(out), "--engines", "legacy"]) == 0
    assert children == [("2", "0/2"), ("3", "1/2")]
    assert len(fake_core.calls) == 14                      # shard 0 was cached: shard 1 only
    assert len(read_table(out)) == 14 * 9 * 2             # read back, nothing measured
    assert "2 GPUs done" in capsys.readouterr().err

    monkeypatch.setattr("subprocess.Popen", lambda cmd, env: types.SimpleNamespace(
        wait=lambda: 3, returncode=3))
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--devices", "0,1"]) == 1
    assert "bench --devices: failed on GPU 0 (exit status 3), GPU 1" in capsys.readouterr().err
    for bad in (["--devices", "0,0"], ["--devices", "0", "--shard", "0/1"], ["--shard", "1/1"]):
        assert main(["bench", "--net", "alexnet", *bad]) == 2


def test_bench_pruned_search(fake_core, tmp_path, capsys):
    """`bench --policy all --search pruned --limit`: every kernel measured by the runtime's
    pruned search (what Caffe runs with UCUDNN_SEARCH=pruned), far fewer sizes than `all`;
    a second run finds everything in the cache; bad combinations are refused."""
    from ucudnn.cli import main
    cache = tmp_path / "c.sqlite"
    args = ["bench", "--net", "alexnet", "--cache", str(cache), "--policy", "all",
            "--search", "pruned", "--limit", "64MiB", "--engines", "legacy"]
    assert main(args) == 0
    sizes = [len(c.sizes) for c in fake_core.calls]
    assert sizes and sum(sizes) < 0.25 * 14 * 256
    assert {c.n for c in fake_core.calls} == {256}
    assert "[14/14] conv5 bwd_filter: pruned search looked at" in capsys.readouterr().err
    n = len(fake_core.calls)
    assert main(args) == 0 and len(fake_core.calls) == n
    for bad, msg in ((["--policy", "powerOfTwo", "--search", "pruned", "--limit", "8MiB"],
                      "--search pruned: only with --policy all"),
                     (["--policy", "all", "--search", "pruned"], "needs --limit"),
                     (["--policy", "all", "--limit", "8MiB"], "--limit: only with --search")):
        assert main(["bench", "--net", "alexnet", "--cache", str(cache), *bad]) == 2
        assert msg in capsys.readouterr().err


def test_bench_engines_both_measures_each_family_into_its_entry(fake_core, tmp_path):
    from fake_core import with_engine_configs
    from ucudnn.measure.cache import BenchCache
    from ucudnn.plan.table import read_table
    fake_core.model = with_engine_configs
    cache, out = tmp_path / "c.sqlite", tmp_path / "t.csv"
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--csv", str(out),
                 "--sizes", "4,256", "--engines", "BOTH"]) == 0
    assert sorted({c.families for c in fake_core.calls}) == [("graph",), ("legacy",)]
    assert len(fake_core.calls) == 2 * 14
    rows = read_table(out)
    assert {r.engine for r in rows} == {"", "eng7[k3=1]", "eng0"}
    with BenchCache(cache) as c:
        assert sorted({k.family for k in c.keys()}) == ["graph", "legacy"]
    n = len(fake_core.calls)
    assert main(["bench", "--net", "alexnet", "--cache", str(cache), "--sizes", "4,256",
                 "--engines", "graph"]) == 0
    assert len(fake_core.calls) == n                      # both families were cached
    assert main(["bench", "--net", "alexnet", "--engines", "fast"]) == 2
