"""The pure parts of ``bench_torch.py frontend`` (ucudnn/experiments/torch_frontend.py): the
arguments and their --quick defaults, the rotated schedule, the timing loop over a clock the
test drives, the summary maths from canned process JSON, and the parent's loop over real child
processes that write such JSON."""
import argparse
import json
import statistics
import sys
from pathlib import Path

import pytest

from ucudnn.experiments import torch_frontend as tf
from ucudnn.experiments.gpu_memory import WatchedRun
from ucudnn.vocab import InputError


def _args(tmp_path, **kw):
    a = dict(out=str(tmp_path / "out"), quick=False, dtypes="float32,bfloat16", compile=False,
             operators=False,
             batch=None, processes=None, iterations=None, warmup=None, limit="unlimited",
             engines="both", cache=None, timeout=900.0)
    a.update(kw)
    return argparse.Namespace(**a)


# ------------------------------------------------------------------------- arguments, schedule

def test_defaults_quick_and_explicit_values(tmp_path):
    full = _args(tmp_path)
    tf.resolve(full)
    assert {k: getattr(full, k) for k in tf.DEFAULTS} == tf.DEFAULTS
    assert full.dtype_list == list(tf.DTYPES) and full.variant_list == list(tf.VARIANTS)
    assert len(full.slots) == tf.DEFAULTS["processes"] * len(tf.DTYPES) * len(tf.VARIANTS)
    quick = _args(tmp_path, quick=True, batch=8, compile=True)
    tf.resolve(quick)
    assert quick.batch == 8                                 # given: kept under --quick
    assert (quick.processes, quick.iterations, quick.warmup) == (
        tf.QUICK["processes"], tf.QUICK["iterations"], tf.QUICK["warmup"])
    assert quick.variant_list == list(tf.VARIANTS + tf.COMPILE_VARIANTS)
    assert {s.round for s in quick.slots} == {1}
    both = _args(tmp_path, operators=True)
    tf.resolve(both)
    assert both.variant_list == ["pytorch", "ucudnn", "ucudnn_operators"]


@pytest.mark.parametrize("kw, says", [
    ({"dtypes": "float16"}, "--dtypes: float16"),
    ({"dtypes": "bfloat16,bfloat16"}, "twice"),
    ({"processes": 0}, "--processes"),
    ({"iterations": 0}, "--iterations"),
    ({"batch": -1}, "--batch"),
    ({"warmup": -1}, "--warmup"),
    ({"timeout": 0.0}, "--timeout"),
    ({"limit": "lots"}, "--limit"),
])
def test_bad_arguments_name_the_flag(tmp_path, kw, says):
    with pytest.raises(InputError, match=says):
        tf.resolve(_args(tmp_path, **kw))


def test_out_and_cache_must_be_a_folder_and_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="--out: .* is a file"):
        tf.resolve(_args(tmp_path, out=str(tmp_path / "f")))
    with pytest.raises(InputError, match="--cache: .* is a folder"):
        tf.resolve(_args(tmp_path, cache=str(tmp_path)))
    a = _args(tmp_path)
    tf.resolve(a)
    assert tf.cache_path(a) == tmp_path / "out" / "ucudnn-cache.sqlite"


@pytest.mark.parametrize("compile_too, rounds", [(False, 3), (True, 5)])
def test_schedule_runs_every_cell_once_a_round_in_a_rotated_order(compile_too, rounds):
    names = tf.variants(compile_too)
    slots = tf.schedule(tf.DTYPES, names, rounds)
    cells = [(d, v) for d in tf.DTYPES for v in names]
    assert [s.order for s in slots] == list(range(1, len(cells) * rounds + 1))
    firsts = []
    for r in range(1, rounds + 1):
        got = [(s.dtype, s.variant) for s in slots if s.round == r]
        assert sorted(got) == sorted(cells)
        assert got == cells[(r - 1) % len(cells):] + cells[:(r - 1) % len(cells)]
        firsts.append(got[0])
    assert len(set(firsts)) == min(rounds, len(cells))
    assert [s.compiled for s in slots].count(True) == (rounds * len(tf.DTYPES) * 2
                                                       if compile_too else 0)


def test_process_env_gives_compiled_variants_the_runs_caches(tmp_path):
    base = {"PATH": "/usr/bin"}
    plain, compiled = tf.Slot(1, 1, "float32", "ucudnn"), tf.Slot(2, 1, "float32",
                                                                  "ucudnn_compile")
    assert tf.process_env(plain, tmp_path, base) == base
    operators = tf.process_env(tf.Slot(3, 1, "float32", tf.OPERATORS_VARIANT), tmp_path, base)
    assert operators == dict(base, UCUDNN_TORCH_EAGER="0")
    env = tf.process_env(compiled, tmp_path, base)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor-cache")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton-cache")
    assert base == {"PATH": "/usr/bin"}


# ------------------------------------------------------------------------------- time_steps

class _Timeline:
    """A GPU timeline the test drives: each step adds its duration; the host does nothing."""

    def __init__(self, durations):
        self.durations = list(durations)
        self.now = 0.0
        self.steps = 0
        self.waited = []

    def step(self):
        self.now += self.durations[self.steps]
        self.steps += 1


def test_time_steps_pairs_its_events_around_each_timed_step():
    warmup, iterations = 3, 5
    durations = [1000.0] + [50.0] * warmup + [7.0, 3.0, 5.0, 11.0, 2.0]
    t = _Timeline(durations)
    warm_at = []
    rec = tf.time_steps(t.step, iterations=iterations, warmup=warmup, mark=lambda: t.now,
                        elapsed_ms=lambda a, b: b - a, wait=t.waited.append,
                        sync=lambda: None, on_warm=lambda: warm_at.append(t.steps))
    assert t.steps == 1 + warmup + iterations and warm_at == [1 + warmup]
    assert rec["step_ms"] == durations[1 + warmup:]
    assert rec["median_ms"] == statistics.median(durations[1 + warmup:])
    assert (rec["min_ms"], rec["max_ms"]) == (min(rec["step_ms"]), max(rec["step_ms"]))
    assert len(rec["host_ms"]) == iterations and len(t.waited) == iterations
    assert rec["host_median_ms"] == statistics.median(rec["host_ms"])
    assert rec["host_to_gpu"] == pytest.approx(rec["host_median_ms"] / rec["median_ms"])
    assert rec["first_step_ms"] >= 0


def test_plan_facts_count_micro_batched_kernels():
    class Kernel:
        def __init__(self, sizes, ws):
            self.plan = argparse.Namespace(micro_batches=sizes)
            self.workspace_size = ws
    facts = tf.plan_facts([Kernel([128], 5), Kernel([64, 64], 9), Kernel([32] * 4, 1)])
    assert facts == {"kernels": 3, "micro_batched": 2, "max_workspace_bytes": 9}
    assert tf.plan_facts([]) == {"kernels": 0, "micro_batched": 0, "max_workspace_bytes": 0}


# ---------------------------------------------------------------------------------- summary

def _canned(dtype, variant, gpu, host, first=2000.0):
    """What a process writes (bench_torch.py frontend-process): its steps and their medians."""
    rec = {"dtype": dtype, "variant": variant, "batch": 128, "status": "ok"}
    rec.update(tf.step_times(first, gpu, host))
    return rec


def _watched(tmp_path, slot, peak, rc=0):
    return WatchedRun(rc=rc, timed_out=False, wall_s=20.0, pid=1,
                      log_path=tmp_path / "logs" / f"{slot.stem}.log",
                      peak_gpu_memory_bytes=peak, nvml_error=None, gpu_state=None)


def _records(tmp_path, canned):
    """Process records as the parent makes them from each process's canned JSON file."""
    slots = tf.schedule(["float32", "bfloat16"], tf.VARIANTS, 3)
    procs = []
    for slot in slots:
        js = tmp_path / "logs" / f"{slot.stem}.json"
        js.parent.mkdir(parents=True, exist_ok=True)
        rec = canned.get((slot.dtype, slot.variant, slot.round))
        if rec is not None:
            js.write_text(json.dumps(rec))
        procs.append(tf.process_record(slot, js, _watched(tmp_path, slot, slot.order << 20,
                                                          rc=0 if rec else 1),
                                       ["python", "x"], tmp_path))
    return procs


def test_summary_medians_ratios_and_text_from_canned_processes(tmp_path):
    gpu = {("float32", "pytorch"): [100.0, 104.0, 98.0],
           ("float32", "ucudnn"): [101.0, 107.0, 99.0],
           ("bfloat16", "pytorch"): [50.0, 49.0, 51.0],
           ("bfloat16", "ucudnn"): [55.0, 54.0, None]}      # round 3's process failed
    canned = {}
    for (dt, v), meds in gpu.items():
        for r, m in enumerate(meds, 1):
            if m is not None:
                canned[(dt, v, r)] = _canned(dt, v, [m - 1, m, m + 5], [m / 4] * 3,
                                             first=1000.0 * r)
                if v == "ucudnn":
                    canned[(dt, v, r)]["plans"] = {"kernels": 50 + r, "micro_batched": r,
                                                   "max_workspace_bytes": 1}
    procs = _records(tmp_path, canned)
    failed = [p for p in procs if p["status"] != "ok"]
    assert len(failed) == 1 and failed[0]["error"].startswith("exit status 1, no JSON (logs/")
    summary = tf.summarize(procs)
    rows = {(r["dtype"], r["variant"]): r for r in summary["rows"]}
    assert [r["dtype"] for r in summary["rows"]] == ["float32"] * 2 + ["bfloat16"] * 2
    ours32, theirs32 = rows[("float32", "ucudnn")], rows[("float32", "pytorch")]
    assert theirs32["median_ms"] == statistics.median(gpu[("float32", "pytorch")])
    assert ours32["process_min_ms"] == 99.0 and ours32["process_max_ms"] == 107.0
    assert ours32["host_to_gpu"] == pytest.approx(0.25)
    assert ours32["first_step_ms"] == 2000.0 and ours32["first_step_max_ms"] == 3000.0
    peaks = [p["peak_gpu_memory_bytes"] for p in procs
             if (p["dtype"], p["variant"]) == ("float32", "ucudnn")]
    assert ours32["peak_gpu_memory_bytes"] == statistics.median(peaks)
    assert ours32["peak_gpu_memory_max_bytes"] == max(peaks)
    assert theirs32["plans"] is None
    first_ok = min((p for p in procs if (p["dtype"], p["variant"]) == ("float32", "ucudnn")),
                   key=lambda p: p["order"])
    assert ours32["plans"] == first_ok["plans"]
    bf = rows[("bfloat16", "ucudnn")]
    assert (bf["ok"], bf["processes"], bf["statuses"]) == (2, 3, "failed,ok")
    ratios = {q["dtype"]: q for q in summary["ratios"]}
    assert set(ratios) == {"float32", "bfloat16"}
    r32 = ratios["float32"]
    assert r32["ratio"] == pytest.approx(101.0 / 100.0) and r32["met"] is True
    assert r32["per_round"] == pytest.approx([101 / 100, 107 / 104, 99 / 98])
    rbf = ratios["bfloat16"]
    assert rbf["ratio"] == pytest.approx(54.5 / 50.0) and rbf["met"] is False
    assert rbf["per_round"] == pytest.approx([55 / 50, 54 / 49])
    versions = {"gpu": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0", "torch_cudnn": 91900,
                "driver": {"driver_version": "580.1", "cuda_driver_version": "13.0"}}
    settings = {"batch": 128, "processes": 3, "iterations": 50, "warmup": 10,
                "limit": "unlimited", "engines": "both", "dtypes": ["float32", "bfloat16"]}
    text = tf.summary_text({"settings": settings, "summary": summary, "versions": versions})
    assert "GPU NVIDIA H200, driver 580.1 (CUDA 13.0), CUDA 13.0 (torch's), cuDNN 91900" in text
    assert "bfloat16 (bf16 autocast over fp32 parameters):" in text
    assert f"ucudnn/pytorch {r32['ratio']:.3f} (target <= 1.03: met)" in text
    assert f"ucudnn/pytorch {rbf['ratio']:.3f} (target <= 1.03: not met)" in text
    assert "host/GPU 0.25" in text and "2/3 ok" in text
    plans = ours32["plans"]
    assert f"{plans['kernels']} kernels planned, {plans['micro_batched']} micro-batched" in text


def test_the_operators_variant_has_its_own_ratio_to_pytorch(tmp_path):
    procs = [dict(_canned("float32", v, [m], [1.0]), round=1)
             for v, m in (("ucudnn_operators", 12.0), ("pytorch", 10.0), ("ucudnn", 11.0))]
    summary = tf.summarize(procs)
    assert [r["variant"] for r in summary["rows"]] == ["pytorch", "ucudnn", "ucudnn_operators"]
    ratios = {q["variant"]: q for q in summary["ratios"]}
    assert set(ratios) == {"ucudnn", "ucudnn_operators"}
    assert ratios["ucudnn_operators"]["baseline"] == "pytorch"
    assert ratios["ucudnn_operators"]["ratio"] == pytest.approx(1.2)
    assert ratios["ucudnn"]["ratio"] == pytest.approx(1.1)


def test_a_dtype_whose_baseline_never_ran_has_no_ratio(tmp_path):
    procs = [dict(_canned("float32", "ucudnn", [10.0], [1.0]), round=1),
             {"dtype": "float32", "variant": "pytorch", "status": "oom", "round": 1}]
    (q,) = tf.summarize(procs)["ratios"]
    assert q["ratio"] is None and q["met"] is None and q["per_round"] == []
    text = tf.summary_text({"settings": {"batch": 1, "processes": 1, "iterations": 1,
                                         "warmup": 0, "limit": "unlimited", "engines": "both",
                                         "dtypes": ["float32"]},
                            "summary": tf.summarize(procs), "versions": {}})
    assert "ucudnn/pytorch: - (a side did not run)" in text and "0/1 ok" in text


# --------------------------------------------------------------------------- the parent's loop

CHILD = """import json, sys
args = sys.argv[1:]
val = dict(zip(args[::2], args[1::2]))
if val["--variant"] == "ucudnn" and val["--dtype"] == "bfloat16":
    sys.exit(3)                     # a process that dies without its JSON
ms = 10.0 if val["--variant"] == "pytorch" else 10.2
rec = {"dtype": val["--dtype"], "variant": val["--variant"], "status": "ok",
       "first_step_ms": 5.0, "median_ms": ms, "min_ms": ms, "max_ms": ms,
       "host_median_ms": 1.0, "host_to_gpu": 0.1, "step_ms": [ms], "host_ms": [1.0]}
open(val["--json"], "w").write(json.dumps(rec))
"""


def test_run_writes_every_process_and_the_summary_as_it_goes(tmp_path):
    args = _args(tmp_path, processes=2, iterations=1, warmup=0, batch=4, timeout=60.0)
    tf.resolve(args)
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    (dies,) = [s for s in args.slots if s.round == 1 and (s.dtype, s.variant) == (
        "bfloat16", "ucudnn")]
    stale = Path(args.out) / "logs" / f"{dies.stem}.json"      # an earlier run's, ok
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps(_canned("bfloat16", "ucudnn", [1.0], [1.0])))
    lines = []

    def command(slot, js):          # the flags the script's process gets, to the child
        flags = tf.process_command(sys.executable, "bench_torch.py", args, slot, js)[3:]
        return [sys.executable, str(child)] + flags
    doc = tf.run(args, command, versions={"gpu": "test"}, say=lines.append)
    out = Path(args.out)
    assert json.loads((out / "frontend.json").read_text()) == json.loads(json.dumps(doc))
    assert [p["order"] for p in doc["processes"]] == [s.order for s in args.slots]
    assert len(lines) == len(args.slots)
    bad = [p for p in doc["processes"] if p["status"] != "ok"]
    assert {(p["dtype"], p["variant"]) for p in bad} == {("bfloat16", "ucudnn")}
    assert all(p["exit_status"] == 3 and (out / p["log"]).is_file() for p in bad)
    (q32, qbf) = doc["summary"]["ratios"]
    assert q32["ratio"] == pytest.approx(1.02) and q32["met"] is True
    assert qbf["ratio"] is None
    assert "--cache " + str(out / "ucudnn-cache.sqlite") in doc["processes"][0]["command"]
    text = (out / "frontend.txt").read_text()
    assert text == tf.summary_text(doc) and "ucudnn/pytorch 1.020" in text
    assert doc["settings"]["batch"] == 4 and doc["wall_s"] > 0
    assert f"{len(args.slots)} processes in " in text


def test_a_run_into_an_earlier_runs_folder_runs_what_it_lacks(tmp_path):
    child = tmp_path / "child.py"
    child.write_text(CHILD)

    def runs(**kw):
        args = _args(tmp_path, **dict(dict(iterations=1, warmup=0, batch=4, timeout=60.0), **kw))
        tf.resolve(args)
        lines = []

        def command(slot, js):
            flags = tf.process_command(sys.executable, "bench_torch.py", args, slot, js)[3:]
            return [sys.executable, str(child)] + flags
        return tf.run(args, command, versions={"gpu": "test"}, say=lines.append), lines
    first, _ = runs(processes=1)
    n = len(first["processes"])
    doc, lines = runs(processes=2)                  # a second round: only it runs
    assert doc["processes"][:n] == first["processes"]     # the failed one too: a result
    assert [p["round"] for p in doc["processes"][n:]] == [2] * n
    assert lines[0].endswith(f"frontend.json: {n} processes kept, {n} to run")
    assert len(lines) == 1 + n
    again, lines = runs(processes=2)                # nothing left to run
    assert again["processes"] == doc["processes"] and len(lines) == 1
    assert json.loads((Path(tmp_path) / "out" / "frontend.json").read_text()) == \
        json.loads(json.dumps(again))
    with pytest.raises(InputError, match=r"frontend.json: an earlier run with other "
                                         r"settings \(batch 4, now 8\)"):
        runs(processes=2, batch=8)
