"""The pure parts of the 3-D study (ucudnn/experiments/torch_study.py): the layer lists'
arithmetic against brute-force twins, the points CSV's schema, the figure from a small
synthetic CSV, the models' process schedule and the medians."""
import csv
import dataclasses
import json
import math
import statistics

import pytest

from ucudnn.experiments import torch_study as study
from ucudnn.vocab import InputError, parse_size


def _outputs_by_counting(x, k, p, s):
    """Output positions along one axis: the window starts that fit in the padded input."""
    return len(range(-p, x + p - k + 1, s))


@pytest.mark.parametrize("layer", study.study_layers() + list(study.QUICK_LAYERS),
                         ids=lambda lay: lay.name)
def test_output_sizes_and_bytes_match_counting(layer):
    want = tuple(_outputs_by_counting(x, k, p, s) for x, k, p, s in
                 zip(layer.dhw, layer.kernel, layer.pad, layer.stride))
    assert layer.out_dhw == want
    assert layer.y_size == (layer.n, layer.k) + want
    for dtype, size in study.DTYPE_BYTES.items():
        got = layer.tensor_bytes(dtype)
        assert got == {"x": size * math.prod(layer.x_size), "w": size * math.prod(layer.w_size),
                       "y": size * math.prod(layer.y_size)}


def test_unet_is_nnunet_shaped():
    layers = study.unet_layers()
    enc = [lay for lay in layers if ".enc" in lay.name]
    widths = [lay.k for lay in enc if lay.name.endswith("b")]
    assert widths[0] == 32 and max(widths) == 320
    assert all(b == min(2 * a, 320) for a, b in zip(widths, widths[1:]))
    for a, b in zip(enc, enc[1:]):          # each convolution takes the one before it
        assert b.c == a.k and b.dhw == a.out_dhw
    for lay in layers:
        if ".dec" in lay.name:              # upsampled map and skip connection
            assert lay.c == 2 * lay.k
            skip = next(e for e in enc if e.name.endswith("b") and e.k == lay.k)
            assert lay.dhw == skip.out_dhw
    # convolutions of one shape are listed once
    assert len({dataclasses.replace(lay, name="") for lay in layers}) == len(layers)


def test_vae_layers_are_causal_3x3x3_in_the_issue_ranges():
    layers = study.vae_layers()
    assert len({lay.name for lay in layers}) == len(layers)
    for lay in layers:
        assert lay.kernel == (3, 3, 3) and lay.pad == (0, 1, 1) and lay.n == 1
        assert lay.out_dhw[0] == lay.dhw[0] - 2          # causal: two front frames, no pad
        assert lay.out_dhw[1:] == lay.dhw[1:]
        assert {lay.c, lay.k} <= {128, 256, 512}
    full = [lay for lay in layers if ".s1." in lay.name]
    assert {lay.out_dhw[0] for lay in full} == set(study.VAE_FRAMES)
    assert min(f for f in study.VAE_FRAMES) >= 8 and max(study.VAE_FRAMES) <= 17
    heights = {lay.dhw[1] for lay in full}
    assert min(heights) == 256 and max(heights) == 720


def test_quick_layers_are_few_and_small():
    assert 0 < len(study.QUICK_LAYERS) <= 6
    assert {lay.kind for lay in study.QUICK_LAYERS} == {"unet", "vae"}
    smallest_full = min(sum(lay.tensor_bytes("float32").values()) for lay in study.study_layers())
    for lay in study.QUICK_LAYERS:
        assert sum(lay.tensor_bytes("float32").values()) < max(smallest_full, 64 << 20)


def test_argument_parsers_name_the_flag():
    assert study.parse_caps("64MiB,unlimited") == [("64MiB", parse_size("64MiB")),
                                                   ("unlimited", None)]
    for bad, flag in (("64Q", "--caps"), ("", "--caps")):
        with pytest.raises(InputError, match=flag):
            study.parse_caps(bad)
    with pytest.raises(InputError, match="--dtypes: float64"):
        study.parse_choice("dtypes", "float32,float64", study.DTYPES)
    assert [lay.name for lay in study.select(study.study_layers(), "unet.dec")] == [
        lay.name for lay in study.unet_layers() if lay.name.startswith("unet.dec")]
    with pytest.raises(InputError, match="--layers"):
        study.select(study.study_layers(), "nothing")


# ------------------------------------------------------------------------------- points CSV

def _row(layer, op, cap, side_ms, pytorch="ok", dtype="float32", family="legacy"):
    row = dict(study.layer_columns(layer, dtype), family=family, dtype=dtype, op=op, cap=cap,
               cap_bytes=study.cap_bytes(cap), ucudnn_status="ok", ucudnn_sizes="1+1",
               ucudnn_predicted_ms=side_ms * 0.9, ucudnn_workspace_bytes=1 << 20,
               ucudnn_measured_ms=side_ms, undivided_status="ok",
               undivided_predicted_ms=side_ms, undivided_workspace_bytes=0,
               undivided_measured_ms=side_ms * 1.1, pytorch_status=pytorch)
    if pytorch == "ok":
        row.update(pytorch_measured_ms=side_ms * 0.8, pytorch_workspace_bytes=3 << 20,
                   pytorch_peak_bytes=5 << 20)
    else:
        row["error"] = "pytorch: OutOfMemoryError"
    return row


def _rows():
    q = study.QUICK_LAYERS
    return [_row(q[0], "fwd", "64MiB", 1.0), _row(q[1], "bwd_data", "unlimited", 2.0),
            _row(q[-1], "bwd_filter", "64MiB", 3.0, pytorch="oom"),
            _row(q[-1], "fwd", "64MiB", 4.0, dtype="bfloat16", family="graph")]


def test_points_csv_round_trips_with_the_schema(tmp_path):
    path = tmp_path / "points.csv"
    rows = _rows()
    study.write_points(path, rows)
    with open(path, newline="") as f:
        assert tuple(next(csv.reader(f))) == study.POINT_FIELDS
    back = study.read_points(path)
    assert len(back) == len(rows)
    for got, want in zip(back, rows):
        for k in study.POINT_FIELDS:
            assert got[k] == ("" if want.get(k) is None else str(want[k])), k
    assert back[2]["pytorch_status"] == "oom" and back[2]["pytorch_measured_ms"] == ""


def test_points_rows_are_checked(tmp_path):
    row = _rows()[0]
    with pytest.raises(ValueError, match="unknown field"):
        study.points_csv([dict(row, speedup=2)])
    with pytest.raises(ValueError, match="'pytorch_status'"):
        study.points_csv([dict(row, pytorch_status="slow")])
    other = tmp_path / "other.csv"
    other.write_text("layer,op\nconv1,fwd\n")
    with pytest.raises(InputError, match="other.csv: line 1"):
        study.read_points(other)


def test_figure_from_a_small_csv(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "points.csv"
    rows = _rows()
    study.write_points(path, rows)
    out = tmp_path / "fig.png"
    drawn = study.plot_points(study.read_points(path), str(out))
    # three sides per row, less the row whose PyTorch side ran out of memory
    assert drawn == 3 * len(rows) - sum(r["pytorch_status"] != "ok" for r in rows)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InputError):
        study.plot_points([], str(tmp_path / "none.png"))


# ---------------------------------------------------------------------------- whole models

def test_schedule_rotates_every_variant_through_each_round():
    caps = list(study.CAPS)
    slots = study.schedule(["unet", "vae"], ["float32"], caps, 3)
    per_round = study.variants(caps)
    assert per_round[0] == ("pytorch", "unlimited")
    assert ("wscap", "unlimited") not in per_round
    assert len(slots) == 2 * 3 * len(per_round)
    firsts = []
    for m in ("unet", "vae"):
        for r in (1, 2, 3):
            got = [(s.side, s.cap) for s in slots if s.model == m and s.round == r]
            assert sorted(got) == sorted(per_round)
            firsts.append(got[0])
    assert len(set(firsts[:3])) == 3
    assert all(v[0] != "wscap" for v in study.variants(caps, wscap=False))


def test_wscap_is_in_mib():
    assert study.wscap_mib("256MiB") == 256 and study.wscap_mib("1GiB") == 1024


def test_summary_medians_and_ratios():
    procs = [{"model": "unet", "dtype": "float32", "side": "pytorch", "cap": "unlimited",
              "status": "ok", "median_ms": v, "first_iteration_ms": 10 * v,
              "peak_gpu_memory_bytes": int(v) << 20} for v in (10.0, 12.0, 11.0)]
    procs += [{"model": "unet", "dtype": "float32", "side": "ucudnn", "cap": "256MiB",
               "status": "ok", "median_ms": v, "first_iteration_ms": v,
               "peak_gpu_memory_bytes": None} for v in (13.0, 14.0)]
    procs.append({"model": "unet", "dtype": "float32", "side": "ucudnn", "cap": "256MiB",
                  "status": "oom"})
    rows = {(r["side"], r["cap"]): r for r in study.summarize(procs)}
    theirs, ours = rows[("pytorch", "unlimited")], rows[("ucudnn", "256MiB")]
    assert theirs["median_ms"] == 11.0 and theirs["ratio_to_pytorch"] == 1.0
    assert theirs["peak_gpu_memory_bytes"] == 12 << 20
    assert theirs["median_peak_gpu_memory_bytes"] == 11 << 20
    assert "peak 11.0MiB (largest 12.0MiB)" in study.summary_text([theirs])
    assert ours["median_ms"] == statistics.median([13.0, 14.0])
    assert ours["ok"] == 2 and ours["processes"] == 3 and ours["statuses"] == "ok,oom"
    assert ours["ratio_to_pytorch"] == pytest.approx(13.5 / 11.0)
    assert ours["peak_gpu_memory_bytes"] is None
    assert "unet float32 ucudnn@256MiB" in study.summary_text(list(rows.values()))


def test_startup_ratio_is_warm_over_pytorch():
    procs = [{"model": "vae", "dtype": "bfloat16", "side": s, "cap": "256MiB", "status": "ok",
              "median_ms": 1.0, "first_iteration_ms": f}
             for s, f in (("ucudnn-cold", 900.0), ("ucudnn-warm", 50.0), ("pytorch", 500.0))]
    (r,) = study.startup_ratios(study.summarize(procs))
    assert (r["cold_ms"], r["warm_ms"], r["pytorch_ms"]) == (900.0, 50.0, 500.0)
    assert r["warm_to_pytorch"] == pytest.approx(0.1)
    assert "warm/pytorch 0.100" in study.startup_lines([r])[0]


def test_a_models_run_goes_on_from_the_earlier_runs_processes(tmp_path):
    slots = study.schedule(["unet"], ["bfloat16"], ["256MiB"], 2)
    settings = {"iterations": 20, "warmup": 5, "engines": "both", "quick": False,
                "memory_format": "contiguous"}
    path = tmp_path / "models.json"
    assert study.resume_run(path, "models", settings, study.MODEL_SETTINGS, slots,
                            study.SLOT_FIELDS) == ([], slots)
    done = [dict(dataclasses.asdict(s), order=i, status="ok" if i != 2 else "failed")
            for i, s in enumerate(slots[:3], 1)]
    path.write_text(json.dumps({"subcommand": "models", "settings": settings,
                                "processes": done}))
    kept, todo = study.resume_run(path, "models", dict(settings, processes=3),
                                  study.MODEL_SETTINGS, slots, study.SLOT_FIELDS)
    assert kept == done and todo == slots[3:]       # a failed process is a result, kept
    with pytest.raises(InputError, match=r"models.json: an earlier run with other settings "
                                         r"\(iterations 20, now 50\)"):
        study.resume_run(path, "models", dict(settings, iterations=50), study.MODEL_SETTINGS,
                         slots, study.SLOT_FIELDS)
    with pytest.raises(InputError, match="not a startup.json"):
        study.resume_run(path, "startup", settings, study.MODEL_SETTINGS, slots,
                         study.SLOT_FIELDS)


def test_a_run_written_before_the_memory_format_setting_was_contiguous(tmp_path):
    slots = study.schedule(["unet"], ["bfloat16"], ["256MiB"], 1)
    old = {"iterations": 20, "warmup": 5, "engines": "both", "quick": False}
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"subcommand": "models", "settings": old, "processes": []}))
    now = dict(old, memory_format="contiguous")
    assert study.resume_run(path, "models", now, study.MODEL_SETTINGS, slots,
                            study.SLOT_FIELDS) == ([], slots)
    with pytest.raises(InputError, match=r"memory_format 'contiguous', now 'channels_last'"):
        study.resume_run(path, "models", dict(old, memory_format="channels_last"),
                         study.MODEL_SETTINGS, slots, study.SLOT_FIELDS)
