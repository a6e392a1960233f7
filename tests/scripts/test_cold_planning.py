"""scripts/cold_planning.py on a CPU: the fake core replays the H200 tables of every size
(tests/data/h200_all_sizes) as cudnnFind, so the script's plumbing (the runtime's planning
through the real benchmark cache, the plan records it counts, the CSV row) runs as on the GPU
host."""
import csv
import lzma
from functools import lru_cache

import pytest

from fake_core import replay
from repo_paths import ALL_SIZES, load_script
from ucudnn.plan.table import group_by_kernel, parse_table


@lru_cache(maxsize=None)
def _table(net):
    path = ALL_SIZES / f"{net}_bench.csv.xz"
    with lzma.open(path, "rt") as f:
        return group_by_kernel(parse_table(f.read(), source=path.name))


class Asked:
    """The sizes the script's benchmarks asked the core for (one cudnnFind each)."""

    def __init__(self, core):
        self.core, self.start = core, 0

    def clear(self):
        self.start = len(self.core.calls)

    def sizes(self):
        return [b for c in self.core.calls[self.start:] for b in c.sizes]

    def __len__(self):
        return len(self.sizes())

    def __bool__(self):
        return bool(self.sizes())


@pytest.fixture
def script(fake_core, monkeypatch, tmp_path):
    """The script on the fake core replaying ResNet-18's tables; the benchmark cache is real
    (it serves identical shapes of other layers and the warm pass, as on the GPU)."""
    fake_core.gpus = ["replayed H200"]
    fake_core.model = replay(_table("resnet18"))
    from ucudnn.measure import records as rw
    # the script sets $UCUDNN_RECORDS for its runs: restored after the test
    monkeypatch.setenv(rw.ENV, str(tmp_path / "unused-records.jsonl"))
    return load_script("cold_planning"), Asked(fake_core)


def test_pruned_and_exhaustive_rows(script, tmp_path, capsys):
    mod, asked = script
    out = tmp_path / "cold.csv"
    for search in ("pruned", "exhaustive"):
        asked.clear()
        assert mod.main(["--net", "resnet18", "--policy", "all", "--search", search,
                         "--limit", "64MiB", "--csv", str(out)]) == 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["search"] for r in rows] == ["pruned", "exhaustive"]
    pruned, full = rows
    kernels = len(_table("resnet18"))          # every kernel the net plans (cold pass)
    assert int(full["sizes_benchmarked"]) == 256 * kernels
    assert int(pruned["sizes_benchmarked"]) <= 0.3 * 256 * kernels
    # the net's predicted time: the pruned plans within 1 % of the exhaustive ones
    assert float(full["predicted_ms"]) <= float(pruned["predicted_ms"]) \
        <= 1.01 * float(full["predicted_ms"])
    assert all(r["gpus"] == "1" and r["limit_bytes"] == str(64 << 20) for r in rows)
    assert "replayed H200: cold" in capsys.readouterr().out


def test_several_warm_passes_report_their_median(script, tmp_path, capsys):
    mod, asked = script
    out = tmp_path / "cold.csv"
    assert mod.main(["--net", "resnet18", "--policy", "powerOfTwo", "--limit", "64MiB",
                     "--warm-passes", "3", "--csv", str(out)]) == 0
    line = capsys.readouterr().out
    passes = [float(x) for x in line.split("(median of 3: ")[1].split(")")[0].split(", ")]
    assert passes == sorted(passes) and len(passes) == 3
    with open(out, newline="") as f:
        row = next(csv.DictReader(f))
    assert float(row["warm_s"]) == pytest.approx(passes[1], abs=0.006)
    with pytest.raises(SystemExit):
        mod.main(["--warm-passes", "0", "--csv", str(out)])


def test_shards_cover_the_net_once(script, tmp_path):
    """What each child of --devices runs: the two shares plan every kernel exactly once, into
    one cache and one records file, and the warm pass then benchmarks nothing."""
    mod, asked = script
    cache, records = tmp_path / "bench.sqlite", tmp_path / "records.jsonl"
    for i in range(2):
        assert mod.main(["--net", "resnet18", "--policy", "powerOfTwo", "--limit", "64MiB",
                         "--shard", f"{i}/2", "--cache", str(cache), "--records",
                         str(records)]) == 0
    from ucudnn.caffe.records import read_records
    benched = [(r["layer"], r["op"]) for r in read_records(records) if r["kind"] == "bench"]
    assert sorted(benched) == sorted(_table("resnet18"))     # every kernel, none twice
    asked.clear()
    records.unlink()
    _, again, predicted, _ = mod.plan_net("resnet18", "powerOfTwo", "pruned", 64 << 20, cache,
                                       records)
    assert again == 0 and not asked and predicted > 0


def test_warm_pass_reads_the_cache_once(script, tmp_path):
    """Note [Pruned search at run time]: with the cache the cold pass filled, the search of
    nearly every kernel runs from the cached sizes in at most two rounds; none measures
    anything, and the net is planned as in the cold pass. (A few kernels fall back to
    replaying their cold rounds: the cold search stops checking a limit's bounds once they
    meet and then measures the sizes next to the plan, so from all its sizes at once the
    bounds can ask for a size it never measured.)"""
    mod, asked = script
    cache, records = tmp_path / "bench.sqlite", tmp_path / "records.jsonl"
    _, cold_sizes, cold_ms, _ = mod.plan_net("resnet18", "all", "pruned", 64 << 20, cache,
                                             records)
    from ucudnn.caffe.records import read_records
    cold_rounds = [r["search_rounds"] for r in read_records(records) if r["kind"] == "bench"]
    asked.clear()
    _, again, warm_ms, warm_split = mod.plan_net("resnet18", "all", "pruned", 64 << 20, cache,
                                                 records)
    warm = [r for r in read_records(records) if r["kind"] == "bench"]
    assert cold_sizes > 0 and again == 0 and not asked
    assert set(warm_split) == {"bench_s", "plan_s"} and all(v > 0 for v in warm_split.values())
    assert warm_ms == pytest.approx(cold_ms, rel=1e-12)
    fast = [r["search_rounds"] <= 2 for r in warm]
    assert len(warm) == len(cold_rounds) and sum(fast) >= 0.9 * len(fast)
    assert max(cold_rounds) > 2
