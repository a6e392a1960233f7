"""scripts/compare_plan_records.py on the records of two plannings of a small net (written by
the runtime on the fake core): the same plans, and plans that differ."""
import json
import subprocess
import sys

import pytest

from repo_paths import REPO
from ucudnn.measure import records as rw
from ucudnn.measure import runtime
from ucudnn.plan.layers import LayerSpec
from ucudnn.plan.settings import PlanSettings

SCRIPT = REPO / "scripts" / "compare_plan_records.py"
LAYERS = [LayerSpec("c1", 8, 3, 16, 16, 8, 3, 3, pad=1, bwd_data=False),
          LayerSpec("c2", 8, 8, 16, 16, 8, 3, 3, pad=1)]


def _records(path, monkeypatch, limit):
    monkeypatch.setenv(rw.ENV, str(path))
    runtime.plan_net(LAYERS, {l.name: PlanSettings(limit=limit) for l in LAYERS})
    return path


def _compare(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def runs(fake_core, tmp_path, monkeypatch):
    """Three records files: two at 8 MiB (the second from the cache) and one at 2 MiB, where
    the fake core's fast algorithm (1 MiB per sample) fits 2 samples, not 8."""
    a = _records(tmp_path / "a.jsonl", monkeypatch, 8 << 20)
    b = _records(tmp_path / "b.jsonl", monkeypatch, 8 << 20)
    c = _records(tmp_path / "c.jsonl", monkeypatch, 2 << 20)
    return a, b, c


def test_same_plans(runs):
    a, b, _ = runs
    r = _compare(a, b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{b}: 5 of 5 kernels have the plan of {a}"
    doc = json.loads(_compare(a, b, "--json").stdout)
    assert doc == {"kernels": 5, "identical": 5, "differ": []}


def test_different_plans(runs):
    a, _, c = runs
    r = _compare(a, c)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == f"{c}: 0 of 5 kernels have the plan of {a}"
    assert lines[0].startswith("c1/bwd_filter: ('8x1:algo1', 8388608, ")
    assert "-> ('2x4:algo1', 2097152, " in lines[0]
    doc = json.loads(_compare(a, c, "--json").stdout)
    assert doc["identical"] == 0 and len(doc["differ"]) == 5
    d = next(x for x in doc["differ"] if (x["layer"], x["op"]) == ("c2", "fwd"))
    assert d["before"][:2] == ["8x1:algo1", 8 << 20] and d["after"][:2] == ["2x4:algo1", 2 << 20]


def test_a_kernel_only_one_run_planned_differs(runs, tmp_path):
    a, _, _ = runs
    lines = a.read_text().splitlines()
    recs = [json.loads(l) for l in lines]
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(l for l, r in zip(lines, recs)
                               if not (r["kind"] == "kernel" and r["layer"] == "c1")) + "\n")
    r = _compare(a, short)
    assert r.returncode == 1
    assert "c1/fwd: ('8x1:algo1'" in r.stdout and "-> None" in r.stdout
    assert r.stdout.strip().splitlines()[-1] == f"{short}: 3 of 5 kernels have the plan of {a}"


def test_a_broken_line_is_named(tmp_path, runs):
    a, _, _ = runs
    bad = tmp_path / "bad.jsonl"
    bad.write_text(a.read_text() + '{"kind": "kern\n')
    r = _compare(a, bad)
    assert r.returncode == 1 and f"{bad}:{len(a.read_text().splitlines()) + 1}: not a JSON " \
        "object" in r.stderr
