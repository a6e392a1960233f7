"""`ucudnn cache`: import a table, list, export, and plan from the cache."""
import json

from cli_run import run
from repo_paths import NETS, SHARED, SHIPPED, needs_shared
from ucudnn.plan.table import group_by_kernel, read_table


@needs_shared
def test_cache_import_list_export_and_plan(tmp_path):
    cache = tmp_path / "c.sqlite"
    table = SHARED / "alexnet_default.csv"
    p = run(tmp_path, "cache", "import", table, "--net", "alexnet", "--cache", cache,
            "--gpu", "NVIDIA H200", "--cudnn-version", "91400")
    assert "imported 135 entries (648 rows)" in p.stderr
    p = run(tmp_path, "cache", "list", "--cache", cache)
    assert p.stdout.splitlines()[0] == f"{cache}: 15 kernels, 135 entries"
    listing = json.loads(run(tmp_path, "cache", "list", "--cache", cache, "--json").stdout)
    assert len(listing) == 15 and listing[0]["batches"] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    out = tmp_path / "out.csv"
    run(tmp_path, "cache", "export", "--net", "alexnet", "--cache", cache, "--csv", out)
    assert group_by_kernel(read_table(out)) == group_by_kernel(read_table(table))
    stdout = run(tmp_path, "cache", "export", "--net", "alexnet", "--cache", cache).stdout
    assert stdout == out.read_text()
    # plan from the cache; the prototxt finds the same shapes under its own layer names
    from_table = json.loads(run(tmp_path, "plan", "--table", table, "--json").stdout)
    for src in (["--net", "alexnet"], ["--prototxt", NETS / "alexnet.prototxt"]):
        d = json.loads(run(tmp_path, "plan", *src, "--cache", cache, "--json",
                           "--gpu", "NVIDIA H200").stdout)
        assert d["source"]["kind"] == "cache"
        assert d["totals"] == from_table["totals"]
    # nothing cached for another math mode
    p = run(tmp_path, "cache", "export", "--net", "alexnet", "--cache", cache, "--math", "fma",
            ok=False)
    assert p.returncode == 2 and "no cached measurements" in p.stderr


def test_cache_import_needs_device_without_gpu(no_gpu, tmp_path):
    p = run(tmp_path, "cache", "import", SHIPPED / "alexnet_bench.csv", "--net", "alexnet",
            "--cache", tmp_path / "c.sqlite", ok=False)
    assert p.returncode == 2 and "--gpu: needed when no GPU is visible" in p.stderr
