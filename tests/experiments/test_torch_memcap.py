"""The pure parts of the memory-capped study (ucudnn/experiments/torch_memcap.py): its memory
caps and their fractions, the process schedule, and the verdict per memory cap from hand-built
process records -- a cap that binds by OOM or by PyTorch's slowdown, one where ucudnn misses the
target or runs out of memory too, one that binds nothing (no claim), and the cases where a side
or a reference is missing or failed (undetermined)."""
import argparse
import dataclasses
import json
import statistics

import pytest

from ucudnn.experiments import torch_memcap as mc
from ucudnn.experiments import torch_study
from ucudnn.vocab import InputError, parse_size


def test_memory_caps_parse_to_bytes_smallest_first():
    assert mc.parse_memory_caps("16GiB, 6GiB,10GiB") == [
        ("6GiB", 6 << 30), ("10GiB", 10 << 30), ("16GiB", 16 << 30)]
    assert mc.parse_memory_caps("1536MiB") == [("1536MiB", parse_size("1.5GiB"))]


@pytest.mark.parametrize("text, says", [
    ("0", "'0': a memory cap must be more than 0"),
    ("0GiB,1GiB", "'0GiB': a memory cap must be more than 0"),
    ("6Q", "--memory-caps: cannot parse '6Q'"),
    ("-1GiB", "must not be negative"),
    ("unlimited", "the unlimited references run anyway"),
    ("1GiB,1024MiB", "'1024MiB' is '1GiB' again"),
    (" , ", "no memory cap given"),
])
def test_bad_memory_caps_name_the_flag(text, says):
    with pytest.raises(InputError, match="--memory-caps") as e:
        mc.parse_memory_caps(text)
    assert says in str(e.value)


def test_a_cap_above_the_device_is_refused_and_fractions_are_of_the_device():
    total = 80 << 30
    caps = mc.parse_memory_caps("6GiB,80GiB")
    mc.check_device(caps, total)                    # the whole device is a cap
    with pytest.raises(InputError, match="--memory-caps: 81GiB is more than this device"):
        mc.check_device(mc.parse_memory_caps("6GiB,81GiB"), total)
    assert mc.fraction(20 << 30, total) == 0.25
    assert mc.fraction(total, total) == 1.0
    for bad in (0, total + 1):
        with pytest.raises(ValueError, match="not within"):
            mc.fraction(bad, total)
    assert torch_study.cap_bytes("6GiB") == 6 << 30 and torch_study.cap_bytes(mc.UNLIMITED_CAP) is None


def _args(**kw):
    base = dict(quick=False, models="unet,vae", dtypes="float32,bfloat16", memory_caps=None,
                cap="256MiB", processes=None, iterations=None, warmup=None, engines="both",
                timeout=900.0)
    base.update(kw)
    return argparse.Namespace(**base)


def test_resolve_fills_the_defaults_and_quick():
    a = _args()
    mc.resolve(a)
    assert [c for c, _ in a.memory_cap_list] == mc.DEFAULT_MEMORY_CAPS.split(",")
    assert (a.processes, a.iterations, a.warmup) == tuple(mc.DEFAULTS.values())
    n_variants = 2 * (1 + len(a.memory_cap_list))
    assert len(a.slots) == 2 * 2 * a.processes * n_variants
    q = _args(quick=True)
    mc.resolve(q)
    assert len(q.memory_cap_list) == 2 and q.dtype_list == ["bfloat16"]
    assert (q.processes, q.iterations, q.warmup) == tuple(mc.QUICK.values())
    assert len(q.slots) == 2 * 1 * 1 * 2 * 3
    given = _args(quick=True, processes=2, dtypes="float32", memory_caps="3GiB")
    mc.resolve(given)
    assert (given.processes, given.dtype_list, given.memory_cap_list) == (
        2, ["float32"], [("3GiB", 3 << 30)])
    for kw, flag in ((dict(iterations=0), "--iterations"), (dict(warmup=-1), "--warmup"),
                     (dict(timeout=0.0), "--timeout"), (dict(cap="1X"), "--cap"),
                     (dict(dtypes="float64"), "--dtypes")):
        with pytest.raises(InputError, match=flag):
            mc.resolve(_args(**kw))


def test_schedule_runs_every_variant_once_per_round_in_rotated_orders():
    caps = ["2GiB", "8GiB"]
    slots = mc.schedule(["unet", "vae"], ["float32"], caps, 3)
    per_round = mc.variants(caps)
    assert sorted(per_round) == sorted((s, m) for s in ("pytorch", "ucudnn")
                                       for m in ["unlimited"] + caps)
    assert len(slots) == 2 * 3 * len(per_round)
    for m in ("unet", "vae"):
        orders = [[(s.side, s.memory_cap) for s in slots if s.model == m and s.round == r]
                  for r in (1, 2, 3)]
        assert all(sorted(o) == sorted(per_round) for o in orders)
        assert len({tuple(o) for o in orders}) == 3       # each round in another order
    assert mc.workspace_cap("ucudnn", "64MiB") == "64MiB"
    assert mc.workspace_cap("pytorch", "64MiB") == "unlimited"


def test_a_run_into_the_same_folder_keeps_the_processes_it_has(tmp_path):
    settings = {"cap": "256MiB", "iterations": 3, "warmup": 1, "engines": "both",
                "quick": True, "device_total_bytes": 80 << 30, "processes": 1}
    slots = mc.schedule(["unet"], ["bfloat16"], ["1GiB", "2GiB"], 1)
    path = tmp_path / "memcap.json"
    assert mc.resume(path, settings, slots) == ([], slots)
    done = [dict(dataclasses.asdict(s), status="oom", order=i)
            for i, s in enumerate(slots[:3], 1)]
    other = dict(done[0], model="vae", memory_cap="8GiB", order=4)  # another command's
    path.write_text(json.dumps({"subcommand": "memcap", "settings": settings,
                                "processes": done + [other]}))
    kept, todo = mc.resume(path, dict(settings, processes=2), slots)
    assert kept == done + [other] and todo == slots[3:]
    more = mc.schedule(["unet"], ["bfloat16"], ["1GiB", "2GiB"], 2)   # a second round
    kept, todo = mc.resume(path, settings, more)
    assert kept == done + [other] and [mc.slot_key(s) for s in todo] == [
        mc.slot_key(s) for s in more if s not in slots[:3]]
    with pytest.raises(InputError, match=r"memcap.json: an earlier run with other settings "
                       r"\(cap '256MiB', now '1GiB'\); give another --out"):
        mc.resume(path, dict(settings, cap="1GiB"), slots)
    path.write_text("{")
    with pytest.raises(InputError, match="memcap.json: not readable as JSON"):
        mc.resume(path, settings, slots)
    path.write_text(json.dumps({"subcommand": "models", "processes": []}))
    with pytest.raises(InputError, match="memcap.json: not a memcap.json"):
        mc.resume(path, settings, slots)


# ---------------------------------------------------------------------------- the verdicts

def _procs(model, dtype, side, memory_cap, *results):
    """Process records as the script writes them: a number is an ok process's median (ms), a
    string the status of one that did not finish."""
    out = []
    for r in results:
        rec = {"model": model, "dtype": dtype, "side": side, "memory_cap": memory_cap,
               "cap": mc.workspace_cap(side, "256MiB"), "peak_gpu_memory_bytes": 3 << 30,
               "status": "ok" if isinstance(r, float) else r}
        if isinstance(r, float):
            rec["median_ms"] = r
            if side == "ucudnn":
                rec["converted"] = 12
        else:
            rec["error"] = f"{side}: OutOfMemoryError" if r == "oom" else "RuntimeError: boom"
        out.append(rec)
    return out


def _study(model, dtype, caps):
    """The references (pytorch 10 ms, ucudnn 10 ms unless given) and each cap's processes."""
    procs = []
    for (side, cap), results in caps.items():
        procs += _procs(model, dtype, side, cap, *results)
    return procs


def _verdicts(procs):
    rows = mc.summarize(procs)
    return rows, {(e["model"], e["memory_cap"]): e for e in mc.evaluate(rows)}


REFS = {("pytorch", "unlimited"): (10.0, 9.0, 11.0), ("ucudnn", "unlimited"): (10.0, 10.0)}


def test_a_cap_binds_by_oom_or_slowdown_and_ucudnn_meets_or_misses():
    procs = _study("unet", "bfloat16", {**REFS, **{
        ("pytorch", "2GiB"): ("oom", "oom"), ("ucudnn", "2GiB"): (10.5, 11.5, 10.0),
        ("pytorch", "4GiB"): (15.0,), ("ucudnn", "4GiB"): (11.0,),
        ("pytorch", "8GiB"): (16.0,), ("ucudnn", "8GiB"): (12.0,),
        ("pytorch", "1GiB"): ("oom",), ("ucudnn", "1GiB"): ("oom", 10.0)}})
    procs += _study("vae", "bfloat16", {**REFS, **{
        ("pytorch", "4GiB"): (9.0, "oom", 10.0), ("ucudnn", "4GiB"): (10.2,)}})
    rows, v = _verdicts(procs)
    e = v[("unet", "2GiB")]
    assert (e["binds"], e["binds_by"], e["pytorch_status"]) == (True, "oom", "oom")
    assert e["ucudnn_ms"] == statistics.median([10.5, 11.5, 10.0])
    assert e["ucudnn_ratio"] == pytest.approx(1.05) and e["verdict"] == "met"
    e = v[("unet", "4GiB")]                 # exactly 1.5x binds; exactly 1.10x meets
    assert (e["binds"], e["binds_by"], e["pytorch_slowdown"]) == (True, "slowdown", 1.5)
    assert e["ucudnn_ratio"] == 1.1 and e["verdict"] == "met"
    e = v[("unet", "8GiB")]
    assert e["binds"] and e["ucudnn_ratio"] == pytest.approx(1.2) and e["verdict"] == "not met"
    e = v[("unet", "1GiB")]                 # one ucudnn process ran out of memory: not met
    assert e["binds"] and e["ucudnn_status"] == "oom" and e["verdict"] == "not met"
    assert "ucudnn at the cap oom" in e["why"]
    assert "; ucudnn oom in 1/2 processes, 10.00 ms in the others, peak 3.0GiB;" in \
        mc.verdict_line(e)
    e = v[("vae", "4GiB")]                  # one PyTorch process of three ran out of memory
    assert (e["binds_by"], e["pytorch_ms"], e["verdict"]) == ("oom", 9.5, "met")
    assert "pytorch oom in 1/3 processes, 9.50 ms in the others" in mc.verdict_line(e)
    assert "; binds (oom), met: ucudnn 1.020x its unlimited time (target <= 1.10)" in \
        mc.verdict_line(e)
    by = {(r["model"], r["side"], r["memory_cap"]): r for r in rows}
    ref = by[("unet", "pytorch", "unlimited")]
    assert (ref["median_ms"], ref["memory_cap_bytes"], ref["cap"]) == (10.0, None, "unlimited")
    low = by[("unet", "ucudnn", "1GiB")]
    assert (low["ok"], low["oom"], low["failed"], low["status"]) == (1, 1, 0, "oom")
    assert low["converted"] == 12 and low["memory_cap_bytes"] == 1 << 30
    assert by[("unet", "pytorch", "2GiB")]["median_ms"] is None


def test_a_cap_that_binds_nothing_claims_nothing():
    procs = _study("vae", "float32", {**REFS, **{
        ("pytorch", "16GiB"): (14.9,), ("ucudnn", "16GiB"): (10.0,)}})
    rows, v = _verdicts(procs)
    e = v[("vae", "16GiB")]
    assert (e["binds"], e["binds_by"], e["verdict"]) == (False, "slowdown", "does not bind")
    assert e["pytorch_slowdown"] == pytest.approx(1.49)
    doc = {"settings": {"models": ["vae"], "dtypes": ["float32"], "memory_caps": ["16GiB"],
                        "processes": 1, "iterations": 3, "warmup": 1, "cap": "256MiB",
                        "engines": "both", "device_total_bytes": 80 << 30},
           "summary": rows, "verdicts": [e]}
    (line,) = [s for s in mc.summary_text(doc).splitlines() if "memory cap 16GiB" in s]
    assert "does not bind" in line and "no claim" in line and " met" not in line
    assert mc.summary_text(doc).startswith(
        "Memory-capped models: vae; float32; memory caps 16GiB of 80.0GiB\n")


@pytest.mark.parametrize("caps, says", [
    ({("pytorch", "unlimited"): ("oom",), ("ucudnn", "unlimited"): (10.0,),
      ("pytorch", "2GiB"): ("oom",), ("ucudnn", "2GiB"): (10.0,)},
     "pytorch unlimited reference oom"),
    ({("ucudnn", "unlimited"): (10.0,), ("pytorch", "2GiB"): ("oom",),
      ("ucudnn", "2GiB"): (10.0,)}, "pytorch unlimited reference missing"),
    ({**REFS, **{("pytorch", "2GiB"): ("failed",), ("ucudnn", "2GiB"): (10.0,)}},
     "pytorch at the cap failed (RuntimeError: boom)"),
    ({("pytorch", "unlimited"): (10.0,), ("pytorch", "2GiB"): ("oom",),
      ("ucudnn", "2GiB"): (10.0,)}, "ucudnn unlimited reference missing"),
    ({("pytorch", "unlimited"): (10.0,), ("ucudnn", "unlimited"): ("failed",),
      ("pytorch", "2GiB"): (20.0,), ("ucudnn", "2GiB"): (10.0,)},
     "ucudnn unlimited reference failed"),
])
def test_without_a_reference_or_with_a_failed_side_the_verdict_is_undetermined(caps, says):
    _, v = _verdicts(_study("unet", "float32", caps))
    e = v[("unet", "2GiB")]
    assert e["verdict"] == "undetermined" and says in e["why"], e


def test_ucudnn_missing_at_a_binding_cap_is_not_met():
    _, v = _verdicts(_study("unet", "float32", {**REFS, **{("pytorch", "2GiB"): ("oom",)}}))
    e = v[("unet", "2GiB")]
    assert (e["binds"], e["ucudnn_status"], e["verdict"]) == (True, "missing", "not met")


def test_figure_of_time_against_memory_cap(tmp_path):
    rows = mc.summarize(_study("unet", "bfloat16", {**REFS, **{
        ("pytorch", "2GiB"): ("oom",), ("ucudnn", "2GiB"): (10.5,),
        ("pytorch", "4GiB"): (15.0,), ("ucudnn", "4GiB"): (11.0,)}}))
    out = tmp_path / "memcap.png"
    assert mc.plot(rows, str(out)) == 3 + 2     # ok capped points, and both references
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    nothing = mc.summarize(_study("unet", "bfloat16", {("pytorch", "2GiB"): ("oom",)}))
    with pytest.raises(InputError, match="nothing to draw"):
        mc.plot(nothing, str(tmp_path / "none.png"))
