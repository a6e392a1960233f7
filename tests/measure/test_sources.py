"""ucudnn.measure.sources: where plan gets its benchmark data (no printing, no GPU needed)."""
import dataclasses

import pytest

from repo_paths import SHIPPED
from ucudnn.measure import sources
from ucudnn.plan.layers import LayerSpec, read_layers
from ucudnn.plan.settings import PlanSettings
from ucudnn.vocab import InputError


@pytest.fixture
def no_gpu(no_gpu, monkeypatch, tmp_path):
    monkeypatch.setenv("UCUDNN_CACHE", str(tmp_path / "default.sqlite"))


def _renamed(net):
    return [dataclasses.replace(l, name=f"x_{l.name}") for l in read_layers(SHIPPED / f"{net}_layers.csv")]


def test_tables_by_layer_name(tmp_path):
    layers = read_layers(SHIPPED / "alexnet_layers.csv")
    got = sources.gather(layers, tables=[SHIPPED / "alexnet_bench.csv"])
    assert got.source.kind == "table" and ("conv2", "fwd") in got.benches and not got.notes
    with pytest.raises(sources.SourceError, match="no measurements for layer"):
        sources.gather(_renamed("alexnet"), tables=[SHIPPED / "alexnet_bench.csv"])


def test_a_table_lacking_an_op_of_a_layer_is_refused(tmp_path):
    layers = read_layers(SHIPPED / "alexnet_layers.csv")
    text = (SHIPPED / "alexnet_bench.csv").read_text().splitlines(keepends=True)
    table = tmp_path / "t.csv"
    table.write_text("".join(l for l in text if not l.startswith("conv5,bwd_filter,")))
    with pytest.raises(sources.SourceError, match=r"^--table: no measurements for conv5 "
                                                  r"bwd_filter \(a layer needs fwd and "):
        sources.gather(layers, tables=[table])


def test_shipped_data_by_kernel_shape_without_printing(no_gpu, tmp_path, capsys):
    layers = _renamed("resnet18")
    got = sources.gather(layers, policy="powerOfTwo")
    assert got.source.kind == "shipped" and got.source.complete
    assert got.source.as_dict()["gpu"] == "NVIDIA H200"
    assert {name for name, _ in got.benches} == {l.name for l in layers}
    assert got.notes and "shipped H200" in got.notes[0]
    assert capsys.readouterr() == ("", "")
    assert not (tmp_path / "default.sqlite").exists()
    # 'all' names sizes the shipped data lacks: answered, marked incomplete; refused if strict
    assert not sources.gather(layers, policy="all").source.complete
    with pytest.raises(sources.SourceError, match="not in the shipped data"):
        sources.gather(layers, policy="all", strict=True)


@pytest.mark.parametrize("asked, says", [({"dtype": "float64"}, "dtype 'float64'"),
                                         ({"gpu": "Tesla P100"}, "Tesla P100"),
                                         ({"math": "fma"}, "math 'fma'")])
def test_shipped_data_that_does_not_match_is_refused(no_gpu, asked, says):
    with pytest.raises(sources.SourceError) as e:
        sources.gather(read_layers(SHIPPED / "alexnet_layers.csv"), **asked)
    msg = str(e.value)
    assert isinstance(e.value, InputError)
    assert msg.startswith("no benchmark data for these layers: no GPU is visible")
    assert says in msg and "To plan them" in msg and "\n" not in msg


def test_unknown_kernel_is_named(no_gpu):
    layers = [LayerSpec("odd", 4, 3, 9, 9, 5, 3, 3)]
    with pytest.raises(sources.SourceError, match="lacks layer\\(s\\) odd"):
        sources.gather(layers)


def test_benchmark_on_the_gpu_then_the_cache(fake_core, tmp_path):
    layers = [dataclasses.replace(l, n=4) for l in read_layers(SHIPPED / "alexnet_layers.csv")]
    said = []
    got = sources.gather(layers, dtype="float16", math="fma", progress=said.append)
    assert got.source.kind == "benchmark" and got.source.dtype == "float16"
    assert {c.dtype for c in fake_core.calls} == {"float16"}
    assert {c.math for c in fake_core.calls} == {"fma"}
    assert said and said[0].startswith("benchmarking the missing micro-batch sizes on Fake GPU")
    n = len(fake_core.calls)
    assert n == 14                                  # every kernel once, all its sizes
    again = sources.gather(layers, dtype="float16", math="fma")
    assert again.source.kind == "cache" and len(fake_core.calls) == n
    assert {k: sorted(v) for k, v in again.benches.items()} == \
        {k: sorted(v) for k, v in got.benches.items()}
    # another dtype is another key: measured afresh
    sources.gather(layers, dtype="float32", math="fma")
    assert len(fake_core.calls) == 2 * n


def test_gather_net_per_layer_settings(fake_core):
    """Layers measured alike are gathered together; each group offered the workspace its
    plans may use (the DP's limit, the net-wide budget); Winograd left out where asked."""
    fake_core.model = lambda kern, b: [(0, 1.0 * b, 0), (6, 0.1 * b, 0), (1, 0.3 * b, b << 20)]
    layers = [LayerSpec("a", 4, 3, 8, 8, 4, 3, 3, bwd_data=False),
              LayerSpec("b", 4, 4, 8, 8, 4, 3, 3), LayerSpec("c", 4, 4, 8, 8, 8, 1, 1)]
    settings = {"a": PlanSettings(limit=2 << 20), "b": PlanSettings(math="fma", limit=3 << 20,
                                                                    exclude_winograd=True),
                "c": PlanSettings(optimizer="ilp", limit=1 << 20, policy="all")}
    got = sources.gather_net(layers, settings)
    assert set(got.benches) == {(l.name, op) for l in layers for op in l.ops}
    from ucudnn.plan.conv import ConvShape
    names = {ConvShape.from_layer(l): l.name for l in layers}
    by_layer = {}
    for c in fake_core.calls:
        by_layer.setdefault(names[c.shape], set()).add((c.sizes, c.math, c.workspace_cap))
    assert by_layer == {"a": {((1, 2, 4), "default", 2 << 20)},
                        "b": {((1, 2, 4), "fma", 3 << 20)},
                        # the net-wide group: limit x the net-wide kernels' calls
                        "c": {((1, 2, 3, 4), "default", (1 << 20) * 3)}}
    assert {p.algo for b in got.benches["b", "fwd"].values() for p in b} == {0, 1}
    assert 6 in {p.algo for p in got.benches["a", "fwd"][4]}
    assert got.source.kind == "benchmark"
    assert any("3 groups gathered separately" in n for n in got.notes)


def test_bench_needs_a_gpu(no_gpu, tmp_path):
    with pytest.raises(sources.SourceError, match="bench needs a GPU"):
        sources.benchmark_layers(read_layers(SHIPPED / "alexnet_layers.csv"),
                                 cache_path=tmp_path / "c.sqlite")
    assert not (tmp_path / "c.sqlite").exists()


def test_cache_import_export_roundtrip(no_gpu, tmp_path):
    layers = read_layers(SHIPPED / "alexnet_layers.csv")
    cache = tmp_path / "c.sqlite"
    n, rows, path, gpu, ver = sources.import_table(SHIPPED / "alexnet_bench.csv", layers,
                                                   cache_path=cache, gpu="G", cudnn_version=1)
    assert n > 0 and rows > n and (gpu, ver) == ("G", 1)
    out = sources.export_rows(layers, cache_path=cache)        # the only device in the cache
    assert len(out) == rows
    got = sources.gather(_renamed("alexnet"), cache_path=cache)
    assert got.source.kind == "cache" and got.source.gpu == "G"
    with pytest.raises(sources.SourceError, match="not in the layer list"):
        sources.import_table(SHIPPED / "alexnet_bench.csv", _renamed("alexnet"),
                             cache_path=cache, gpu="G", cudnn_version=1)
