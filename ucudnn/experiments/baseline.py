"""``ucudnn baseline``: Caffe + ucudnn in its fastest setting against every PyTorch mode, their
processes interleaved in one run (Note [Interleaved baseline]).

Note [Interleaved baseline]
    For each net, the run goes in rounds (``--processes`` of them). A round is one Caffe
    process (``caffe time`` of the patched Caffe, :func:`.caffe_run.run_caffe_time`, as
    ``ucudnn reproduce`` runs it, on the net's setting of :data:`SETTINGS`) and one PyTorch
    process per mode (scripts/time_pytorch.py with ``--processes 1``): the fp32 modes, then
    the bf16 mode and the constant-input control. Odd rounds run the PyTorch modes in their
    order and even rounds in reverse, so that each mode's processes sit as near the Caffe
    processes as the others' on average, and a drift of the GPU's clocks over the run falls on
    both sides alike (:func:`schedule`). The bf16 mode is bf16 autocast under the fastest fp32
    compile mode, and the control is the fastest fp32 mode on a constant input; both are
    chosen from the processes that ran before them and then kept for the net (:func:`resolve`).
    Every process is run and sampled by the same NVML code (:func:`.gpu_memory.run_watched`,
    here for Caffe's and in scripts/time_pytorch.py for its worker: whole-process peak memory,
    and Note [GPU state of a process]) and written to ``baseline.json`` as it ends; ``processes.csv``, ``points.csv``, ``versions.json`` and
    the README (:mod:`.baseline_report`) are written from it after every process. Caffe's input
    is the net's DummyData drawn once (Note [Inputs drawn once]), the numbers PyTorch's
    ``--input gaussian`` draws.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..caffe.proto import load_caffe_pb2
from ..files import read_text, write_text
from ..measure.bench import device_info
from ..paths import caffe_patches, nets_dir, pycaffe_dir
from ..vocab import CAFFE_COMMIT, parse_size
from .baseline_report import point_row, write_readme, write_tables
from .caffe_run import PACKAGE_ROOT, run_caffe_time, variant_prototxt
from .grid import Point, parse_net
from .nvml import versions as nvml_versions
from .pytorch_modes import FP32_MODES, MODES, bf16_of, fastest
from .reproduce import default_pytorch_script, git
from .results import ReproduceError

#: Caffe + ucudnn's fastest setting per net (results/h200/vs-pytorch/): the shared arena at
#: ``limit``, both families of choices, share_diffs, the net's own fusions
SETTINGS: Dict[str, dict] = {
    "resnet18": {"limit": "64MiB", "bn": "fused", "layout": "NHWC"},
    "resnet50": {"limit": "64MiB", "bn": "fused", "layout": "NHWC"},
    "alexnet": {"limit": "512MiB", "bn": "caffe", "layout": "NCHW"},
    "cifar10": {"limit": "64MiB", "bn": "caffe", "layout": "NCHW"},
}
#: the issue's targets: ResNet-18 at 256, ResNet-50 v1 at 128 and 256, AlexNet at 256
NETS = ("resnet18@256", "resnet50@128", "resnet50@256", "alexnet@256")
#: --quick: the whole pipeline on the GPU host in minutes (max-autotune's search takes longer)
QUICK = {"nets": ("resnet18@32",), "processes": 1, "iterations": 5, "warmup": 2,
         "modes": ("eager", "reduce_overhead")}
#: NVML's sampling interval for both sides (s)
INTERVAL = 0.005
#: the PyTorch slots resolved at run time (Note [Interleaved baseline])
BF16, CONTROL = "bf16", "control"


@dataclasses.dataclass
class Options:
    out: Path
    caffe: str
    nets: Sequence[str] = NETS
    modes: Sequence[str] = FP32_MODES
    processes: int = 3
    iterations: int = 20
    warmup: int = 5
    bf16: bool = True
    control: bool = True
    gpu: int = 0
    timeout: float = 1800.0
    caffe_input: str = "gaussian"
    compile_cache: Optional[Path] = None
    pytorch_script: Optional[Path] = None
    argv: Optional[Sequence[str]] = None


@dataclasses.dataclass(frozen=True)
class Slot:
    """One process of the run: ``side`` caffe or pytorch; ``mode`` "caffe", a mode of
    :data:`.pytorch_modes.MODES`, :data:`BF16` or :data:`CONTROL`."""
    net: str
    round: int
    side: str
    mode: str


def schedule(nets: Sequence[str], modes: Sequence[str], processes: int, bf16: bool = True,
             control: bool = True) -> List[Slot]:
    """The processes of a run in their order (Note [Interleaved baseline])."""
    out = []
    for net in nets:
        for r in range(1, processes + 1):
            torch = list(modes) + [BF16] * bf16 + [CONTROL] * control
            if r % 2 == 0:
                torch.reverse()
            out.append(Slot(net, r, "caffe", "caffe"))
            out += [Slot(net, r, "pytorch", m) for m in torch]
    return out


def resolve(slot: Slot, done: List[dict], chosen: Dict[str, str]) -> Tuple[Optional[str], str]:
    """(PyTorch mode, input) of ``slot`` given the processes ``done`` so far; ``chosen`` keeps
    a net's bf16 and control modes once picked (keys ``NET/bf16``, ``NET/control``). Mode None:
    nothing ran to choose from."""
    if slot.mode not in (BF16, CONTROL):
        return slot.mode, "gaussian"
    key = f"{slot.net}/{slot.mode}"
    if key not in chosen:
        ran: Dict[str, List[float]] = {}
        for p in done:
            if (p["net"] == slot.net and p["side"] == "pytorch" and p.get("status") == "ok"
                    and p.get("input") == "gaussian" and p["mode"] in FP32_MODES):
                ran.setdefault(p["mode"], []).append(p["median_ms"])
        medians = {m: statistics.median(v) for m, v in ran.items()}
        pick = bf16_of(medians) if slot.mode == BF16 else fastest(medians)
        if pick is None:
            return None, "gaussian"
        chosen[key] = pick
    return chosen[key], "constant" if slot.mode == CONTROL else "gaussian"


def setting_point(net: str) -> Point:
    """The Caffe point of ``net`` (``NAME@BATCH``) in its setting of :data:`SETTINGS`."""
    s = SETTINGS[parse_net(net)[0]]
    return Point(net, "shared", parse_size(s["limit"]), s["bn"], "both", s["layout"])


# ------------------------------------------------------------------------------ processes

def caffe_process(opts: Options, pb2, slot: Slot, order: int) -> dict:
    """One ``caffe time`` process of ``slot``'s net."""
    name, _ = parse_net(slot.net)
    out = Path(opts.out)
    p = setting_point(slot.net)
    model = out / "prototxt" / f"{name}.{slot.net.replace('@', '_')}.prototxt"
    # the drawn-once input is a Python layer: Caffe's interpreter imports pycaffe and ucudnn
    path = os.pathsep.join([str(PACKAGE_ROOT), str(pycaffe_dir())] + [x for x in sys.path if x])
    try:
        variant_prototxt(pb2, nets_dir() / f"{name}.prototxt", p, model, None, "powerOfTwo",
                         bn_engine_field=True, share_diffs=True, input_fill=opts.caffe_input)
        rec = run_caffe_time(opts.caffe, model, opts.iterations, opts.gpu,
                             out / "logs" / f"{order:03d}.{p.stem}.caffe.log", opts.timeout,
                             env={"PYTHONPATH": path}, memory_interval=INTERVAL,
                             gpu_states=True)
    except Exception as e:  # noqa: BLE001 - one process's failure is recorded
        rec = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    keep = ("status", "median_ms", "peak_gpu_memory_bytes", "gpu_state", "wall_s", "log",
            "error", "workspace_bytes", "command")
    return dict({k: rec.get(k) for k in keep if k in rec}, input=opts.caffe_input,
                memory_method="nvml" if rec.get("peak_gpu_memory_bytes") else None,
                setting=p.key)


def pytorch_process(opts: Options, slot: Slot, mode: str, kind: str, order: int) -> dict:
    """One process of scripts/time_pytorch.py (``--processes 1``) of ``mode`` on ``kind``."""
    name, batch = parse_net(slot.net)
    out = Path(opts.out) / "logs"
    stem = f"{order:03d}.{slot.net.replace('@', '_')}.{mode}.{kind}"
    json_path = out / f"{stem}.json"
    script = Path(opts.pytorch_script) if opts.pytorch_script else default_pytorch_script()
    cmd = [sys.executable, str(script), "--net", name, "--mode", mode, "--input", kind,
           "--processes", "1", "--iterations", str(opts.iterations), "--warmup",
           str(opts.warmup), "--device", f"cuda:{opts.gpu}", "--timeout", str(opts.timeout),
           "--json", str(json_path)] + (["--batch", str(batch)] if batch else [])
    if opts.compile_cache:
        cmd += ["--compile-cache", str(opts.compile_cache)]
    out.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=opts.timeout + 120)
        write_text(out / f"{stem}.log", r.stdout)
        if not json_path.is_file():
            raise ReproduceError(f"exit status {r.returncode}, no JSON: "
                                 + " | ".join(r.stdout.strip().splitlines()[-3:]))
        got = json.loads(read_text(json_path, ReproduceError, "JSON"))
        meta, net = got["meta"], got["nets"][name]
        proc = net["modes"][mode]["processes"][0]
    except (OSError, ValueError, KeyError, IndexError, ReproduceError,
            subprocess.SubprocessError) as e:
        return {"status": "failed", "error": f"{type(e).__name__}: {e}", "input": kind,
                "command": shlex.join(cmd)}
    rec = {k: proc.get(k) for k in ("median_ms", "first_iteration_s", "peak_gpu_memory_bytes",
                                    "memory_method", "gpu_state", "wall_s", "error")}
    rec.update(status="failed" if proc.get("error") else "ok", input=kind,
               log=f"{stem}.log", command=shlex.join(cmd),
               pytorch={k: meta.get(k) for k in ("torch_version", "cuda_version",
                                                  "cudnn_version", "gpu_name")})
    return {k: v for k, v in rec.items() if v is not None or k == "median_ms"}


# ---------------------------------------------------------------------------------- runner

def versions(opts: Options, doc: dict, core: bool = False) -> dict:
    """What both sides ran on: the GPU and driver (NVML), PyTorch's torch, CUDA and cuDNN
    (from its processes), the Caffe and ucudnn commits, the command; ``core``: also the cuDNN
    of ucudnn's core, asked last, since it makes a CUDA context in this process."""
    v = dict(nvml_versions(opts.gpu))
    torch = next((p["pytorch"] for p in doc["processes"] if p.get("pytorch")), None)
    if core:
        try:
            v["ucudnn_cudnn_version"] = device_info().get("cudnn_version")
        except Exception as e:  # noqa: BLE001 - no GPU or no core: recorded, not fatal
            v["ucudnn_cudnn_error"] = str(e)
    parents = Path(opts.caffe).resolve().parents
    v.update(pytorch=torch, ucudnn_commit=git("rev-parse", "HEAD"), caffe_commit=CAFFE_COMMIT,
             caffe_patches=caffe_patches(parents[1]) if len(parents) > 2 else None,
             command=shlex.join(opts.argv) if opts.argv else None,
             date=doc["date"], options={k: (str(x) if isinstance(x, Path) else x)
                                        for k, x in dataclasses.asdict(opts).items()})
    return v


def write_all(opts: Options, doc: dict, core: bool = False) -> None:
    out = Path(opts.out)
    write_text(out / "baseline.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    points = []
    for net in dict.fromkeys(p["net"] for p in doc["processes"]):
        procs = [p for p in doc["processes"] if p["net"] == net]
        batch = parse_net(net)[1]
        points.append(point_row(net, batch, setting_point(net).key, procs))
    write_tables(out, doc["processes"], points)
    write_text(out / "versions.json", json.dumps(versions(opts, doc, core), indent=1) + "\n")
    write_readme(out)


def process_line(p: dict) -> str:
    what = "caffe" if p["side"] == "caffe" else f"pytorch {p['mode']} ({p['input']})"
    if p.get("status") != "ok":
        return f"[{p['order']}] {p['net']} {what}: failed: {str(p.get('error'))[:300]}"
    peak = p.get("peak_gpu_memory_bytes")
    state = p.get("gpu_state") or {}
    return (f"[{p['order']}] {p['net']} {what}: {p['median_ms']:.2f} ms, peak "
            + ("-" if peak is None else f"{peak / 2**30:.2f} GiB")
            + f", SM clock >= {state.get('sm_clock_min_mhz', '-')} MHz")


def run(opts: Options, say: Callable[[str], None] = print) -> dict:
    """Run the interleaved processes of Note [Interleaved baseline]; returns the document."""
    for net in opts.nets:
        if parse_net(net)[0] not in SETTINGS:
            raise ReproduceError(f"--nets: {net!r}: no Caffe setting for it (one of "
                                 f"{', '.join(SETTINGS)})")
        if parse_net(net)[1] is None:
            raise ReproduceError(f"--nets: {net!r}: name the batch, NAME@BATCH")
    for m in opts.modes:
        if m not in MODES:
            raise ReproduceError(f"--modes: {m!r} is not one of {', '.join(MODES)}")
    pb2 = load_caffe_pb2()
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "processes": [], "chosen": {}}
    slots = schedule(opts.nets, opts.modes, opts.processes, opts.bf16, opts.control)
    say(f"ucudnn baseline: {len(slots)} processes, {opts.processes} a side per mode and net")
    for order, slot in enumerate(slots, 1):
        if slot.side == "caffe":
            rec = caffe_process(opts, pb2, slot, order)
            mode = "caffe"
        else:
            mode, kind = resolve(slot, doc["processes"], doc["chosen"])
            if mode is None:
                say(f"[{order}] {slot.net} {slot.mode}: no mode ran to choose from; skipped")
                continue
            rec = pytorch_process(opts, slot, mode, kind, order)
        rec.update(order=order, net=slot.net, round=slot.round, side=slot.side, mode=mode)
        doc["processes"].append(rec)
        say(process_line(rec))
        write_all(opts, doc)
    write_all(opts, doc, core=True)
    return doc
