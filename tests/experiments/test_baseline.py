"""`ucudnn baseline` without a GPU: PyTorch's modes and the choice of the baseline, the order of
the interleaved processes, the bf16 and control modes chosen as the run goes, the rows of
points.csv and the README written from them and the inputs drawn once in Caffe's
prototxt. Nothing here is timed."""
import csv
import io
import json
import statistics

import pytest

from repo_paths import NETS
from ucudnn.__main__ import main as cli_main
from ucudnn.caffe.proto import load_caffe_pb2, read_net
from ucudnn.experiments import baseline as bl
from ucudnn.experiments import baseline_report as report
from ucudnn.experiments import caffe_input
from ucudnn.experiments.caffe_run import variant_prototxt
from ucudnn.experiments.grid import Point
from ucudnn.experiments.pytorch_modes import (BF16_MODES, FP32_MODES, MODES, bf16_of,
                                              fastest)

MIB = 1 << 20


# -- the modes -----------------------------------------------------------------------------------

def test_modes_cover_what_a_user_picks():
    compiled = {MODES[m].compile for m in FP32_MODES}
    assert compiled == {None, "default", "max-autotune", "reduce-overhead"}
    assert {m for m in FP32_MODES if MODES[m].channels_last} == {"channels_last",
                                                                 "compile_channels_last"}
    assert {m for m in FP32_MODES if MODES[m].cuda_graphs} == {"max_autotune",
                                                               "reduce_overhead"}
    assert all(MODES[m].dtype == "fp32" for m in FP32_MODES)
    for m in BF16_MODES:                    # bf16: channels-last and compiled, each compile mode
        assert MODES[m].dtype == "bf16" and MODES[m].channels_last and MODES[m].compile
    assert {MODES[m].compile for m in BF16_MODES} == compiled - {None}


def test_fastest_is_fp32_and_bf16_follows_the_fastest_compile_mode():
    medians = {"eager": 47.3, "channels_last": 28.1, "compile": 25.4,
               "compile_channels_last": None, "max_autotune": 24.9, "reduce_overhead": 25.0,
               "bf16_max_autotune": 12.0}
    assert fastest(medians) == "max_autotune"           # bf16 is never the fp32 baseline
    assert fastest(medians, BF16_MODES) == "bf16_max_autotune"
    assert bf16_of(medians) == "bf16_max_autotune"
    assert bf16_of(dict(medians, max_autotune=None)) == "bf16_reduce_overhead"
    assert bf16_of({"eager": 10.0, "compile_channels_last": 9.0}) == "bf16_compile"
    assert bf16_of({"eager": 10.0, "channels_last": 9.0}) is None
    assert fastest({"eager": None}) is None and fastest({}) is None


# -- the run's order -----------------------------------------------------------------------------

def test_schedule_alternates_the_sides():
    modes = ("eager", "compile", "reduce_overhead")
    slots = bl.schedule(["resnet18@256", "alexnet@256"], modes, 3)
    per_round = 1 + len(modes) + 2
    assert len(slots) == 2 * 3 * per_round
    for net in ("resnet18@256", "alexnet@256"):
        mine = [s for s in slots if s.net == net]
        for r in (1, 2, 3):
            rnd = [s for s in mine if s.round == r]
            assert rnd[0].side == "caffe" and all(s.side == "pytorch" for s in rnd[1:])
            order = [s.mode for s in rnd[1:]]
            forward = list(modes) + [bl.BF16, bl.CONTROL]
            assert order == (forward if r % 2 else forward[::-1])
        assert sum(s.side == "caffe" for s in mine) == 3
        for m in modes:
            assert sum(s.mode == m for s in mine) == 3
    assert [s.net for s in slots] == sorted([s.net for s in slots], key=["resnet18@256",
                                                                         "alexnet@256"].index)
    plain = bl.schedule(["cifar10@64"], ["eager"], 1, bf16=False, control=False)
    assert [(s.side, s.mode) for s in plain] == [("caffe", "caffe"), ("pytorch", "eager")]


def _proc(net, side, mode, ms, kind="gaussian", status="ok", peak=None, clock=None, temp=None):
    rec = {"net": net, "side": side, "mode": mode, "median_ms": ms, "input": kind,
           "status": status, "peak_gpu_memory_bytes": peak}
    if clock is not None:
        rec["gpu_state"] = {"sm_clock_min_mhz": clock, "temperature_max_c": temp}
    return rec


def test_bf16_and_control_are_chosen_from_what_ran_and_kept():
    net = "resnet18@256"
    done = [_proc(net, "caffe", "caffe", 20.0),
            _proc(net, "pytorch", "eager", 40.0), _proc(net, "pytorch", "compile", 26.0),
            _proc(net, "pytorch", "reduce_overhead", 24.0),
            _proc(net, "pytorch", "max_autotune", 1.0, status="failed"),
            _proc("alexnet@256", "pytorch", "compile", 5.0)]    # another net's: not counted
    chosen = {}
    assert bl.resolve(bl.Slot(net, 1, "pytorch", bl.BF16), done, chosen) == (
        "bf16_reduce_overhead", "gaussian")
    assert bl.resolve(bl.Slot(net, 1, "pytorch", bl.CONTROL), done, chosen) == (
        "reduce_overhead", "constant")
    # later processes do not move a choice made
    done.append(_proc(net, "pytorch", "compile", 10.0))
    done.append(_proc(net, "pytorch", "compile", 10.0))
    assert bl.resolve(bl.Slot(net, 2, "pytorch", bl.CONTROL), done, chosen)[0] == (
        "reduce_overhead")
    assert bl.resolve(bl.Slot(net, 2, "pytorch", "eager"), done, chosen) == ("eager",
                                                                             "gaussian")
    assert bl.resolve(bl.Slot("cifar10@64", 1, "pytorch", bl.BF16), done, {}) == (None,
                                                                                 "gaussian")


# -- points.csv and the README -------------------------------------------------------------------

def _net_processes(net):
    caffe = [33.4, 33.3, 33.5]
    modes = {"eager": [47.0, 47.6, 47.3], "channels_last": [40.0, 40.2, 40.1],
             "compile": [35.3, 35.6, 35.2], "compile_channels_last": [35.9, 36.0, 35.8],
             "max_autotune": [34.0, 34.4, 34.2], "reduce_overhead": [33.9, 34.1, 33.6]}
    procs = [_proc(net, "caffe", "caffe", ms, peak=(13 << 30) + i, clock=1980 - i, temp=50 + i)
             for i, ms in enumerate(caffe)]
    for m, times in modes.items():
        procs += [_proc(net, "pytorch", m, ms, peak=(12 << 30) + i, clock=1970, temp=55)
                  for i, ms in enumerate(times)]
    procs += [_proc(net, "pytorch", "bf16_reduce_overhead", ms, peak=8 << 30)
              for ms in (20.1, 20.3, 20.2)]
    procs += [_proc(net, "pytorch", "reduce_overhead", ms, kind="constant")
              for ms in (33.0, 33.2, 33.1)]
    procs.append(_proc(net, "pytorch", "eager", 1.0, status="failed"))
    return procs, caffe, modes


def test_point_row():
    procs, caffe, modes = _net_processes("resnet50@128")
    row = report.point_row("resnet50@128", 128, "resnet50@128/shared/64.0MiB", procs)
    assert set(row) == set(report.POINT_FIELDS)
    assert row["caffe_ms"] == statistics.median(caffe)
    assert row["caffe_per_process_ms"] == ";".join(f"{x:.3f}" for x in caffe)
    medians = {m: statistics.median(v) for m, v in modes.items()}
    for m in FP32_MODES:
        assert row[f"pytorch_{m}_ms"] == medians[m]     # the failed eager process is not one
    best = min(medians, key=medians.get)
    assert row["pytorch_mode"] == best and row["pytorch_ms"] == medians[best]
    assert row["vs_pytorch_best"] == pytest.approx(row["caffe_ms"] / medians[best])
    assert row["peak_gpu_memory_bytes"] == (13 << 30) + 2
    assert row["pytorch_peak_gpu_memory_bytes"] == (12 << 30) + 2
    assert row["memory_vs_pytorch"] == pytest.approx(((13 << 30) + 2) / ((12 << 30) + 2))
    assert row["bf16_mode"] == "bf16_reduce_overhead"
    assert row["vs_bf16"] == pytest.approx(row["caffe_ms"] / row["bf16_ms"])
    assert row["control_mode"] == "reduce_overhead"
    assert row["control_difference"] == pytest.approx(
        statistics.median([33.0, 33.2, 33.1]) / medians["reduce_overhead"] - 1)
    assert (row["caffe_processes"], row["pytorch_processes"]) == (3, 3)
    # over both sides' processes: Caffe's clocks 1980, 1979, 1978, PyTorch's 1970
    assert (row["sm_clock_min_mhz"], row["temperature_max_c"]) == (1970, 55)


def test_point_row_where_pytorch_never_ran():
    row = report.point_row("alexnet@256", 256, "s", [_proc("alexnet@256", "caffe", "caffe", 16.5),
                                                      _proc("alexnet@256", "pytorch", "eager",
                                                            None, status="failed")])
    assert row["pytorch_mode"] is None and row["vs_pytorch_best"] is None
    assert row["bf16_mode"] is None and row["control_difference"] is None
    assert row["pytorch_processes"] == 0


def test_tables_and_readme_come_from_the_csv(tmp_path):
    procs, _, _ = _net_processes("resnet50@128")
    for i, p in enumerate(procs, 1):
        p.update(order=i, round=1)
    row = report.point_row("resnet50@128", 128, "resnet50@128/shared/64.0MiB", procs)
    report.write_tables(tmp_path, procs, [row])
    versions = {"gpu_name": "GPU-NAME", "driver_version": "DRV", "cuda_driver_version": "CU",
                "pytorch": {"torch_version": "TV", "cuda_version": "TCU",
                            "cudnn_version": "TDNN"},
                "ucudnn_cudnn_version": "UDNN", "caffe_commit": "CC", "ucudnn_commit": "UC",
                "command": "ucudnn baseline --out X"}
    (tmp_path / "versions.json").write_text(json.dumps(versions))
    text = report.write_readme(tmp_path).read_text()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "points.csv").read_text())))
    assert len(rows) == 1 and rows[0]["pytorch_mode"] == row["pytorch_mode"]
    processes = list(csv.DictReader(io.StringIO((tmp_path / "processes.csv").read_text())))
    assert [float(p["median_ms"] or "nan") for p in processes if p["status"] == "ok"] == [
        p["median_ms"] for p in procs if p["status"] == "ok"]
    assert processes[0]["sm_clock_min_mhz"] == "1980"
    for value in versions.values():
        if isinstance(value, str):
            assert value in text
    assert f"**{row['vs_pytorch_best']:.3f}x**" in text
    assert f"{row['vs_bf16']:.3f}x" in text and "`bf16_reduce_overhead`" in text
    assert f"{row['control_difference'] * 100:+.2f} %" in text
    for m in FP32_MODES:
        assert f"{row[f'pytorch_{m}_ms']:.2f}" in text
    # the README is the CSV's: another value in the CSV, another README
    (tmp_path / "points.csv").write_text((tmp_path / "points.csv").read_text().replace(
        str(row["vs_pytorch_best"]), "0.5"))
    assert "**0.500x**" in report.write_readme(tmp_path).read_text()


# -- Caffe's input -------------------------------------------------------------------------------

def test_variant_draws_the_input_once(tmp_path):
    pb2 = load_caffe_pb2()
    dest = tmp_path / "resnet18.prototxt"
    point = Point("resnet18@32", "shared", 64 * MIB, "fused", "both", "NHWC")
    types = variant_prototxt(pb2, NETS / "resnet18.prototxt", point, dest, None, "powerOfTwo",
                             bn_engine_field=True, share_diffs=True, input_fill="gaussian")
    net = read_net(pb2, str(dest))
    data = net.layer[0]
    assert types[data.name] == "Python" and not data.HasField("dummy_data_param")
    assert (data.python_param.module, data.python_param.layer) == (caffe_input.MODULE,
                                                                   caffe_input.LAYER)
    source = read_net(pb2, str(NETS / "resnet18.prototxt")).layer[0]
    spec = json.loads(data.python_param.param_str)
    assert spec["shapes"] == [[32] + list(source.dummy_data_param.shape[0].dim)[1:], [32]]
    gauss, label = source.dummy_data_param.data_filler
    assert spec["fillers"] == [{"type": "gaussian", "mean": gauss.mean, "std": gauss.std},
                               {"type": "constant", "value": label.value}]
    assert list(data.top) == list(source.top) and net.share_diffs
    # the default is unchanged: constant fillers, still DummyData
    variant_prototxt(pb2, NETS / "resnet18.prototxt", point, dest, None, "powerOfTwo",
                     bn_engine_field=True)
    assert read_net(pb2, str(dest)).layer[0].type == "DummyData"


def test_inputs_drawn_once_refuse_other_fillers(tmp_path):
    pb2 = load_caffe_pb2()
    net = read_net(pb2, str(NETS / "cifar10.prototxt"))
    net.layer[0].dummy_data_param.data_filler[0].type = "uniform"
    with pytest.raises(ValueError, match=rf"cifar10.prototxt: layer '{net.layer[0].name}': "
                       r"data_filler type 'uniform'"):
        caffe_input.fill_inputs_once(net, "cifar10.prototxt")


def test_gaussian_is_the_same_numbers_each_time():
    np = pytest.importorskip("numpy")
    a = caffe_input.gaussian((4, 3, 8, 8))
    assert a.dtype == np.float32 and np.array_equal(a, caffe_input.gaussian((4, 3, 8, 8)))
    assert not np.array_equal(a, caffe_input.gaussian((4, 3, 8, 8), seed=1))
    assert abs(float(a.mean())) < 0.2 and 0.8 < float(a.std()) < 1.2
    assert np.array_equal(caffe_input.values((2, 2), {"type": "constant", "value": 0.0}, 0),
                          np.zeros((2, 2), np.float32))


# -- the command ---------------------------------------------------------------------------------

def test_cli_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert cli_main(["baseline", "--caffe", str(tmp_path / "no-caffe"), "--out",
                     str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--caffe" in err
    assert cli_main(["baseline", "--readme-only", "--out", str(tmp_path)]) == 2
    assert "points.csv" in capsys.readouterr().err
    exe = tmp_path / "caffe"
    exe.write_text("#!/bin/sh\nexit 3\n")
    exe.chmod(0o755)
    for args, what in ((["--nets", "vgg@32"], "no Caffe setting"),
                       (["--nets", "resnet18"], "name the batch"),
                       (["--modes", "fp8"], "--modes"), (["--processes", "0"], "--processes")):
        assert cli_main(["baseline", "--caffe", str(exe), "--out", str(tmp_path / "o"),
                         *args]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and what in err, err
    assert not (tmp_path / "o" / "points.csv").exists()


def test_quick_is_small():
    assert bl.QUICK["processes"] == 1 and len(bl.QUICK["nets"]) == 1
    assert set(bl.QUICK["modes"]) <= set(FP32_MODES)
    assert not any(MODES[m].compile == "max-autotune" for m in bl.QUICK["modes"])


# -- the run, end to end, with stand-ins for Caffe and PyTorch -----------------------------------

#: a stand-in for scripts/time_pytorch.py with --processes 1: its JSON, a median per mode from
#: $FAKE_MEDIANS (mode -> ms, the constant input 1 ms slower), a mode missing there failing
FAKE_PYTORCH = r'''
import argparse, json, os
p = argparse.ArgumentParser()
for a in ("--net", "--mode", "--input", "--processes", "--iterations", "--warmup", "--device",
          "--timeout", "--json", "--batch", "--compile-cache"):
    p.add_argument(a)
a = p.parse_args()
ms = json.loads(os.environ["FAKE_MEDIANS"]).get(a.mode)
if a.mode == "compile_channels_last":
    raise SystemExit("time_pytorch.py needs PyTorch")      # as the script says without torch
proc = ({"error": "InductorError: stand-in"} if ms is None else
        {"median_ms": ms + (a.input == "constant"), "peak_gpu_memory_bytes": 5 << 30,
         "memory_method": "nvml", "first_iteration_s": 1.0,
         "gpu_state": {"start": {"sm_clock_mhz": 1980}, "end": {"sm_clock_mhz": 1970},
                       "samples": 3, "sm_clock_min_mhz": 1965, "power_max_w": 600.0,
                       "temperature_max_c": 60}})
doc = {"meta": {"command_line": "fake", "torch_version": "9.9", "cuda_version": "13.0",
                "cudnn_version": 91900, "gpu_name": "Stand-in"},
       "nets": {a.net: {"batch": int(a.batch), "modes": {a.mode: {"processes": [proc]}}}}}
with open(a.json, "w") as f:
    json.dump(doc, f)
'''


def test_run_interleaves_and_writes_every_process(tmp_path, monkeypatch):
    from repo_paths import LOGS
    from ucudnn.caffe.log import parse_caffe_time
    out = tmp_path / "out"
    modes = ("eager", "compile", "max_autotune", "reduce_overhead", "compile_channels_last")
    opts = _fake_run(tmp_path, monkeypatch, out, modes=modes, processes=3,
                     compile_cache=tmp_path / "cc")
    said = []
    doc = bl.run(opts, say=said.append)
    procs = doc["processes"]
    slots = bl.schedule(["alexnet@256"], modes, 3)
    assert [(p["side"], p["round"]) for p in procs] == [(s.side, s.round) for s in slots]
    assert [p["order"] for p in procs] == list(range(1, len(slots) + 1))
    caffe = [p for p in procs if p["side"] == "caffe"]
    assert len(caffe) == 3 and all(p["status"] == "ok" for p in caffe)
    assert all(p["input"] == "gaussian" for p in caffe)
    # the bf16 and control modes: of the fastest fp32 (compile) mode that ran
    assert {p["mode"] for p in procs if p["mode"].startswith("bf16")} == {
        "bf16_reduce_overhead"}
    control = [p for p in procs if p["input"] == "constant"]
    assert len(control) == 3 and {p["mode"] for p in control} == {"reduce_overhead"}
    failed = [p for p in procs if p["status"] != "ok"]
    assert {p["mode"] for p in failed} == {"max_autotune", "compile_channels_last"}
    assert len(failed) == 6
    assert all("needs PyTorch" in p["error"] for p in failed
               if p["mode"] == "compile_channels_last")
    # a line per process, and the failed ones --resume would run once more
    assert len(said) == 2 + len(slots) and said[-1].startswith(f"{len(failed)} slots failed")
    assert all(f"--compile-cache {tmp_path / 'cc'}" in p["command"] for p in procs
               if p["side"] == "pytorch")

    rows = list(csv.DictReader(io.StringIO((out / "points.csv").read_text())))
    assert len(rows) == 1
    row = rows[0]
    caffe_ms = parse_caffe_time((LOGS / "alexnet_all_8MiB.log").read_text()).median_ms
    assert float(row["caffe_ms"]) == pytest.approx(caffe_ms)
    assert row["pytorch_mode"] == "reduce_overhead" and float(row["pytorch_ms"]) == 18.0
    assert float(row["vs_pytorch_best"]) == pytest.approx(caffe_ms / 18.0)
    assert row["pytorch_max_autotune_ms"] == "" and float(row["pytorch_eager_ms"]) == 30.0
    assert float(row["bf16_ms"]) == 8.0 and row["bf16_mode"] == "bf16_reduce_overhead"
    assert float(row["control_difference"]) == pytest.approx(19.0 / 18.0 - 1)
    assert row["caffe_setting"] == bl.setting_point("alexnet@256").key
    assert row["failed_processes"] == "max_autotune x3;compile_channels_last x3"
    processes = list(csv.DictReader(io.StringIO((out / "processes.csv").read_text())))
    assert len(processes) == len(slots)
    assert {p["sm_clock_min_mhz"] for p in processes if p["side"] == "pytorch"
            and p["status"] == "ok"} == {"1965"}
    versions = json.loads((out / "versions.json").read_text())
    assert versions["pytorch"]["torch_version"] == "9.9"
    assert versions["command"] == f"ucudnn baseline --out {out}"
    readme = (out / "README.md").read_text()
    assert f"**{float(row['vs_pytorch_best']):.3f}x**" in readme
    assert "max_autotune x3, compile_channels_last x3" in readme
    assert "modes timed: " + ", ".join(f"`{m}`" for m in modes) + " (" in readme
    # Caffe's net: the shipped AlexNet in its setting, its input drawn once
    model = (out / "prototxt" / "alexnet.alexnet_256.prototxt").read_text()
    assert 'type: "Python"' in model and "DummyData" not in model and "share_diffs: true" in model


# -- the screened schedule; resuming a run -------------------------------------------------------

def test_screened_schedule_times_every_mode_once():
    modes = ("eager", "compile", "reduce_overhead")
    slots = bl.schedule(["resnet18@256"], modes, 3, screen=True)
    rounds = {r: [s.mode for s in slots if s.round == r] for r in (1, 2, 3)}
    assert rounds[1] == ["caffe", *modes, bl.BF16, bl.CONTROL]
    assert rounds[2] == ["caffe", bl.CONTROL, bl.BF16, bl.BEST]
    assert rounds[3] == ["caffe", bl.BEST, bl.BF16, bl.CONTROL]
    # unscreened, every mode in every round
    assert [s.mode for s in bl.schedule(["resnet18@256"], modes, 3) if s.round == 3] == (
        rounds[1])
    # the best slot is the fastest fp32 mode of what ran, kept once chosen
    done = [_proc("resnet18@256", "pytorch", m, ms) for m, ms in
            (("eager", 40.0), ("compile", 26.0), ("reduce_overhead", 24.0))]
    chosen = {}
    best = bl.Slot("resnet18@256", 2, "pytorch", bl.BEST)
    assert bl.resolve(best, done, chosen) == ("reduce_overhead", "gaussian")
    done.append(_proc("resnet18@256", "pytorch", "eager", 1.0))
    assert bl.resolve(best, done, chosen) == ("reduce_overhead", "gaussian")


def _fake_run(tmp_path, monkeypatch, out, **kw):
    from fake_caffe import fake_caffe
    medians = {"eager": 30.0, "compile": 19.0, "reduce_overhead": 18.0,
               "bf16_compile": 9.0, "bf16_reduce_overhead": 8.0}      # max_autotune fails
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps(medians))
    script = tmp_path / "time_pytorch.py"
    script.write_text(FAKE_PYTORCH)
    caffe = tmp_path / "caffe-bin"
    if not caffe.exists():
        caffe.mkdir()
    opts = dict(out=out, caffe=fake_caffe(caffe, "no-such-setting"), nets=["alexnet@256"],
                modes=("eager", "compile", "max_autotune", "reduce_overhead"), processes=2,
                iterations=5, pytorch_script=script,
                argv=["ucudnn", "baseline", "--out", str(out)])
    return bl.Options(**dict(opts, **kw))


def _slots_of(doc):
    return [(p["order"], p["round"], p["side"], p["slot"], p["mode"], p["input"], p["status"])
            for p in doc["processes"]]


def _ticks(step=10.0):
    t = [0.0]

    def clock():
        t[0] += step
        return t[0]
    return clock


@pytest.mark.parametrize("screen", [False, True])
def test_deadline_stops_and_resume_finishes_as_one_run(tmp_path, monkeypatch, screen):
    whole = bl.run(_fake_run(tmp_path, monkeypatch, tmp_path / "whole", screen=screen),
                   say=lambda m: None)
    assert whole["remaining"] == 0 and len(whole["runs"]) == 1
    out = tmp_path / "parts"
    said = []
    # a clock of 10 s a reading and the longest process 10 s: four processes fit in 135 s
    first = bl.run(_fake_run(tmp_path, monkeypatch, out, screen=screen, deadline=135.0),
                   say=said.append, clock=_ticks())
    n = len(bl.schedule(["alexnet@256"], ("eager", "compile", "max_autotune",
                                          "reduce_overhead"), 2, screen=screen))
    assert [p["order"] for p in first["processes"]] == [1, 2, 3, 4]
    assert first["processes"][3]["status"] == "failed"
    # a process may take no more than the seconds left: 135 - 40 at the second's start
    assert "--timeout 95.0 " in first["processes"][1]["command"]
    assert first["remaining"] == n - 4 + 1           # the rest, and max_autotune once more
    assert said[-1].endswith(f"Resume with: ucudnn baseline --out {out} --resume")
    assert f"{n - 3} of {n} slots left" in said[-1]
    assert json.loads((out / "baseline.json").read_text())["remaining"] == n - 3
    assert len(list(csv.DictReader(io.StringIO((out / "processes.csv").read_text())))) == 4
    # a resumed run that starts with no time for a process runs none
    again = bl.run(_fake_run(tmp_path, monkeypatch, out, screen=screen, resume=True,
                             deadline=5.0, process_estimate=60.0), say=said.append)
    assert _slots_of(again) == _slots_of(first) and len(again["runs"]) == 2
    done = bl.run(_fake_run(tmp_path, monkeypatch, out, screen=screen, resume=True),
                  say=said.append)
    assert _slots_of(done) == _slots_of(whole)
    assert "--timeout 1800.0 " in done["processes"][-1]["command"]
    assert done["chosen"] == whole["chosen"] and len(done["runs"]) == 3
    # the first command's failed max_autotune ran once more, in the third command
    assert [(p["mode"], p["run"]) for p in done["superseded"]] == [("max_autotune", 1)]
    retried = next(p for p in done["processes"] if p["order"] == 4)
    assert (retried["attempt"], retried["run"]) == (2, 3)
    assert len(json.loads((out / "versions.json").read_text())["runs"]) == 3
    assert "The processes ran in 3 commands" in (out / "README.md").read_text()
    assert (out / "points.csv").read_text() == (tmp_path / "whole" / "points.csv").read_text()


def test_screened_run_reports_its_screened_modes(tmp_path, monkeypatch):
    out = tmp_path / "out"
    doc = bl.run(_fake_run(tmp_path, monkeypatch, out, screen=True, processes=3),
                 say=lambda m: None)
    assert [p["mode"] for p in doc["processes"] if p["slot"] == bl.BEST] == [
        "reduce_overhead"] * 2
    row = next(csv.DictReader(io.StringIO((out / "points.csv").read_text())))
    assert row["screened_modes"] == "eager;compile;max_autotune"
    assert (row["pytorch_eager_processes"], row["pytorch_reduce_overhead_processes"]) == (
        "1", "3")
    assert (row["pytorch_mode"], row["caffe_processes"], row["pytorch_processes"]) == (
        "reduce_overhead", "3", "3")
    readme = (out / "README.md").read_text()
    assert "Screened (`--screen`)" in readme and "`eager`, `compile`, `max_autotune`" in readme
    assert "18.00 (3)" in readme and "30.00 (1)" in readme


def test_resume_refuses_another_run(tmp_path, monkeypatch):
    from ucudnn.experiments.results import ReproduceError
    out = tmp_path / "out"
    monkeypatch.setattr(bl, "nvml_versions", lambda gpu: {"gpu_name": "NVIDIA H100 80GB HBM3"})
    bl.run(_fake_run(tmp_path, monkeypatch, out, deadline=65.0), say=lambda m: None,
           clock=_ticks())
    before = (out / "baseline.json").read_text()
    for kw, flag in (({"iterations": 6}, "^--iterations: 5 in the run .*, 6 now"),
                     ({"screen": True}, "^--screen: off in the run .*, on now"),
                     ({"nets": ["resnet18@256"]}, "^--nets: alexnet@256 in .*, resnet18@256 "),
                     ({"bf16": False}, "^--no-bf16: off in .*, on now")):
        with pytest.raises(ReproduceError, match=flag):
            bl.run(_fake_run(tmp_path, monkeypatch, out, resume=True, **kw), say=print)
    monkeypatch.setattr(bl, "nvml_versions", lambda gpu: {"gpu_name": "NVIDIA H200"})
    with pytest.raises(ReproduceError, match="ran on NVIDIA H100 80GB HBM3, this GPU is "
                       "NVIDIA H200"):
        bl.run(_fake_run(tmp_path, monkeypatch, out, resume=True), say=print)
    assert (out / "baseline.json").read_text() == before
    # another torch in the earlier processes: refused once a new PyTorch process tells
    monkeypatch.setattr(bl, "nvml_versions", lambda gpu: {"gpu_name": "NVIDIA H100 80GB HBM3"})
    doc = json.loads(before)
    for p in doc["processes"]:
        if p.get("pytorch"):
            p["pytorch"]["torch_version"] = "9.8"
    (out / "baseline.json").write_text(json.dumps(doc))
    with pytest.raises(ReproduceError, match="torch_version 9.8 there, 9.9 now"):
        bl.run(_fake_run(tmp_path, monkeypatch, out, resume=True), say=print)
    (out / "baseline.json").write_text(json.dumps({"processes": []}))
    with pytest.raises(ReproduceError, match="no run's settings"):
        bl.run(_fake_run(tmp_path, monkeypatch, out, resume=True), say=print)


def test_cli_deadline_resume_and_bad_arguments(tmp_path, capsys):
    from fake_caffe import fake_caffe
    out = tmp_path / "out"
    exe = fake_caffe(tmp_path, "no-such-setting")
    args = ["baseline", "--caffe", exe, "--out", str(out), "--nets", "alexnet@256",
            "--modes", "eager", "--processes", "2", "--iterations", "5"]
    # no process has run yet, and 0.001 s is less than a first one is taken to need
    assert cli_main([*args, "--deadline", "0.001"]) == 0
    said = capsys.readouterr().out.strip().splitlines()
    assert "8 of 8 slots left. Resume with: ucudnn baseline" in said[1]
    assert said[1].endswith(" --deadline 0.001 --resume")
    assert json.loads((out / "baseline.json").read_text())["processes"] == []
    for extra, what in ((["--resume", "--iterations", "6"], "--iterations: 5 in the run"),
                        (["--resume", "--screen"], "--screen: off in the run"),
                        (["--deadline", "-1"], "--deadline: must be a positive"),
                        (["--deadline", "nan"], "--deadline: must be a positive"),
                        (["--process-estimate", "5"], "--process-estimate: only with "
                         "--deadline")):
        assert cli_main([*args[:-2], *extra] if "--iterations" in extra else [*args, *extra]
                        ) == 2, extra
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and what in err, err
