"""The CPU tests' fake core (tests/support/fake_core.py) offers the compiled core's interface.

The core's side is read from its sources (cython/ucudnn/): the names ``ucudnn._core``
re-exports from the core's modules, each with its ``def`` signature, its class's constructor
or its value, and ``Kernel``'s methods, properties and attributes (``cdef public`` and
``cdef readonly`` in _kernel.pxd). The fake's side is read from the fake itself. Each side's
names are those of the other, apart from the ones listed below with why; the signatures of
the names both have agree in parameter names, order and defaults. So a public name added to,
renamed in or dropped from one side only fails here until the other side follows or the
name is listed. What code outside the core may set on a Kernel is the same on both sides (the
core's ``cdef public`` attributes), and the planners' state is neither side's (Note [Planner
state beside the kernel] in ucudnn/measure/planner_state.py).
"""
import ast
import builtins
import inspect
import re
from pathlib import Path

import pytest

from fake_core import FakeCore
from ucudnn import vocab
from ucudnn.measure.planner_state import PlannerState
from ucudnn.plan.conv import ConvShape

CORE = Path(__file__).resolve().parents[2] / "cython" / "ucudnn"

# Names of ucudnn._core the fake does not offer: no Python of the package runs them over the
# fake. Each with why.
CORE_ONLY = {
    "CudaError": "the fake raises CoreError for every failed call; the package catches that",
    "GraphPlan": "built by the core's own graph calls only",
    "random_values": "for the core's GPU tests (the fill DeviceBuffer.fill_random makes)",
    "thread_handle_stats": "the core's per-thread cuDNN handles, for its own tests",
    "check_tolerance": "Note [Graph results checked] on real results; the fake refuses by "
                       "FakeCore.inaccurate_at",
    "relative_error": "the same",
    "RETIME_MARGIN": "how the core re-times; the fake's model times nothing",
    "RETIME_ALWAYS_MS": "the same",
    "RETIME_WARMUP": "the same (the default of Kernel.benchmark's time_warmup, checked there)",
    "HEUR_MODES": "the graph API's heuristics modes, asked by the core only",
    "NOTE_TENSOR_CORE": "numerical notes the core filters engine configs by",
    "NOTE_DOWN_CONVERT": "the same",
    "NOTE_REDUCED_PRECISION": "the same",
    "BEHAVIOR_RUNTIME_COMPILATION": "a behaviour note the core counts in graph_stats",
    "CHECK_ELEMENTS": "how much of an output the core's check compares",
    "STATUS_INACCURATE": "read by scripts/graph_accuracy.py, which needs the real core; the "
                         "fake writes the same -2",
}
# Names of FakeCore that are its controls and records for tests, not the core's.
FAKE_ONLY = {"gpus", "model", "version", "memory_free", "calls", "unsupported", "true_workspace",
             "plans_set", "time_factor", "engine_notes", "inaccurate_at", "current_device",
             "perfs"}
# Kernel's public members the fake's Kernel does not offer, with why.
KERNEL_CORE_ONLY = {
    "run": "runs a convolution on device buffers (GPU scripts); the fake runs nothing",
    "address": "the C struct's address for the C API; the fake is never handed to C",
    "layout": "the shape's layout, read by the core itself; the fake keeps the shape",
    "max_graph_configs": "set by GPU scripts (bench_engines.py, graph_accuracy.py) only; the "
                         "fake lets them set it (Kernel.PUBLIC)",
    "graph_stats": "printed by the same GPU scripts",
    "last_graph_error": "why the core's graph family found no choice; the fake's model says",
    "last_benchmark_held": "the workspace the core held to offer it, read by GPU tests",
}
# What the fake's Kernel records for tests, not the core's, and the names it lets code outside
# the core set (pinned to the core's below).
KERNEL_FAKE_ONLY = {"held", "focus_seen", "accepted_configs", "PUBLIC"}


# -- the core's side, from its sources ---------------------------------------------------------

def _split_top(text, sep=","):
    """``text`` split at ``sep`` outside brackets and strings."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def _params(text, constants):
    """``[(name, default)]`` of a Cython parameter list, ``self`` left out; a default is its
    value where it is a literal or a constant of the core, else ``...``; no default:
    ``inspect.Parameter.empty``."""
    out = []
    for p in _split_top(text):
        p = p.strip().replace(" not None", "")
        decl, _, default = p.partition("=")
        name = re.findall(r"[A-Za-z_]\w*", decl)[-1]
        if name == "self":
            continue
        if not _:
            value = inspect.Parameter.empty
        else:
            default = default.strip()
            try:
                value = ast.literal_eval(default)
            except (ValueError, SyntaxError):
                value = constants.get(default, ...)
        out.append((name, value))
    return out


def _defs(text, indent):
    """``{name: parameter text}`` of the ``def``s at ``indent`` in ``text``."""
    pat = re.compile(rf"^{indent}def (\w+)\((.*?)\):", re.S | re.M)
    return {m.group(1): m.group(2) for m in pat.finditer(text)}


def _class_body(text, name):
    m = re.search(rf"^(?:cdef )?class {name}\b.*?:\n((?:(?:    .*)?\n)*)", text, re.M)
    return m.group(1)


def _core_constants(sources):
    consts = {}
    for text in sources.values():
        for m in re.finditer(r"^([A-Z_][A-Z0-9_]*) = (.+)$", text, re.M):
            try:
                consts[m.group(1)] = ast.literal_eval(m.group(2))
            except (ValueError, SyntaxError):
                pass
    return consts


def core_surface():
    """``(module, kernel)``: ``{name: ("def", params) | ("class", params of its constructor,
    bases) | ("value", None)}`` for what ucudnn._core re-exports from the core's modules, and
    ``{name: ("method", params) | ("data", None)}`` for Kernel's public members."""
    sources = {p.stem: p.read_text() for p in CORE.glob("*.pyx")}
    consts = _core_constants(sources)
    facade = sources["_core"]
    module = {}
    for m in re.finditer(r"^from ucudnn\.(_\w+) import \(?([^)]*?)\)?\n(?=\S|\n|\Z)", facade,
                         re.M | re.S):
        src = sources[m.group(1)]
        for name in (n.strip() for n in m.group(2).replace("\n", " ").split(",")):
            if not name or name.startswith("_"):
                continue
            defs = _defs(src, "")
            cls = re.search(rf"^(?:cdef )?class {name}\b(?:\((.*?)\))?:", src, re.M)
            if name in defs:
                module[name] = ("def", _params(defs[name], consts))
            elif cls:
                body = _defs(_class_body(src, name), "    ")
                init = body.get("__init__", body.get("__cinit__", ""))
                bases = tuple(b.strip() for b in (cls.group(1) or "").split(",") if b.strip())
                module[name] = ("class", _params(init, consts), bases)
            else:
                assert re.search(rf"^{name} = |^(?:\w+, )*{name}(?:, \w+)* = ", src, re.M), \
                    f"{name}: re-exported by _core.pyx but not defined in {m.group(1)}.pyx"
                module[name] = ("value", consts.get(name, ...))
    body = _class_body(sources["_kernel"], "Kernel")
    kernel = {}
    props = set(re.findall(r"^    @property\n    def (\w+)\(", body, re.M))
    for name, params in _defs(body, "    ").items():
        if not name.startswith("_"):
            kernel[name] = ("data", None) if name in props else \
                ("method", _params(params, consts))
    kernel["__init__"] = ("method", _params(_defs(body, "    ")["__init__"], consts))
    for name in kernel_attributes("public") | kernel_attributes("readonly"):
        kernel[name] = ("data", None)
    return module, kernel


def kernel_attributes(access):
    """The names of Kernel's ``cdef public`` or ``cdef readonly`` attributes (_kernel.pxd)."""
    pxd = (CORE / "_kernel.pxd").read_text()
    return {name.strip()
            for line in re.findall(rf"^    cdef {access} \w+ ([\w, ]+)", pxd, re.M)
            for name in line.split(",")}


# -- the fake's side -----------------------------------------------------------------------------

def _signature(fn):
    """``[(name, default)]`` of a Python callable, ``self`` left out."""
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()
            if p.name != "self"]


def fake_surface():
    core = FakeCore()
    module = {}
    for name in dir(core):
        if name.startswith("_"):
            continue
        obj = getattr(core, name)
        if isinstance(obj, type):
            init = obj.__init__
            params = _signature(init) if inspect.isfunction(init) else None
            module[name] = ("class", params, obj)
        elif callable(obj):
            module[name] = ("def", _signature(obj))
        else:
            module[name] = ("value", obj)
    kern = core.Kernel(ConvShape(3, 8, 8, 4, 3, 3), "fwd", 4)
    kernel = {"__init__": ("method", _signature(core.Kernel.__init__))}
    for name in set(dir(core.Kernel)) | set(vars(kern)):
        if name.startswith("_"):
            continue
        attr = getattr(core.Kernel, name, None)
        kernel[name] = ("method", _signature(attr)) if inspect.isfunction(attr) else \
            ("data", None)
    return module, kernel


# -- the pins ------------------------------------------------------------------------------------

def test_the_fake_core_offers_the_core_s_names():
    core, _ = core_surface()
    fake, _ = fake_surface()
    assert set(CORE_ONLY) <= set(core), set(CORE_ONLY) - set(core)
    assert not FAKE_ONLY & set(core), FAKE_ONLY & set(core)
    assert sorted(set(core) - set(CORE_ONLY)) == sorted(set(fake) - FAKE_ONLY)


def test_the_fake_kernel_offers_the_core_kernel_s_members():
    _, core = core_surface()
    _, fake = fake_surface()
    assert set(KERNEL_CORE_ONLY) <= set(core), set(KERNEL_CORE_ONLY) - set(core)
    assert sorted(set(core) - set(KERNEL_CORE_ONLY)) == sorted(set(fake) - KERNEL_FAKE_ONLY)
    for name in set(core) & set(fake):
        assert core[name][0] == fake[name][0], f"Kernel.{name}: {core[name][0]} in the core"


@pytest.mark.parametrize("side", ["module", "kernel"])
def test_the_fake_core_s_signatures_are_the_core_s(side):
    """Parameter names, their order, and the defaults (where the core's is a literal or a
    constant of the core; ``...`` only says that there is one)."""
    core = core_surface()[side == "kernel"]
    fake = fake_surface()[side == "kernel"]
    checked = 0
    for name in sorted(set(core) & set(fake)):
        kind, params = core[name][:2]
        assert fake[name][0] == kind, f"{side} {name}: a {kind} in the core"
        if kind == "value":
            if params is not ...:
                assert fake[name][1] == params, f"{name}: {params!r} in the core"
            continue
        if kind == "class" and fake[name][1] is None:
            # an exception class: raised by the fake itself, caught by the package; it is one
            # of the classes the core's derives from
            for base in core[name][2]:
                want = fake[base][2] if base in fake else \
                    getattr(vocab, base, None) or getattr(builtins, base)
                assert issubclass(fake[name][2], want), f"{name}: not a {base}"
            continue
        got = fake[name][1]
        if params is None:
            continue
        assert [p for p, _ in got] == [p for p, _ in params], f"{side} {name}"
        for (p, want), (_, have) in zip(params, got):
            assert (want is inspect.Parameter.empty) == (have is inspect.Parameter.empty), \
                f"{side} {name}({p}): a default on one side only"
            if want not in (inspect.Parameter.empty, ...):
                assert have == want, f"{side} {name}({p}={want!r}): the fake has {have!r}"
        checked += 1
    assert checked >= (5 if side == "module" else 8)


def test_the_surface_is_read_from_the_sources():
    """The reader finds what the core is known to have: a guard against a reader that finds
    nothing and so pins nothing."""
    module, kernel = core_surface()
    assert module["time_run"][1][:3] == [("kern", inspect.Parameter.empty),
                                         ("handle", inspect.Parameter.empty),
                                         ("a", inspect.Parameter.empty)]
    assert module["Kernel"][1][-1] == ("instances", 1)
    assert module["GRAPH_CONFIGS_DEFAULT"] == ("value", 8)
    assert module["CoreError"][2] == ("UcudnnError", "RuntimeError")
    assert kernel["benchmark"][1][-2:] == [("time_warmup", 5), ("retime_last", True)]
    assert kernel["workspace_size"] == ("data", None)
    assert {"graph_focus", "plan", "last_unchecked_sizes", "n"} <= set(kernel)


def test_the_fake_kernel_lets_code_set_what_the_core_s_lets_set():
    """Code outside the core sets only a Kernel's ``cdef public`` attributes; the fake
    refuses the rest as the compiled Kernel does, so that the CPU tests catch production code
    that stores something on a kernel the core would not take."""
    public, readonly = kernel_attributes("public"), kernel_attributes("readonly")
    assert "graph_focus" in public and {"plan", "instances", "n"} <= readonly
    assert FakeCore().Kernel.PUBLIC == public
    kern = FakeCore().Kernel(ConvShape(3, 8, 8, 4, 3, 3), "fwd", 4)
    kern.graph_focus = ("eng0",)
    for name in sorted(readonly - set(KERNEL_CORE_ONLY)):
        with pytest.raises(AttributeError, match=f"attribute '{name}' .* is not writable"):
            setattr(kern, name, None)
    with pytest.raises(AttributeError):
        kern.bench = {}


def test_the_compiled_kernel_refuses_what_the_fake_refuses():
    """The same on the compiled Kernel, made without its ``__init__`` (which needs a GPU):
    its readonly attributes and the planner state's fields cannot be set, its public ones
    can, and the planners' table can hold it weakly."""
    import gc
    import weakref
    from ucudnn._kernel import Kernel
    from ucudnn.measure.planner_state import planner_state
    kern = Kernel.__new__(Kernel)
    for name in kernel_attributes("public"):
        setattr(kern, name, getattr(kern, name))
    for name in sorted(kernel_attributes("readonly")) + sorted(PlannerState.__dataclass_fields__):
        with pytest.raises(AttributeError):
            setattr(kern, name, None)
    assert planner_state(kern) is planner_state(kern)
    alive = weakref.ref(kern)
    del kern
    gc.collect()
    assert alive() is None


def test_the_planner_state_is_not_the_kernel_s():
    """Note [Planner state beside the kernel]: what the planners measured and chose is
    :class:`PlannerState`'s, no member of the core's Kernel or of the fake's."""
    fields = set(PlannerState.__dataclass_fields__)
    assert fields == {"settings", "bench", "bench_record", "timing"}
    assert not fields & set(core_surface()[1])
    assert not fields & set(fake_surface()[1])


# -- the shape checks ----------------------------------------------------------------------------

def _broken(shape, **fields):
    """``shape`` with ``fields`` set past ConvShape's own checks, as a caller's object may be."""
    for k, v in fields.items():
        object.__setattr__(shape, k, v)
    return shape


@pytest.mark.parametrize("shape,match", [
    (ConvShape(1 << 12, 1 << 10, 1 << 10, 4, 3, 3), "field 'x_strides': 4 positive strides of "
                                                     "at most 2147483647"),
    (ConvShape.nd(2, 4, (1 << 11, 1 << 10, 1 << 10), (1, 1, 1)), "field 'x_strides': 5"),
    (_broken(ConvShape(3, 8, 8, 4, 3, 3), layout="NCDHW"), "field 'layout': unknown layout"),
    (_broken(ConvShape.nd(3, 4, (4, 8, 8), (3, 3, 3)), d=-1), "field 'd': a depth >= 1"),
    (_broken(ConvShape(3, 8, 8, 4, 3, 3), x_strides=(192, 64, 8, 1, 1)),
     "field 'x_strides': 4 positive strides"),
])
def test_the_fake_kernel_refuses_the_shapes_the_core_refuses(shape, match):
    """The core's shape check (``kernel_shape_arguments``, a Python function of the compiled
    module that needs no GPU) and the fake's Kernel refuse alike, 2-D and 3-D."""
    from ucudnn._kernel import kernel_shape_arguments
    with pytest.raises(vocab.InputError, match=match) as core:
        kernel_shape_arguments(shape, "conv1")
    with pytest.raises(vocab.InputError) as fake:
        FakeCore().Kernel(shape, "fwd", 4, name="conv1")
    assert str(fake.value) == str(core.value) and "layer 'conv1'" in str(core.value)


def test_the_core_and_the_fake_kernel_check_their_shape_with_one_function():
    source = (CORE / "_kernel.pyx").read_text()
    init = source[source.index("    def __init__(self, shape, op"):]
    init = init[:init.index("\n    def ") if "\n    def " in init else None]
    assert "kernel_shape_arguments(shape, name)" in init
    fake = inspect.getsource(FakeCore().Kernel.__init__)
    assert "kernel_shape_arguments(shape, name)" in fake


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
def test_the_fake_kernel_takes_a_3d_shape(layout):
    s = ConvShape.nd(4, 8, (6, 10, 12), (3, 3, 3), pad=1, stride=(1, 2, 2), layout=layout)
    from ucudnn._kernel import kernel_shape_arguments
    assert kernel_shape_arguments(s, None) == (s.layout, 5, s.packed_x_strides(),
                                               s.packed_y_strides())
    kern = FakeCore().Kernel(s, "bwd_filter", 4)
    assert kern.extent_bytes(0, 2) == 2 * 4 * 6 * 10 * 12 * 4
    assert kern.extent_bytes(1, 2) == 2 * 8 * 6 * 5 * 6 * 4
    assert kern.filter_bytes == 8 * 4 * 27 * 4
