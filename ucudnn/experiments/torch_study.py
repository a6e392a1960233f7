"""The 3-D study of ``scripts/bench_torch.py`` (``layers3d``, ``models``, ``startup``): its layer
lists and model specs, the rows it writes, its process schedule and its figure. Pure: no torch
at import (the script imports torch; this module is tested without it).

Note [3-D layers of the study]
    Two families of 3-D convolutions, as :class:`Layer3d` records (N x C x D x H x W input,
    K x C x T x R x S filter, per-axis pad and stride):

    * ``unet``: the encoder and decoder convolutions of nnU-Net's default 3d_fullres network
      (Isensee et al., "nnU-Net: a self-configuring method for deep learning-based biomedical
      image segmentation", Nature Methods 18, 2021; github.com/MIC-DKFZ/nnUNet, the
      PlainConvUNet its planner builds): 3x3x3 convolutions, 32 feature maps at full
      resolution doubling per stage up to 320, the first convolution of each stage of stride 2,
      on the 128x128x128 patch at batch 2 that its plans give a typical MRI task (BraTS-like).
      The decoder's convolution after each 2x2x2 transposed convolution takes the skip
      connection too (twice the stage's channels in).
    * ``vae``: the 3x3x3 causal convolutions of a CogVideoX-like video VAE decoder (Yang et
      al., "CogVideoX", arXiv:2408.06072; diffusers' ``AutoencoderKLCogVideoX``: decoder
      channels 512, 256, 256, 128 from the latent's 1/8 resolution up to full resolution).
      A causal convolution pads time at the front only, so its input has T + 2 frames and
      no time padding. The frames per level follow CogVideoX's time upsampling in the first
      two up blocks (T/4, T/2, T, T); T is 8 (CogVideoX's chunk of two latent frames) or 17
      (Wan 2.1's 4k+1 frames), at 256x256, 480x720 (CogVideoX) and 720x1280 (720p). A decode
      runs at batch 1, so ucudnn cannot divide it: its plan is the fastest undivided algorithm
      within the cap, and what the study shows there is the cap itself.

    :data:`QUICK_LAYERS` is a few small ones of each, for a smoke test.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import statistics
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

from ..files import write_text
from ..vocab import InputError, format_size, parse_size
from .plots import OP_COLORS, _plt, _save, _ws_axis

T = TypeVar("T")

#: the study's per-call workspace caps; "unlimited" is no cap
CAPS: Tuple[str, ...] = ("64MiB", "256MiB", "1GiB", "unlimited")
FAMILIES: Tuple[str, ...] = ("legacy", "graph")
DTYPES: Tuple[str, ...] = ("float32", "bfloat16")
OPS: Tuple[str, ...] = ("fwd", "bwd_data", "bwd_filter")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclasses.dataclass(frozen=True)
class Layer3d:
    """One 3-D convolution of the study (Note [3-D layers of the study])."""
    name: str
    kind: str                       # "unet" or "vae"
    n: int
    c: int
    k: int
    dhw: Tuple[int, int, int]       # input depth (frames), height, width
    kernel: Tuple[int, int, int] = (3, 3, 3)
    pad: Tuple[int, int, int] = (1, 1, 1)
    stride: Tuple[int, int, int] = (1, 1, 1)

    @property
    def out_dhw(self) -> Tuple[int, int, int]:
        return tuple((x + 2 * p - k) // s + 1 for x, k, p, s in
                     zip(self.dhw, self.kernel, self.pad, self.stride))

    @property
    def x_size(self) -> Tuple[int, ...]:
        return (self.n, self.c) + tuple(self.dhw)

    @property
    def w_size(self) -> Tuple[int, ...]:
        return (self.k, self.c) + tuple(self.kernel)

    @property
    def y_size(self) -> Tuple[int, ...]:
        return (self.n, self.k) + self.out_dhw

    def tensor_bytes(self, dtype: str) -> Dict[str, int]:
        """Bytes of x, w and y in ``dtype``."""
        b = DTYPE_BYTES[dtype]
        prod = lambda s: b * _prod(s)     # noqa: E731
        return {"x": prod(self.x_size), "w": prod(self.w_size), "y": prod(self.y_size)}


def _prod(v: Iterable[int]) -> int:
    out = 1
    for i in v:
        out *= i
    return out


def unet_layers(patch: int = 128, batch: int = 2, base: int = 32, top: int = 320,
                stages: int = 6) -> List[Layer3d]:
    """nnU-Net 3d_fullres's convolutions (Note [3-D layers of the study]): per encoder stage
    its two 3x3x3 convolutions, then per decoder stage the convolution that takes the
    upsampled map and the skip connection. Convolutions of equal shape are listed once."""
    chans = [min(base * 2 ** i, top) for i in range(stages)]
    out: List[Layer3d] = []
    size, cin = patch, 1
    for i, ch in enumerate(chans):
        stride = 1 if i == 0 else 2
        out.append(Layer3d(f"unet.enc{i}a", "unet", batch, cin, ch, (size,) * 3,
                           stride=(stride,) * 3))
        size = out[-1].out_dhw[0]
        out.append(Layer3d(f"unet.enc{i}b", "unet", batch, ch, ch, (size,) * 3))
        cin = ch
    for i in range(stages - 2, -1, -1):
        size = patch // 2 ** i
        out.append(Layer3d(f"unet.dec{i}", "unet", batch, 2 * chans[i], chans[i], (size,) * 3))
    seen, uniq = set(), []
    for layer in out:
        key = dataclasses.replace(layer, name="")
        if key not in seen:
            seen.add(key)
            uniq.append(layer)
    return uniq


#: (name, height, width) of the VAE study's frame sizes
VAE_SIZES = (("256p", 256, 256), ("480p", 480, 720), ("720p", 720, 1280))
VAE_FRAMES = (8, 17)
#: the decoder's levels: (scale down from full resolution, channels in, channels out, frames
#: divisor): each block's convolution, and the first convolution where the channels change
VAE_LEVELS = ((8, 512, 512, 4), (4, 512, 256, 2), (4, 256, 256, 2), (2, 256, 256, 1),
              (1, 256, 128, 1), (1, 128, 128, 1))


def vae_layers(sizes=VAE_SIZES, frames=VAE_FRAMES) -> List[Layer3d]:
    """A CogVideoX-like causal decoder's convolutions (Note [3-D layers of the study])."""
    out = []
    for label, h, w in sizes:
        for t in frames:
            for scale, c, k, div in VAE_LEVELS:
                tl = max(1, -(-t // div))
                out.append(Layer3d(f"vae.{label}.t{t}.s{scale}.{c}-{k}", "vae", 1, c, k,
                                   (tl + 2, h // scale, w // scale), pad=(0, 1, 1)))
    return out


def study_layers() -> List[Layer3d]:
    return unet_layers() + vae_layers()


#: ``--quick``: the pipeline in minutes (small patches and frames)
QUICK_LAYERS: Tuple[Layer3d, ...] = tuple(unet_layers(patch=32, stages=3)[:3]) + tuple(
    vae_layers(sizes=(("64p", 64, 64),), frames=(8,))[-2:])
QUICK_CAPS: Tuple[str, ...] = ("64MiB", "unlimited")


def select(layers: Sequence[Layer3d], names: Optional[str]) -> List[Layer3d]:
    """The layers whose names start with one of ``names`` (comma-separated); all for None."""
    if not names:
        return list(layers)
    want = [s.strip() for s in names.split(",") if s.strip()]
    got = [lay for lay in layers if any(lay.name.startswith(w) for w in want)]
    if not got:
        raise InputError(f"--layers: {names!r} selects none of {len(layers)} layers "
                         f"(names like {layers[0].name})")
    return got


def parse_caps(text: str) -> List[Tuple[str, Optional[int]]]:
    """``[(label, bytes or None for unlimited)]`` of a comma-separated cap list."""
    out = []
    for part in (s.strip() for s in text.split(",")):
        if not part:
            continue
        if part == "unlimited":
            out.append((part, None))
            continue
        try:
            out.append((part, parse_size(part)))
        except (InputError, ValueError) as e:
            raise InputError(f"--caps: {part!r}: {e}") from None
    if not out:
        raise InputError("--caps: no cap given")
    return out


def cap_bytes(cap: str) -> Optional[int]:
    """The bytes of a cap label; None for unlimited."""
    return None if cap == "unlimited" else parse_size(cap)


def parse_choice(field: str, text: str, allowed: Sequence[str]) -> List[str]:
    got = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in got if s not in allowed]
    if bad or not got:
        raise InputError(f"--{field}: {','.join(bad) or 'nothing'} not among "
                         f"{','.join(allowed)}")
    return got


# ------------------------------------------------------------------------------- points CSV

#: the columns of points.csv, one row per layer x family x dtype x op x cap: ``ucudnn_*`` the
#: plan under the cap (predicted by the core's benchmarks, measured with CUDA events),
#: ``undivided_*`` the fastest single algorithm under the cap, ``pytorch_*`` cudnn.benchmark's
#: choice (no cap; the same in every cap's row), workspace as its peak-memory delta
POINT_FIELDS: Tuple[str, ...] = (
    "layer", "kind", "family", "dtype", "op", "cap", "cap_bytes",
    "n", "c", "k", "d", "h", "w", "t", "r", "s", "pad", "stride", "x_bytes", "w_bytes", "y_bytes",
    "ucudnn_status", "ucudnn_sizes", "ucudnn_predicted_ms", "ucudnn_workspace_bytes",
    "ucudnn_measured_ms",
    "undivided_status", "undivided_predicted_ms", "undivided_workspace_bytes",
    "undivided_measured_ms",
    "pytorch_status", "pytorch_measured_ms", "pytorch_workspace_bytes", "pytorch_peak_bytes",
    "error")
STATUSES = ("ok", "oom", "failed", "skipped")


def layer_columns(layer: Layer3d, dtype: str) -> dict:
    b = layer.tensor_bytes(dtype)
    return {"layer": layer.name, "kind": layer.kind, "n": layer.n, "c": layer.c, "k": layer.k,
            "d": layer.dhw[0], "h": layer.dhw[1], "w": layer.dhw[2], "t": layer.kernel[0],
            "r": layer.kernel[1], "s": layer.kernel[2],
            "pad": "x".join(map(str, layer.pad)), "stride": "x".join(map(str, layer.stride)),
            "x_bytes": b["x"], "w_bytes": b["w"], "y_bytes": b["y"]}


def check_row(row: dict) -> None:
    """ValueError naming the field where ``row`` is not a points.csv row."""
    extra = set(row) - set(POINT_FIELDS)
    if extra:
        raise ValueError(f"points row: unknown field(s) {', '.join(sorted(extra))}")
    for field in ("ucudnn_status", "undivided_status", "pytorch_status"):
        if row.get(field) not in STATUSES:
            raise ValueError(f"points row {row.get('layer')}: field '{field}': "
                             f"{row.get(field)!r} not one of {', '.join(STATUSES)}")


def points_csv(rows: Sequence[dict]) -> str:
    buf = io.StringIO()
    wr = csv.DictWriter(buf, fieldnames=POINT_FIELDS, lineterminator="\n")
    wr.writeheader()
    for row in rows:
        check_row(row)
        wr.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in POINT_FIELDS})
    return buf.getvalue()


def write_points(path, rows: Sequence[dict]) -> None:
    write_text(path, points_csv(rows))


def read_points(path) -> List[dict]:
    """The rows of a points.csv; InputError naming the file where its header differs."""
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        if tuple(rd.fieldnames or ()) != POINT_FIELDS:
            raise InputError(f"{path}: line 1: not a points.csv of this study (columns differ)")
        return list(rd)


# ----------------------------------------------------------------------------------- figure

SIDES = (("ucudnn", "ucudnn plan", "o"), ("undivided", "undivided best", "s"),
         ("pytorch", "cudnn.benchmark", "x"))


def plot_points(rows: Sequence[dict], out: str, source: str = "measured") -> int:
    """Workspace (MiB, symlog) against measured time per layer kind: one panel per kind x
    dtype, a marker per side, colour per op; unmeasured points (OOM, failed) left out.
    Returns the number of points drawn."""
    plt = _plt()
    panels = sorted({(r["kind"], r["dtype"]) for r in rows})
    if not panels:
        raise InputError(f"{out}: no rows to draw")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    drawn = 0
    for ax, (kind, dtype) in zip(axes[0], panels):
        for side, label, marker in SIDES:
            for op in OPS:
                pts = [(float(r[f"{side}_measured_ms"]), int(r[f"{side}_workspace_bytes"])
                        / 2 ** 20) for r in rows
                       if r["kind"] == kind and r["dtype"] == dtype and r["op"] == op
                       and r[f"{side}_status"] == "ok" and r[f"{side}_measured_ms"] != ""
                       and r[f"{side}_workspace_bytes"] != ""]
                if pts:
                    ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker,
                               color=OP_COLORS[op], s=22, alpha=0.7,
                               label=f"{label} {op}")
                    drawn += len(pts)
        ax.set_xscale("log")
        _ws_axis(ax, "y")
        ax.set_xlabel("measured time per call (ms)")
        ax.set_ylabel("workspace (MiB)")
        ax.set_title(f"{kind} layers, {dtype}")
        ax.legend(fontsize=6, ncol=1)
    _save(fig, out, source=source)
    return drawn


# ---------------------------------------------------------------------------- whole models

#: the models' specs (``kind`` picks the network, scripts/study3d_models.py): ``nnunet`` is
#: nnU-Net's 3d_fullres network on its 128^3 patch at batch 2, the shapes of
#: :func:`unet_layers`; ``vae480p`` CogVideoX's decoder levels (:data:`VAE_LEVELS`) at 480x720
#: and 8 frames, batch 1, causal time padding, as :func:`vae_layers` lists them. ``unet`` and
#: ``vae`` are the same networks small (a 64^3 patch and 4 stages; 256x256): a step of
#: milliseconds (PyTorch under a 256 MiB workspace cap ran at 0.95-1.04x its unlimited time
#: on an H100), and ``memcap``'s default, whose memory caps are a few GiB
MODELS = {
    "nnunet": {"kind": "unet", "patch": 128, "batch": 2,
               "channels": (32, 64, 128, 256, 320, 320), "in": 1, "classes": 4},
    "vae480p": {"kind": "vae", "size": (480, 720), "frames": 8, "batch": 1, "latent": 16,
                "channels": (512, 256, 256, 128), "blocks": 2},
    "unet": {"kind": "unet", "patch": 64, "batch": 2, "channels": (32, 64, 128, 256), "in": 1,
             "classes": 4},
    "vae": {"kind": "vae", "size": (256, 256), "frames": 8, "batch": 1, "latent": 16,
            "channels": (512, 256, 256, 128), "blocks": 2},
}
#: what ``models`` and ``startup`` run unless ``--models`` says otherwise
DEFAULT_MODELS: Tuple[str, ...] = ("nnunet", "vae480p")
#: the small pair (``memcap``'s default)
SMALL_MODELS: Tuple[str, ...] = ("unet", "vae")
_QUICK = {
    "unet": {"kind": "unet", "patch": 32, "batch": 2, "channels": (16, 32, 64), "in": 1,
             "classes": 4},
    "vae": {"kind": "vae", "size": (64, 64), "frames": 4, "batch": 1, "latent": 16,
            "channels": (64, 32), "blocks": 1},
}
#: ``--quick``: every model as a small network of its kind
QUICK_MODELS = {name: _QUICK[spec["kind"]] for name, spec in MODELS.items()}


@dataclasses.dataclass(frozen=True)
class Slot:
    """One process of a ``models`` run: ``side`` pytorch, wscap (PyTorch under
    CUDNN_CONV_WSCAP_DBG at ``cap``) or ucudnn (``convert(limit=cap)``)."""
    model: str
    dtype: str
    round: int
    side: str
    cap: str


def variants(caps: Sequence[str], wscap: bool = True) -> List[Tuple[str, str]]:
    """The (side, cap) of one round: PyTorch unlimited, then per cap ucudnn (and PyTorch under
    its workspace cap variable)."""
    out = [("pytorch", "unlimited")]
    for cap in caps:
        out.append(("ucudnn", cap))
        if wscap and cap != "unlimited":
            out.append(("wscap", cap))
    return out


def rotated(cells: Sequence[T], processes: int) -> List[Tuple[int, T]]:
    """``(round, cell)`` of ``processes`` rounds (from 1) of every cell: round r runs them in
    an order rotated by r, so each cell's processes spread over the run alike."""
    out = []
    for r in range(processes):
        k = r % len(cells)
        out += [(r + 1, c) for c in list(cells[k:]) + list(cells[:k])]
    return out


def schedule(models: Sequence[str], dtypes: Sequence[str], caps: Sequence[str], processes: int,
             wscap: bool = True) -> List[Slot]:
    """Every process of a run, rounds interleaved (:func:`rotated`)."""
    return [Slot(m, dt, r, s, c) for m in models for dt in dtypes
            for r, (s, c) in rotated(variants(caps, wscap), processes)]


#: the settings a ``models`` run into an earlier run's folder must share with it
MODEL_SETTINGS = ("iterations", "warmup", "engines", "quick", "memory_format")
#: a setting's value in a document written before the setting existed
SETTING_DEFAULTS = {"memory_format": "contiguous"}
#: ``--memory-format``: the model's and input's layout on every side (NC[D]HW, or N[D]HWC
#: through torch.channels_last / channels_last_3d)
MEMORY_FORMATS = ("contiguous", "channels_last")
#: the fields that name a process of ``models``: a :class:`Slot`'s, kept in its record
SLOT_FIELDS = ("model", "dtype", "round", "side", "cap")


def record_key(rec, fields: Sequence[str]) -> tuple:
    """The ``fields`` of a process record (a dict) or of a slot."""
    get = rec.get if isinstance(rec, dict) else lambda k: getattr(rec, k)
    return tuple(get(k) for k in fields)


def resume_run(path, subcommand: str, settings: dict, shared: Sequence[str], slots: Sequence,
               fields: Sequence[str]) -> Tuple[List[dict], list]:
    """``(kept, todo)``: the processes of the earlier run's document at ``path`` (where there
    is one), all kept, and those of ``slots`` it lacks by ``fields``: a run cut short (a
    command's time limit) goes on where it stopped, and a run with more rounds, models,
    dtypes or caps adds them. InputError naming ``path`` where it is not ``subcommand``'s
    document, or where the earlier run's ``shared`` settings differ."""
    where = Path(path)
    if not where.is_file():
        return [], list(slots)
    try:
        doc = json.loads(where.read_text())
        ok = doc.get("subcommand") == subcommand and isinstance(doc.get("processes"), list)
    except (OSError, ValueError, AttributeError) as e:
        raise InputError(f"{where}: not readable as JSON ({e})") from None
    if not ok:
        raise InputError(f"{where}: not a {subcommand}.json (no subcommand {subcommand}, no "
                         "processes)")
    old = doc.get("settings") or {}
    old = {k: old.get(k, SETTING_DEFAULTS.get(k)) for k in shared}
    differ = [k for k in shared if old[k] != settings.get(k)]
    if differ:
        raise InputError(f"{where}: an earlier run with other settings ("
                         + ", ".join(f"{k} {old[k]!r}, now {settings.get(k)!r}"
                                     for k in differ) + "); give another --out")
    kept = doc["processes"]
    done = {record_key(p, fields) for p in kept}
    return kept, [s for s in slots if record_key(s, fields) not in done]


def wscap_mib(cap: str) -> int:
    """CUDNN_CONV_WSCAP_DBG's value for ``cap``, in MiB. The variable is documented by PyTorch
    as cuDNN's workspace cap; on PyTorch 2.11 with cuDNN 9.19 it was measured to change
    nothing (scripts/torch_wscap.py)."""
    return parse_size(cap) // 2 ** 20


def summarize(procs: Sequence[dict]) -> List[dict]:
    """Per (model, dtype, side, cap): the median over ok processes of their median iteration
    and first iteration, the median and the largest NVML peak (a ucudnn process that fills
    the cache benchmarks, and peaks above those that plan from it), the counts; and the ratio
    to PyTorch unlimited's median."""
    groups: Dict[tuple, List[dict]] = {}
    for p in procs:
        groups.setdefault((p["model"], p["dtype"], p["side"], p["cap"]), []).append(p)
    rows = []
    for (m, dt, side, cap), ps in groups.items():
        ok = [p for p in ps if p.get("status") == "ok"]
        med = statistics.median(p["median_ms"] for p in ok) if ok else None
        first = statistics.median(p["first_iteration_ms"] for p in ok) if ok else None
        peaks = [p["peak_gpu_memory_bytes"] for p in ok if p.get("peak_gpu_memory_bytes")]
        rows.append({"model": m, "dtype": dt, "side": side, "cap": cap, "processes": len(ps),
                     "ok": len(ok), "median_ms": med, "first_iteration_ms": first,
                     "peak_gpu_memory_bytes": max(peaks) if peaks else None,
                     "median_peak_gpu_memory_bytes": (int(statistics.median(peaks)) if peaks
                                                      else None),
                     "statuses": ",".join(sorted({p.get("status", "?") for p in ps}))})
    base = {(r["model"], r["dtype"]): r["median_ms"] for r in rows
            if r["side"] == "pytorch" and r["cap"] == "unlimited"}
    for r in rows:
        b = base.get((r["model"], r["dtype"]))
        r["ratio_to_pytorch"] = (r["median_ms"] / b) if b and r["median_ms"] else None
    return sorted(rows, key=lambda r: (r["model"], r["dtype"], r["side"], r["cap"]))


def summary_text(rows: Sequence[dict]) -> str:
    lines = []
    for r in rows:
        med = "-" if r["median_ms"] is None else f"{r['median_ms']:.2f} ms"
        ratio = "" if r["ratio_to_pytorch"] is None else f" ({r['ratio_to_pytorch']:.3f}x)"
        top, mid = r["peak_gpu_memory_bytes"], r.get("median_peak_gpu_memory_bytes")
        peak = "-" if top is None else format_size(mid if mid is not None else top)
        if top is not None and mid is not None and format_size(top) != peak:
            peak += f" (largest {format_size(top)})"
        first = "-" if r["first_iteration_ms"] is None else f"{r['first_iteration_ms']:.0f} ms"
        lines.append(f"{r['model']} {r['dtype']} {r['side']}@{r['cap']}: {med}{ratio}, "
                     f"first {first}, peak {peak}, {r['ok']}/{r['processes']} ok")
    return "\n".join(lines) + "\n"


def startup_ratios(rows: Sequence[dict]) -> List[dict]:
    """Per (model, dtype) of a ``startup`` summary: the median first steps of the cold and
    warm ucudnn processes and of PyTorch's, and warm / PyTorch (the issue's target: <= 0.2)."""
    first = {(r["model"], r["dtype"], r["side"]): r["first_iteration_ms"] for r in rows}
    out = []
    for m, dt in sorted({(r["model"], r["dtype"]) for r in rows}):
        cold, warm, theirs = (first.get((m, dt, s))
                              for s in ("ucudnn-cold", "ucudnn-warm", "pytorch"))
        out.append({"model": m, "dtype": dt, "cold_ms": cold, "warm_ms": warm,
                    "pytorch_ms": theirs,
                    "warm_to_pytorch": warm / theirs if warm and theirs else None})
    return out


def startup_lines(ratios: Sequence[dict]) -> List[str]:
    def ms(v):
        return "-" if v is None else f"{v:.0f} ms"
    return [f"{r['model']} {r['dtype']}: first step ucudnn cold {ms(r['cold_ms'])}, warm "
            f"{ms(r['warm_ms'])}, pytorch {ms(r['pytorch_ms'])}"
            + ("" if r["warm_to_pytorch"] is None else f"; warm/pytorch "
               f"{r['warm_to_pytorch']:.3f}") for r in ratios]
