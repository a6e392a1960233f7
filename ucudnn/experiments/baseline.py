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

    Screened (``--screen``): round 1 times every fp32 mode once; rounds 2.. time Caffe, the
    fastest fp32 mode of round 1 (the slot :data:`BEST`, chosen as the bf16 and control
    modes are), bf16 and the control. Each point keeps ``--processes`` processes a side for
    Caffe and its fp32 baseline, and the other modes have one each (points.csv's
    ``screened_modes`` and ``pytorch_<mode>_processes``).

Note [Resuming a baseline]
    A full run is longer than one command on the GPU host, so a run can stop and go on. Slot
    ``order`` (1-based, :func:`schedule`) names a process; ``baseline.json`` holds the run's
    settings (:data:`SETTING_FLAGS`), its processes, the bf16/control/best choices made and
    one entry per command that ran (``runs``: its GPU, driver, ucudnn commit, command).
    ``--resume`` reads it back and runs the slots that have no record, in schedule order; a
    slot whose process failed in an earlier command runs once more (``attempt`` 2; the failed
    record moves to ``superseded``), a failure in the second attempt stays. Settings that
    differ, or another GPU than the earlier commands' (NVML's name), are refused before
    anything runs; PyTorch's torch, CUDA, cuDNN or GPU differing from the earlier processes'
    are refused after the first new PyTorch process, whose record is dropped. The ucudnn
    commits may differ; versions.json lists every command's in ``runs``. ``--deadline``
    starts no process when fewer seconds are left than the longest process so far (or
    ``--process-estimate``; before any has run, :data:`FIRST_PROCESS_S`); the run then writes
    everything and says how many slots are left.
    Under a deadline a process's ``--timeout`` is at most the seconds left, so that one longer
    than a command can run (a cold max-autotune, say) ends as a recorded failure, retried once
    by the next command, instead of with the command, which would leave its slot to run again
    every time.
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
import time
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
from .reproduce import default_pytorch_script, source_commit
from .results import ReproduceError

#: Caffe + ucudnn's fastest setting per net (results/h200/vs-pytorch/): the shared arena at
#: ``limit``, both families of choices, share_diffs, the net's own fusions
SETTINGS: Dict[str, dict] = {
    "resnet18": {"limit": "64MiB", "bn": "fused", "layout": "NHWC"},
    "resnet50": {"limit": "64MiB", "bn": "fused", "layout": "NHWC"},
    "alexnet": {"limit": "512MiB", "bn": "caffe", "layout": "NCHW"},
    "cifar10": {"limit": "64MiB", "bn": "caffe", "layout": "NCHW"},
}
#: what --deadline takes a process to need before any has run, without --process-estimate:
#: about the shortest measured (a Caffe ResNet-50 v1 process, 31.5 s on an H100,
#: results/h100/baseline-first)
FIRST_PROCESS_S = 30.0
#: the targets: ResNet-18 at 256, ResNet-50 v1 at 128 and 256, AlexNet at 256
NETS = ("resnet18@256", "resnet50@128", "resnet50@256", "alexnet@256")
#: --quick: the whole pipeline on the GPU host in minutes (max-autotune's search takes longer)
QUICK = {"nets": ("resnet18@32",), "processes": 1, "iterations": 5, "warmup": 2,
         "modes": ("eager", "reduce_overhead")}
#: NVML's sampling interval for both sides (s)
INTERVAL = 0.005
#: the PyTorch slots resolved at run time (Note [Interleaved baseline])
BF16, CONTROL, BEST = "bf16", "control", "best"
#: the options a resumed run must share with the run it resumes, and their flags
SETTING_FLAGS = {"nets": "--nets", "modes": "--modes", "processes": "--processes",
                 "iterations": "--iterations", "warmup": "--warmup", "bf16": "--no-bf16",
                 "control": "--no-control", "caffe_input": "--caffe-input",
                 "screen": "--screen"}
#: the fields of PyTorch's processes that one run's processes share
PYTORCH_FIELDS = ("torch_version", "cuda_version", "cudnn_version", "gpu_name")


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
    screen: bool = False
    resume: bool = False
    deadline: Optional[float] = None
    process_estimate: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Slot:
    """One process of the run: ``side`` caffe or pytorch; ``mode`` "caffe", a mode of
    :data:`.pytorch_modes.MODES`, :data:`BF16`, :data:`CONTROL` or :data:`BEST`."""
    net: str
    round: int
    side: str
    mode: str


def schedule(nets: Sequence[str], modes: Sequence[str], processes: int, bf16: bool = True,
             control: bool = True, screen: bool = False) -> List[Slot]:
    """The processes of a run in their order (Note [Interleaved baseline]); ``screen``: every
    mode in round 1 only, the fastest of them (:data:`BEST`) in the later rounds."""
    out = []
    for net in nets:
        for r in range(1, processes + 1):
            fp32 = [BEST] if screen and r > 1 else list(modes)
            torch = fp32 + [BF16] * bf16 + [CONTROL] * control
            if r % 2 == 0:
                torch.reverse()
            out.append(Slot(net, r, "caffe", "caffe"))
            out += [Slot(net, r, "pytorch", m) for m in torch]
    return out


def resolve(slot: Slot, done: List[dict], chosen: Dict[str, str]) -> Tuple[Optional[str], str]:
    """(PyTorch mode, input) of ``slot`` given the processes ``done`` so far; ``chosen`` keeps
    a net's bf16, control and best modes once picked (keys ``NET/bf16``, ``NET/control``,
    ``NET/best``). Mode None: nothing ran to choose from."""
    if slot.mode not in (BF16, CONTROL, BEST):
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
    v.update(pytorch=torch, ucudnn_commit=source_commit(), caffe_commit=CAFFE_COMMIT,
             caffe_patches=caffe_patches(parents[1]) if len(parents) > 2 else None,
             command=shlex.join(opts.argv) if opts.argv else None,
             date=doc["date"], runs=doc.get("runs"),
             options={k: (str(x) if isinstance(x, Path) else x)
                      for k, x in dataclasses.asdict(opts).items()})
    return v


def write_all(opts: Options, doc: dict, core: bool = False) -> None:
    out = Path(opts.out)
    write_text(out / "baseline.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    points = []
    for net in dict.fromkeys(p["net"] for p in doc["processes"]):
        procs = [p for p in doc["processes"] if p["net"] == net]
        batch = parse_net(net)[1]
        points.append(point_row(net, batch, setting_point(net).key, procs, opts.screen))
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


def settings(opts: Options) -> dict:
    """The options of :data:`SETTING_FLAGS`, as baseline.json keeps them."""
    return {k: list(v) if isinstance(v, (list, tuple)) else v
            for k, v in ((k, getattr(opts, k)) for k in SETTING_FLAGS)}


def earlier_run(opts: Options, gpu_name: Optional[str]) -> Optional[dict]:
    """The document of the run in ``opts.out`` to resume (Note [Resuming a baseline]); None
    where there is none. A :class:`ReproduceError` where it is not one this run can go on."""
    path = Path(opts.out) / "baseline.json"
    if not path.exists():
        return None
    try:
        doc = json.loads(read_text(path, ReproduceError, "JSON"))
    except ValueError as e:
        raise ReproduceError(f"--resume: {path}: not JSON ({e})") from None
    before = doc.get("settings") if isinstance(doc, dict) else None
    if not isinstance(before, dict) or not isinstance(doc.get("processes"), list):
        raise ReproduceError(f"--resume: {path} holds no run's settings and processes "
                             "(written before --resume, or not ucudnn baseline's); give "
                             "another --out")
    for key, now in settings(opts).items():
        if before.get(key) != now:
            was = before.get(key)
            if key in ("bf16", "control"):      # the flags say --no-bf16, --no-control
                was, now = was is False, now is False
            raise ReproduceError(f"{SETTING_FLAGS[key]}: {_shown(was)} in the run that "
                                 f"--resume goes on with ({path}), {_shown(now)} now; give "
                                 "the same, or another --out")
    gpus = sorted({r.get("gpu_name") for r in doc.get("runs", [])} - {None})
    if gpu_name and gpus and gpus != [gpu_name]:
        raise ReproduceError(f"--resume: the processes in {path} ran on {', '.join(gpus)}, "
                             f"this GPU is {gpu_name}; one run's processes share a GPU "
                             "model: give another --out")
    doc.setdefault("chosen", {})
    doc.setdefault("runs", [])
    doc.setdefault("superseded", [])
    return doc


def _shown(v) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v))
    return {True: "on", False: "off"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def to_run(slots: Sequence[Slot], doc: dict, command: int) -> List[Tuple[int, Slot]]:
    """(order, slot) of the slots that command number ``command`` of the run still runs:
    those without a process, and those whose first attempt failed in an earlier command."""
    done = {p["order"]: p for p in doc["processes"]}
    return [(o, s) for o, s in enumerate(slots, 1)
            if o not in done or (done[o].get("status") != "ok" and done[o].get("attempt", 1) < 2
                                 and done[o].get("run", 0) < command)]


def resume_command(opts: Options) -> str:
    argv = list(opts.argv or ["ucudnn", "baseline", "--out", str(opts.out)])
    return shlex.join(argv + ([] if "--resume" in argv else ["--resume"]))


def _check_pytorch(doc: dict, rec: dict) -> None:
    """Refuses a PyTorch process whose torch, CUDA, cuDNN or GPU differs from the run's."""
    got = rec.get("pytorch") or {}
    for p in doc["processes"]:
        had = p.get("pytorch")
        if had:
            diff = [k for k in PYTORCH_FIELDS if had.get(k) != got.get(k)]
            if diff:
                raise ReproduceError(
                    "--resume: PyTorch differs from the run's earlier processes: " + ", ".join(
                        f"{k} {had.get(k)} there, {got.get(k)} now" for k in diff)
                    + "; the new process is not recorded: give another --out")
            return


def run(opts: Options, say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic) -> dict:
    """Run the interleaved processes of Note [Interleaved baseline], going on from the run in
    ``opts.out`` with ``opts.resume`` (Note [Resuming a baseline]); returns the document, its
    ``remaining`` the slots left where ``opts.deadline`` stopped it (else 0)."""
    for net in opts.nets:
        if parse_net(net)[0] not in SETTINGS:
            raise ReproduceError(f"--nets: {net!r}: no Caffe setting for it (one of "
                                 f"{', '.join(SETTINGS)})")
        if parse_net(net)[1] is None:
            raise ReproduceError(f"--nets: {net!r}: name the batch, NAME@BATCH")
    for m in opts.modes:
        if m not in MODES:
            raise ReproduceError(f"--modes: {m!r} is not one of {', '.join(MODES)}")
    start = clock()
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    gpu = nvml_versions(opts.gpu)
    doc = earlier_run(opts, gpu.get("gpu_name")) if opts.resume else None
    pb2 = load_caffe_pb2()
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    slots = schedule(opts.nets, opts.modes, opts.processes, opts.bf16, opts.control,
                     opts.screen)
    line = (f"ucudnn baseline: {len(slots)} processes, {opts.processes} a side per mode and "
            "net" + (", fp32 modes screened in round 1" if opts.screen else ""))
    if doc is None:
        doc = {"date": now, "settings": settings(opts), "processes": [], "chosen": {},
               "runs": [], "superseded": []}
    else:
        line += f"; resuming {len(doc['processes'])} processes of {Path(opts.out)}"
    doc["runs"].append(dict(gpu, date=now, ucudnn_commit=source_commit(),
                            command=shlex.join(opts.argv) if opts.argv else None))
    index = len(doc["runs"])
    todo = to_run(slots, doc, index)
    say(line + (f"; {len(todo)} to run" if len(todo) != len(slots) else ""))
    took = [p["process_s"] for p in doc["processes"] if p.get("process_s") is not None]
    doc["remaining"] = 0
    for order, slot in todo:
        each = opts
        if opts.deadline is not None:
            left = opts.deadline - (clock() - start)
            need = opts.process_estimate or max(took, default=FIRST_PROCESS_S)
            if left <= 0 or left < need:
                doc["remaining"] = len(to_run(slots, doc, index + 1))
                write_all(opts, doc, core=True)
                say(f"--deadline: {max(left, 0):.0f} s left, less than a process "
                    f"({need:.0f} s); {doc['remaining']} of {len(slots)} slots left. Resume "
                    f"with: {resume_command(opts)}")
                return doc
            # a process that outlasts the deadline ends as a failure, recorded, not with the
            # command that runs it
            each = dataclasses.replace(opts, timeout=min(opts.timeout, left))
        began = clock()
        if slot.side == "caffe":
            rec = caffe_process(each, pb2, slot, order)
            mode = "caffe"
        else:
            mode, kind = resolve(slot, doc["processes"], doc["chosen"])
            if mode is None:
                say(f"[{order}] {slot.net} {slot.mode}: no mode ran to choose from; skipped")
                continue
            rec = pytorch_process(each, slot, mode, kind, order)
            if rec.get("pytorch"):
                _check_pytorch(doc, rec)
        took.append(round(clock() - began, 3))
        earlier = next((p for p in doc["processes"] if p["order"] == order), None)
        if earlier is not None:
            doc["processes"].remove(earlier)
            doc["superseded"].append(earlier)
        rec.update(order=order, net=slot.net, round=slot.round, side=slot.side, mode=mode,
                   slot=slot.mode, process_s=took[-1], run=index,
                   attempt=1 if earlier is None else earlier.get("attempt", 1) + 1)
        doc["processes"].append(rec)
        doc["processes"].sort(key=lambda p: p["order"])
        say(process_line(rec))
        write_all(opts, doc)
    write_all(opts, doc, core=True)
    retry = len(to_run(slots, doc, index + 1))
    if retry:
        say(f"{retry} slots failed once or were skipped; --resume runs them again: "
            f"{resume_command(opts)}")
    return doc
