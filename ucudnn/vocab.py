"""The project's vocabulary, in one place: operations, policies, optimizers, dtypes, math modes,
cuDNN's algorithm names, byte sizes with units, status codes and the error classes that carry
them, and the pinned Caffe commit.

Everything else imports from here; this module imports nothing of ucudnn.

Byte sizes: ``64MiB``, ``64M``, ``64MB``, ``8 KiB``, ``512``, ``unlimited``. ``K``/``M``/``G``/``T``
with or without ``B`` and ``KiB``/``MiB``/``GiB``/``TiB`` are powers of 1024, as deep-learning
frameworks and ``nvidia-smi`` mean them; the decimal forms are spelled ``kB(SI)`` ... only where
a user asks for them (``1000MB`` is 1000 MiB, not 10^9 bytes). See Note [Size units].

Note [Size units]
    Users of Caffe and cuDNN say "64 MB" for a 64 MiB workspace (Caffe's own 8 MiB limit is
    written ``8*1024*1024``). Reading ``64M`` as 64 x 10^6 bytes (61.0 MiB) silently planned
    under a different limit than asked; every binary-looking and SI-looking unit is therefore
    read as a power of 1024, and the parsed value is echoed by the CLI.
"""
from __future__ import annotations

import enum
import re
from typing import Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple

__all__ = [
    "OPS", "OP_CODES", "OPERANDS", "POLICIES", "POLICY_CODES", "OPTIMIZERS", "OPTIMIZER_CODES",
    "NETWIDE_OPTIMIZERS", "SEARCHES", "ENGINES", "LAYOUTS", "DTYPES", "DTYPE_CODES",
    "MATH_MODES", "MATH_NAMES", "default_math", "UNLIMITED", "CAFFE_COMMIT", "ALGO_NAMES",
    "algo_name",
    "Choices", "GRAPH_ALGO", "WINOGRAD_NOTES", "NUMERICAL_NOTES", "note_names", "FAMILIES",
    "ENGINE_FAMILIES", "engine_text", "parse_engine", "split_slabs", "slab_choice", "MAX_SLABS",
    "slab_trials", "SLAB_CONFIGS",
    "focus_configs", "choice_name", "POLICY", "OPTIMIZER",
    "MATH", "SEARCH", "ENGINE", "LAYOUT", "DTYPE", "normalise_policy", "parse_size",
    "format_size", "SIZE_MAX", "Status", "UcudnnError", "InputError", "PlanError",
]

#: The three convolution operations of a layer, in the order Caffe runs them.
OPS: Tuple[str, ...] = ("fwd", "bwd_data", "bwd_filter")
#: op name -> the C API's UCUDNN_FWD / UCUDNN_BWD_DATA / UCUDNN_BWD_FILTER
OP_CODES: Dict[str, int] = {op: i for i, op in enumerate(OPS)}
#: The buffers of a kernel run by op, in the order ``run(a, b, out)`` takes them (the core's
#: ``Kernel.run``, the C API's ``ucudnn_kernel_run``): backward-data reads the filter and dy and
#: writes dx; backward-filter reads x and dy and accumulates dw.
OPERANDS: Dict[str, Tuple[str, str, str]] = {"fwd": ("x", "w", "y"),
                                             "bwd_data": ("w", "dy", "dx"),
                                             "bwd_filter": ("x", "dy", "dw")}

#: Micro-batch policies as the paper spells them, in the order of their C API / caffe.proto code.
POLICIES: Tuple[str, ...] = ("undivided", "powerOfTwo", "all")
POLICY_CODES: Dict[int, str] = dict(enumerate(POLICIES))

#: Optimizers: per-kernel DP under a limit, the network ILP under a total budget, or one arena
#: of that budget that every layer reuses (Note [Shared arena] in ucudnn/plan/network.py).
OPTIMIZERS: Tuple[str, ...] = ("dp", "ilp", "shared")
OPTIMIZER_CODES: Dict[int, str] = dict(enumerate(OPTIMIZERS))
#: The optimizers that plan a net's kernels together, within one budget.
NETWIDE_OPTIMIZERS: Tuple[str, ...] = ("ilp", "shared")
#: how policy ``all`` finds its sizes: every size, or the pruned search (Note [Pruned search])
SEARCHES: Tuple[str, ...] = ("exhaustive", "pruned")
#: Families of convolution choices: cuDNN's legacy algorithms (cudnnFind...AlgorithmEx), the
#: graph API's engine configs (Note [Choices] below), or both, the planner taking the faster.
ENGINES: Tuple[str, ...] = ("legacy", "graph", "both")
#: The families of choices a benchmark measures (a cache entry holds one).
FAMILIES: Tuple[str, ...] = ("legacy", "graph")
#: The families a setting of ``engines`` measures.
ENGINE_FAMILIES: Dict[str, Tuple[str, ...]] = {"legacy": ("legacy",), "graph": ("graph",),
                                               "both": ("legacy", "graph")}
#: Tensor layouts of the activations (filters follow: KCRS for NCHW, KRSC for NHWC).
LAYOUTS: Tuple[str, ...] = ("NCHW", "NHWC")

#: dtype name -> (cudnnDataType_t, bytes per element)
DTYPES: Dict[str, Tuple[int, int]] = {"float32": (0, 4), "float64": (1, 8), "float16": (2, 2),
                                      "bfloat16": (9, 2)}
DTYPE_CODES: Dict[int, str] = {code: name for name, (code, _) in DTYPES.items()}
#: math mode name -> cudnnMathType_t. "default" lets cuDNN use TF32 tensor cores on Ampere and
#: later; "fma" is strict fp32 (CUDNN_FMA_MATH).
MATH_MODES: Dict[str, int] = {"default": 0, "tensor_op": 1, "tensor_op_allow_conversion": 2,
                              "fma": 3}
MATH_NAMES: Dict[int, str] = {code: name for name, code in MATH_MODES.items()}


def packed_strides(c: int, h: int, w: int, layout: str) -> Tuple[int, int, int, int]:
    """The (n, c, h, w) strides, in elements, of a packed N x c x h x w tensor stored in
    ``layout`` (the planner's shapes and the core's descriptors both use them)."""
    return (c * h * w, h * w, w, 1) if layout == "NCHW" else (h * w * c, 1, w * c, c)


def packed_strides_nd(c: int, spatial: Tuple[int, ...], layout: str) -> Tuple[int, ...]:
    """The (n, c, *spatial) strides, in elements, of a packed tensor of ``c`` channels and
    the extents ``spatial`` (outermost first: (h, w), or (d, h, w)) stored channels first
    (``layout`` NCHW: NCDHW in 3-D) or channels last (NHWC: NDHWC); :func:`packed_strides`
    for two axes."""
    inner, out = 1, []
    for e in reversed(spatial):
        out.append(inner)
        inner *= e
    out.reverse()
    if layout == "NCHW":
        return (c * inner, inner, *out)
    return (inner * c, 1, *(x * c for x in out))


def default_math(dtype: str) -> str:
    """The math mode a study or a user who names none gets for ``dtype``: ``tensor_op`` for
    float16 and bfloat16, ``default`` (TF32 allowed on Ampere and later) otherwise. Under
    cuDNN's default math the legacy API leaves tensor cores out of half-precision
    convolutions: on the H200 (cuDNN 9.14) ResNet-18's kernels at batch 256 took 53.1 ms
    (NCHW) and 150.2 ms (NHWC) in float16 with unlimited workspace, and 12.6 and 6.3 ms with
    tensor-op math (results/h200/engines), which is also what PyTorch asks for."""
    return "tensor_op" if dtype in ("float16", "bfloat16") else "default"

#: A workspace limit that admits every algorithm.
UNLIMITED = 2**62

#: BVLC Caffe master commit the patch series applies to (caffe_patch/README.md).
CAFFE_COMMIT = "99bd99795dcdf0b1d3086a8d67ab1782a8a08383"

#: cuDNN's algorithm enums (cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t) by value, without
#: the common prefix; checked against cudnn.h by tests/cython/test_cudnn_header.py.
ALGO_NAMES: Dict[str, Tuple[str, ...]] = {
    "fwd": ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
            "WINOGRAD", "WINOGRAD_NONFUSED"),
    "bwd_data": ("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"),
    "bwd_filter": ("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                   "FFT_TILING"),
}


def algo_name(op: str, algo: int) -> str:
    """cuDNN's name of algorithm ``algo`` of ``op`` (``IMPLICIT_PRECOMP_GEMM``), or ``algo N``."""
    names = ALGO_NAMES.get(op, ())
    return names[algo] if 0 <= algo < len(names) else f"algo {algo}"


# Note [Choices]
#     A *choice* is what a micro-batch runs: a legacy algorithm (``algo`` >= 0, its math type,
#     ``engine`` empty) or a graph-API engine config (``algo`` -1, ``engine`` its text form).
#     An engine config is an engine's global index and its knob choices, written
#     ``eng12[k3=1,k7=0]``: knobs by cudnnBackendKnobType_t value, sorted, without brackets
#     when there are none. The text is the config's identity everywhere: benchmark records,
#     the cache, plan records and the C API; :func:`parse_engine` reads it back. A *slab
#     choice* runs one engine config over ``P`` pieces of the outermost spatial axis (Note
#     [Slabs below one sample] in ucudnn/plan/slabs.py), written ``eng12[k3=1]/4``
#     (:func:`slab_choice`, :func:`split_slabs`); its engine is the config's. Planners see
#     only (time, workspace) per choice and never look inside.
GRAPH_ALGO = -1
#: cuDNN's numerical notes of graph engines (cudnnBackendNumericalNote_t) by value, without
#: the common prefix; the core reports an engine's notes as a bit mask (bit i: note i).
NUMERICAL_NOTES: Tuple[str, ...] = (
    "TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT",
    "NONDETERMINISTIC", "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6",
    "WINOGRAD_TILE_13x13", "STRICT_NAN_PROP")
#: The notes of the graph engines that are Winograd convolutions (Note [Winograd in both
#: families] in ucudnn/plan/dp.py).
WINOGRAD_NOTES = sum(1 << i for i, n in enumerate(NUMERICAL_NOTES) if n.startswith("WINOGRAD"))


def note_names(mask: int) -> Tuple[str, ...]:
    """The numerical notes of a bit mask, by name (``note 12`` for one cuDNN added later)."""
    return tuple(NUMERICAL_NOTES[i] if i < len(NUMERICAL_NOTES) else f"note {i}"
                 for i in range(max(mask.bit_length(), 0)) if mask >> i & 1)

_ENGINE_TEXT = re.compile(
    r"eng(\d+)(?:\[((?:k\d+=-?\d+)(?:,k\d+=-?\d+)*)\])?(?:/([1-9]\d*))?\Z")
#: the most pieces a slab choice has (graph.h's UCG_MAX_SLABS)
MAX_SLABS = 16


def engine_text(engine: int, knobs: Sequence[Tuple[int, int]]) -> str:
    """The text form of an engine config (Note [Choices])."""
    body = ",".join(f"k{t}={v}" for t, v in sorted((int(t), int(v)) for t, v in knobs))
    return f"eng{int(engine)}[{body}]" if body else f"eng{int(engine)}"


def parse_engine(text: str) -> Tuple[int, Tuple[Tuple[int, int], ...]]:
    """``(engine, ((knob type, value), ...))`` of an engine config's text, or of a slab
    choice's config; InputError if it is neither."""
    m = _ENGINE_TEXT.match(text or "")
    if not m or (m.group(3) and not 2 <= int(m.group(3)) <= MAX_SLABS):
        raise InputError(f"field 'engine': {text!r} is not an engine config "
                         "(expected eng<index> or eng<index>[k<type>=<value>,...], and "
                         f"/<pieces> of 2..{MAX_SLABS} for a slab choice)")
    knobs = tuple((int(t), int(v)) for t, v in
                  (kv[1:].split("=") for kv in m.group(2).split(","))) if m.group(2) else ()
    return int(m.group(1)), knobs


def split_slabs(text: str) -> Tuple[str, int]:
    """``(engine config, pieces)`` of a choice's engine text: pieces 1 for a config run
    whole, P for a slab choice ``<config>/P`` (Note [Choices]); InputError for neither."""
    parse_engine(text)
    base, _, pieces = text.partition("/")
    return base, int(pieces) if pieces else 1


def slab_choice(engine: str, pieces: int) -> str:
    """The text of engine config ``engine`` run over ``pieces`` slabs (Note [Choices])."""
    base, whole = split_slabs(engine)
    if whole != 1 or not 2 <= pieces <= MAX_SLABS:
        raise InputError(f"field 'engine': {engine!r} over {pieces} slabs")
    return f"{base}/{int(pieces)}"


def focus_configs(proposed: Sequence[str], focus: Optional[Iterable[str]]) -> list:
    """Of the engine configs ``proposed`` at one size (in the heuristics' order), those to
    try under ``focus`` (Note [Graph focus in the pruned search]): the ones ``focus`` names;
    where there are none, those of an engine it names; where there are none either (or no
    focus), all."""
    if not focus:
        return list(proposed)
    focus = set(focus)
    exact = [e for e in proposed if e in focus]
    if exact:
        return exact
    engines = {parse_engine(e)[0] for e in focus}
    return [e for e in proposed if parse_engine(e)[0] in engines] or list(proposed)


#: workspace tiers below its cap that a pruned graph search also covers, and how many configs
#: each (Note [Graph choices within the cap] in cython/ucudnn/_graph.pyx)
GRAPH_TIERS = (0, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30)
TIER_CONFIGS = 2


def configs_within(ranked: Sequence[str], build: Callable[[str], Optional[int]],
                   max_configs: int, cap: int, tiers: Sequence[int] = GRAPH_TIERS,
                   per_tier: int = TIER_CONFIGS) -> list:
    """The engine configs a pruned search tries at one size, walking the heuristics' order
    ``ranked`` (Note [Graph choices within the cap]): ``(engine, workspace bytes or None)``,
    None where ``build(engine)`` says the config does not build (kept: the benchmark reports
    it failed). A config that builds joins where its workspace fits ``cap`` and it is among
    the first ``max_configs`` that fit ``cap``, or among the first ``per_tier`` that fit a
    tier of ``tiers`` below ``cap``. The walk ends once every such quota is met, or after
    ``6 * max_configs`` builds; ``max_configs`` 0 keeps every config that fits ``cap``."""
    quota = {t: per_tier for t in tiers if t < cap}
    quota[cap] = max_configs
    count = dict.fromkeys(quota, 0)
    out, built = [], 0
    for engine in ranked:
        if max_configs > 0 and (built >= 6 * max_configs
                                or all(count[t] >= q for t, q in quota.items())):
            break
        ws = build(engine)
        built += 1
        if ws is None:
            out.append((engine, None))
            continue
        fits = [t for t in quota if ws <= t]
        if fits and (max_configs <= 0 or any(count[t] < quota[t] for t in fits)):
            out.append((engine, ws))
            for t in fits:
                count[t] += 1
    return out


#: engine configs over the cap tried in slabs per size (Note [Slab choices tried] in
#: ucudnn/plan/slabs.py)
SLAB_CONFIGS = 2


def slab_trials(ranked: Sequence[Tuple[str, Optional[int]]], cap: int, max_pieces: int,
                configs: int = SLAB_CONFIGS) -> List[Tuple[str, List[int]]]:
    """Note [Slab choices tried] in ucudnn/plan/slabs.py: of ``ranked``, ``(engine config, workspace bytes or None
    where it did not build)`` in the heuristics' order, the first ``configs`` that built
    but need more than ``cap``, each with the piece counts to try in turn: the fewest power
    of two ``p`` >= 2 with ``workspace <= cap * p``, then ``2 p``, both at most
    ``max_pieces``."""
    out: List[Tuple[str, List[int]]] = []
    for engine, ws in ranked:
        if len(out) >= configs:
            break
        if ws is None or ws <= cap:
            continue
        p = 2
        while p <= max_pieces and ws > cap * p:
            p *= 2
        if p <= max_pieces:
            out.append((engine, [q for q in (p, 2 * p) if q <= max_pieces]))
    return out


def choice_name(op: str, algo: int, math: int = 0, engine: str = "") -> str:
    """How people read a choice: ``IMPLICIT_PRECOMP_GEMM`` (``/fma`` for a math type other
    than the default) for a legacy algorithm, the engine config's text for a graph one."""
    if engine:
        return engine
    name = algo_name(op, algo)
    return name if not math else f"{name}/{MATH_NAMES.get(math, math)}"


# --------------------------------------------------------------------------- enumerations

class Choices:
    """One enumeration and every spelling of it (Note [Enum spellings]).

    ``names``: the canonical names (what ucudnn prints and stores); ``codes``: name -> the
    number of caffe.proto and the C API (None: none); ``proto``: name -> the caffe.proto
    spelling (``POWER_OF_TWO``)."""

    def __init__(self, what: str, names: Sequence[str], codes: Optional[Mapping[str, int]] = None,
                 proto: Optional[Mapping[str, str]] = None):
        self.what, self.names = what, tuple(names)
        self.codes = dict(codes or {})
        self.proto = dict(proto or {})
        self._by_key: Dict[str, str] = {}
        for name in self.names:
            for spelling in (name, self.proto.get(name, name)):
                self._by_key[_fold(spelling)] = name

    def __call__(self, value, field: Optional[str] = None) -> str:
        """The canonical name of ``value`` (any spelling, or a code); an :class:`InputError`
        naming ``field`` otherwise."""
        if isinstance(value, int) and not isinstance(value, bool):
            for name, code in self.codes.items():
                if code == value:
                    return name
        elif isinstance(value, str) and _fold(value) in self._by_key:
            return self._by_key[_fold(value)]
        raise InputError(f"{field or self.what}: unknown {self.what} {value!r} (expected one "
                         f"of {', '.join(self.names)})")

    def code(self, name: str) -> int:
        return self.codes[self(name)]


def _fold(text: str) -> str:
    return re.sub(r"[\s_-]", "", text).lower()


# Note [Enum spellings]
#     Every enumeration is accepted in any letter case, with or without underscores, and in
#     its caffe.proto spelling: ``powerOfTwo``, ``POWER_OF_TWO``, ``power_of_two`` and
#     ``poweroftwo`` are one policy; ``FMA`` and ``fma`` one math mode. What ucudnn prints and
#     stores is the canonical name (the first column of each table here). The codes are
#     caffe.proto's enum values and the C API's (cython/ucudnn_types.h).
POLICY = Choices("policy", POLICIES, {p: i for i, p in enumerate(POLICIES)},
                 {"undivided": "UNDIVIDED", "powerOfTwo": "POWER_OF_TWO", "all": "ALL"})
OPTIMIZER = Choices("optimizer", OPTIMIZERS, {o: i for i, o in enumerate(OPTIMIZERS)},
                    {"dp": "DP", "ilp": "ILP", "shared": "SHARED"})
MATH = Choices("math mode", tuple(MATH_MODES), MATH_MODES,
               {"default": "DEFAULT_MATH", "tensor_op": "TENSOR_OP",
                "tensor_op_allow_conversion": "TENSOR_OP_ALLOW_CONVERSION", "fma": "FMA"})
SEARCH = Choices("search", SEARCHES)
ENGINE = Choices("engine family", ENGINES, {"legacy": 0, "graph": 1, "both": 2},
                 {"legacy": "LEGACY", "graph": "GRAPH", "both": "BOTH"})
LAYOUT = Choices("layout", LAYOUTS, {"NCHW": 0, "NHWC": 1}, {"NCHW": "NCHW", "NHWC": "NHWC"})
DTYPE = Choices("dtype", tuple(DTYPES), {n: c for n, (c, _) in DTYPES.items()},
                {"float32": "float", "float64": "double", "float16": "half"})


def normalise_policy(policy, field: str = "policy") -> str:
    """A policy by name (any spelling, Note [Enum spellings]) or by code; a
    :class:`PlanError` naming ``field`` otherwise."""
    try:
        return POLICY(policy, field)
    except InputError as e:
        raise PlanError(str(e)) from None


# --------------------------------------------------------------------------- status and errors

class Status(enum.IntEnum):
    """The C API's status codes (cython/ucudnn_types.h)."""
    OK = 0
    INVALID = 1
    CUDNN = 2
    CUDA = 3
    PLAN = 4
    PYTHON = 5


class UcudnnError(Exception):
    """Base of the errors ucudnn raises on purpose; ``status`` is what the C API returns."""
    status = Status.PYTHON


class InputError(UcudnnError, ValueError):
    """Bad input from a user or a host; the message names the source, layer and field.

    The CLI reports these as one line with exit status 2; any other exception is a bug and
    is reported as one."""
    status = Status.INVALID


class PlanError(InputError):
    """No plan can be made; the message names the kernel and the cause."""
    status = Status.PLAN


# --------------------------------------------------------------------------- sizes

_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    for _suffix in (_p, _p + "b", _p + "ib"):
        _UNITS[_suffix] = 1024 ** _i
_SIZE_RE = re.compile(r"^\s*([0-9]+)(?:\.([0-9]*))?\s*([a-zA-Z]*)\s*$|^\s*\.([0-9]+)\s*([a-zA-Z]*)\s*$")
#: The largest byte size: what a signed 64-bit integer holds (``size_t`` and int64 fields of
#: the core, caffe.proto and the cache). ``unlimited`` is :data:`UNLIMITED`.
SIZE_MAX = 2**63 - 1
#: digits read at most; longer numbers are refused before any arithmetic
_SIZE_DIGITS = 40


def parse_size(text, what: str = "size") -> int:
    """Parse a byte count (Note [Size units]); ``what`` names the field in the error message.

    Exact integer arithmetic throughout (``1.5KiB`` is 1536; ``2**53 + 1`` stays itself): a
    fraction is read as a numerator and a power of ten, never through a float. The value is
    at most :data:`SIZE_MAX`; anything larger is an :class:`InputError`."""
    if isinstance(text, bool):
        raise InputError(f"{what}: expected a byte size, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise InputError(f"{what}: size must not be negative, got {text}")
        if text > SIZE_MAX:
            raise InputError(f"{what}: {text} bytes is more than the largest size, "
                             f"{SIZE_MAX} (2^63 - 1)")
        return text
    s = str(text).strip()
    if s.lower() in ("unlimited", "inf", "none"):
        return UNLIMITED
    shown = s if len(s) <= 40 else s[:20] + "..." + s[-10:]
    if s.startswith("-"):
        raise InputError(f"{what}: size must not be negative, got {shown!r}")
    m = _SIZE_RE.match(s)
    if m:
        whole, frac, unit = (m.group(1), m.group(2) or "", m.group(3)) if m.group(1) \
            is not None else ("0", m.group(4), m.group(5))
    if not m or unit.lower() not in _UNITS:
        raise InputError(
            f"{what}: cannot parse {shown!r} as a byte size "
            "(examples: 8MiB, 64M, 512MB, 1GiB, 1048576, unlimited)")
    whole, frac = whole.lstrip("0") or "0", frac.rstrip("0")
    if len(whole) > _SIZE_DIGITS or len(frac) > _SIZE_DIGITS:
        raise InputError(f"{what}: {shown!r} is more than the largest size, {SIZE_MAX} bytes "
                         "(2^63 - 1)")
    scaled = (int(whole) * 10 ** len(frac) + int(frac or "0")) * _UNITS[unit.lower()]
    value, rest = divmod(scaled, 10 ** len(frac))
    if rest:
        raise InputError(f"{what}: {shown!r} is not a whole number of bytes")
    if value > SIZE_MAX:
        raise InputError(f"{what}: {shown!r} is {value} bytes, more than the largest size, "
                         f"{SIZE_MAX} (2^63 - 1)")
    return value


def format_size(n: int) -> str:
    """Short human form: ``64.0MiB``, ``1.5GiB``, ``0B``, ``unlimited``."""
    if n >= UNLIMITED:
        return "unlimited"
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"
