"""ucudnn.measure.sources: where plan gets its benchmark data (no printing, no GPU needed)."""
import dataclasses
from pathlib import Path

import pytest

from ucudnn.measure import sources
from ucudnn.plan.network import LayerSpec, read_layers
from ucudnn.vocab import InputError

SHIPPED = Path(__file__).resolve().parents[1] / "ucudnn" / "data" / "h200"


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


def test_benchmark_on_the_gpu_then_the_cache(fake_gpu, tmp_path):
    layers = [dataclasses.replace(l, n=4) for l in read_layers(SHIPPED / "alexnet_layers.csv")]
    said = []
    got = sources.gather(layers, dtype="float16", math="fma", progress=said.append)
    assert got.source.kind == "benchmark" and got.source.dtype == "float16"
    assert set(fake_gpu.dtypes) == {"float16"} and all(c[5] == "fma" for c in fake_gpu.calls)
    assert said and said[0].startswith("benchmarking the missing micro-batch sizes on Fake GPU")
    n = len(fake_gpu.calls)
    again = sources.gather(layers, dtype="float16", math="fma")
    assert again.source.kind == "cache" and len(fake_gpu.calls) == n
    assert {k: sorted(v) for k, v in again.benches.items()} == \
        {k: sorted(v) for k, v in got.benches.items()}
    # another dtype is another key: measured afresh
    sources.gather(layers, dtype="float32", math="fma")
    assert len(fake_gpu.calls) == 2 * n


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
