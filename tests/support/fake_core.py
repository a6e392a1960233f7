"""A stand-in for the compiled core (``ucudnn._core``) on a machine without a GPU.

:class:`FakeCore` has the core's interface as ucudnn's Python uses it -- ``Kernel(shape, op, n,
dtype, math, name, instances)`` with ``benchmark``, ``hold_benchmark_buffers``, ``set_plan``,
``workspace_for``, ``workspace_size``, ``last_benchmark_workspace``, ``benchmark_seconds``, the
check of graph results (``refused_engines``, ``refuse_engines``, ``last_unchecked_sizes``, over
``FakeCore.inaccurate_at``), ``plan`` (what ``set_plan`` was given) and ``graph_focus`` (what
the pruned search sets); ``device_count()``, ``device_info()``, ``set_device()`` (per
thread, as CUDA's current device), ``cudnn_version()``, ``CoreError``; and for the scripts
``Handle``, ``DeviceBuffer`` and ``time_run``. :func:`install` puts it where production looks the
core up (``sys.modules["ucudnn._core"]`` and the package's attribute) and forgets the device
facts ``ucudnn.measure.bench`` cached, so that ``bench.measure``, ``bench.cache_key``, the real
``BenchCache``, ``runtime`` and ``spread`` run unchanged over it.

The 'GPU' is a model: ``model(kernel, b)`` gives the algorithms cuDNN would find at micro-batch
size ``b``, as :class:`~ucudnn.plan.table.AlgoPerf` (time, workspace, math, and whether cuDNN
calls the choice deterministic: the records' last field, None where the model does not say). :func:`two_algorithms`
is the default; :func:`replay` answers from recorded tables (tests/data/h200_all_sizes). What
``workspace_for`` (and so ``set_plan``) answers is the model's workspace too, unless a test
changes it (``true_workspace``) or makes an algorithm unsupported (``unsupported``), as cuDNN
can disagree with a stale cache.

The fake checks a Kernel's arguments, its shape (2-D or 3-D) and a benchmark's with the core's
own Python checks (``ucudnn._kernel.kernel_arguments``, ``kernel_shape_arguments`` and
``benchmark_arguments``), and
tests/cython/test_fake_core.py pins its names and signatures to the core's sources.
"""
from __future__ import annotations

import dataclasses
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Sequence, Set, Tuple

from math import prod

from ucudnn._kernel import benchmark_arguments, kernel_arguments, kernel_shape_arguments
from ucudnn.plan.table import AlgoPerf
from ucudnn.vocab import DTYPES, MATH_MODES, InputError, PlanError, UcudnnError

MiB = 1 << 20
GiB = 1 << 30


class CoreError(UcudnnError, RuntimeError):
    """The core's error (a failed CUDA or cuDNN call)."""


@dataclass(frozen=True)
class Call:
    """One ``Kernel.benchmark`` call: what was asked, of which kernel, on which device."""
    name: str
    shape: object
    op: str
    n: int
    sizes: Tuple[int, ...]
    repeats: int
    workspace_cap: int
    time_iters: int
    dtype: str
    math: str
    device: int
    families: Tuple[str, ...] = ("legacy",)


def with_engine_configs(kern, b: int) -> List[AlgoPerf]:
    """:func:`two_algorithms` and two graph engine configs: eng7[k3=1], 0.1 ms per sample and
    0.05 ms per call with 2 MiB of workspace per sample; eng0, 0.6 ms per sample, none."""
    return two_algorithms(kern, b) + [AlgoPerf(-1, 0.1 * b + 0.05, 2 * b * MiB, 0, "eng7[k3=1]"),
                                      AlgoPerf(-1, 0.6 * b, 0, 0, "eng0")]


def two_algorithms(kern, b: int) -> List[AlgoPerf]:
    """Algorithm 0: 1 ms per sample, no workspace; algorithm 1: 0.2 ms per sample and 0.05 ms
    per call, 1 MiB of workspace per sample."""
    return [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.2 * b + 0.05, b * MiB)]


def replay(tables: Mapping[Tuple[str, str], Mapping[int, Sequence[AlgoPerf]]],
           key: Callable = lambda kern: (kern.name, kern.op)):
    """A model answering from recorded tables, ``{(layer, op): {b: [AlgoPerf]}}`` (``key``:
    how a kernel finds its table)."""
    def model(kern, b):
        return list(tables[key(kern)][b])
    return model


class FakeCore:
    """The core's module, over a model 'GPU' (module docstring). ``gpus``: the names of the
    visible devices (their number is the device count)."""

    CoreError = CoreError
    CudnnError = CoreError
    GRAPH_CONFIGS_DEFAULT = 8           # the core's (Note [Graph choices tried] in _graph.pyx)

    def __init__(self, gpus: Sequence[str] = ("Fake GPU",), model: Callable = two_algorithms,
                 *, cudnn_version: int = 91400, memory_free: int = 80 * GiB):
        self.gpus = list(gpus)
        self.model = model
        self.version = cudnn_version
        self.memory_free = memory_free
        self.calls: List[Call] = []
        #: (layer, op, batch, algo): cuDNN rejects it for this descriptor (workspace_for raises)
        self.unsupported = set()
        #: (layer, op, batch, algo) -> bytes: what cuDNN says it needs, where not the model's
        self.true_workspace: Dict[Tuple[str, str, int, int], int] = {}
        #: (kernel name, plan.describe()) of every set_plan that succeeded, in order
        self.plans_set: List[Tuple[str, str]] = []
        self.time_factor = 1.0          # time_run: measured = predicted x this
        #: engine index -> its numerical notes (Kernel.engine_notes; absent: none)
        self.engine_notes: Dict[int, int] = {}
        #: engine index -> the micro-batch sizes at which the check of Note [Graph results
        #: checked] (cython/ucudnn/_check.pyx) refuses its configs (absent: none)
        self.inaccurate_at: Dict[int, Set[int]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()
        core = self

        class Kernel(_Kernel):
            _core = core
        self.Kernel = Kernel

        class DeviceBuffer:
            def __init__(self, nbytes):
                self.nbytes, self.ptr = int(nbytes), id(self)

            def fill_random(self, elem_size, seed=1, bfloat16=False):
                pass
        self.DeviceBuffer = DeviceBuffer

        class Handle:
            def __init__(self, stream=0):
                self.stream = stream
        self.Handle = Handle

    # -- devices -----------------------------------------------------------------------------
    def current_device(self) -> int:
        return getattr(self._local, "device", 0)

    def device_count(self) -> int:
        return len(self.gpus)

    def set_device(self, device: int) -> None:
        if not 0 <= device < len(self.gpus):
            raise CoreError(f"cudaSetDevice: invalid device ordinal (device {device})")
        self._local.device = device

    def device_info(self) -> dict:
        if not self.gpus:
            raise CoreError("cudaGetDevice: no CUDA-capable device is detected")
        d = self.current_device()
        return {"device": d, "gpu": self.gpus[d], "compute_capability": "9.0",
                "multiprocessors": 132, "memory_total": 141 * GiB,
                "memory_free": self.memory_free, "driver_cuda_version": 13000,
                "cuda_runtime_version": 13000, "cudnn_version": self.version,
                "cudnn_cudart_version": 13000}

    def cudnn_version(self) -> int:
        return self.version

    # -- the scripts' timing -----------------------------------------------------------------
    def time_run(self, kern, handle, a, b, out, workspace, workspace_size, iters=20, warmup=3,
                 alpha=1.0, beta=0.0, back_to_back=True):
        if kern.plan is None:
            raise PlanError(f"{kern.name}: kernel has no plan")
        if workspace_size < kern.workspace_size:
            raise InputError(f"{kern.name}: workspace of {workspace_size} B given, the plan "
                             f"needs {kern.workspace_size} B")
        return [kern.plan.time_ms * self.time_factor] * iters

    # -- what the core's benchmark answers ---------------------------------------------------
    def perfs(self, kern, b: int) -> List[AlgoPerf]:
        """The model's algorithms at ``b``; a math mode other than the default is the one they
        ran with where the model names none (math 0)."""
        code = MATH_MODES[kern.math]
        out = []
        for p in self.model(kern, b):
            p = p if isinstance(p, AlgoPerf) else AlgoPerf(*p)
            out.append(dataclasses.replace(p, math=code) if code and not p.math else p)
        return out


class _Kernel:
    """``ucudnn._core.Kernel`` over a :class:`FakeCore` (``_core``)."""
    _core: FakeCore = None
    #: what code outside the core may set on a Kernel: the core's ``cdef public`` attributes
    #: (cython/ucudnn/_kernel.pxd); the compiled Kernel refuses any other name, and so does
    #: this one when code outside this module sets it
    PUBLIC = frozenset({"graph_focus", "max_graph_configs", "max_slabs"})

    def __setattr__(self, name, value):
        if name not in self.PUBLIC and sys._getframe(1).f_globals.get("__name__") != __name__:
            raise AttributeError(f"attribute {name!r} of 'ucudnn._kernel.Kernel' objects is not "
                                 "writable")
        object.__setattr__(self, name, value)

    def __init__(self, shape, op, n, dtype="float32", math="default", name=None, instances=1):
        kernel_arguments(op, n, dtype, math, name, instances)       # the core's checks
        kernel_shape_arguments(shape, name)
        self.shape, self.op, self.n, self.dtype, self.math = shape, op, n, dtype, math
        self.name = name or op
        self.instances = instances
        self.plan = None                    # set by set_plan only, as the core's
        self.benchmark_seconds = {"setup": 0.0, "warmup_find": 0.0, "find": 0.0,
                                  "retime": 0.0}
        self.device = self._core.current_device()
        self.last_benchmark_workspace = 0
        self.held: List[bool] = []          # the hold_benchmark_buffers calls, in order
        self.graph_focus = None             # as the core's: engine configs tried
        self.max_slabs = 16 if shape.ndim == 3 else 0   # as the core's (no slab choices here)
        self.focus_seen: List = []          # graph_focus at each benchmark call
        self.last_unchecked_sizes: List[int] = []
        #: batch -> the engine configs the check ran and accepted there (last time)
        self.accepted_configs: Dict[int, set] = {}
        self._refused: Dict[int, str] = {}
        self._ws = 0

    # the scripts' buffers
    def extent_bytes(self, which, b):
        s = self.shape
        return prod(s.x_dims(b) if which == 0 else s.y_dims(b)) * DTYPES[self.dtype][1]

    @property
    def filter_bytes(self):
        return prod(self.shape.w_dims()) * DTYPES[self.dtype][1]

    def benchmark(self, sizes, repeats=1, workspace_cap=None, progress=None, time_iters=5,
                  families=("legacy",), time_warmup=5, retime_last=True):
        """The core's, over the model: ``time_warmup`` and ``retime_last`` (how the core orders
        its re-timing) change nothing in a model's times."""
        core = self._core
        sizes, families = benchmark_arguments(self.name, self.n, sizes, repeats, families)
        cap = 8 * GiB if workspace_cap is None else int(workspace_cap)
        t0 = time.perf_counter()
        with core._lock:
            core.calls.append(Call(self.name, self.shape, self.op, self.n, tuple(sizes), repeats,
                                   cap, time_iters, self.dtype, self.math,
                                   core.current_device(), tuple(families)))
        # as the core does: the cap, within free memory less 512 MiB
        offered = max(0, min(cap, core.memory_free - 512 * MiB))
        self.last_benchmark_workspace = offered
        out = {}
        self.focus_seen.append(self.graph_focus)
        for b in sizes:
            perfs = [p for p in core.perfs(self, b)
                     if ("graph" if p.engine else "legacy") in families]
            if self.graph_focus:        # as the core's _graph_configs
                from ucudnn.vocab import focus_configs
                kept = set(focus_configs([p.engine for p in perfs if p.engine],
                                         self.graph_focus))
                perfs = [p for p in perfs if not p.engine or p.engine in kept]
            # an algorithm that needs more than was offered is reported failed (status 3)
            out[b] = [(p.algo, 0 if p.ws_bytes <= offered else 3, p.time_ms, p.ws_bytes, p.math,
                       p.engine, p.deterministic) for p in perfs]
            if "graph" in families:
                self._check(b, out[b])
            if progress is not None:
                progress(b)
        self.benchmark_seconds["find"] += time.perf_counter() - t0
        refused = self._refused      # as the core: refused at a later size, refused at all
        for b, recs in out.items():
            out[b] = [r[:1] + (-2,) + r[2:] if r[5] and r[1] == 0 and _index(r[5]) in refused
                      else r for r in recs]
        self.last_unchecked_sizes = sorted(
            b for b in out if any(_index(e) in refused for e in self.accepted_configs.get(b, ())))
        return out

    def _check(self, b, recs):
        """The core's Note [Graph results checked] over ``core.inaccurate_at``: each config on
        the (time, workspace) front of those accepted so far is checked, fastest first."""
        self.accepted_configs[b] = set()
        accepted = []
        for i in sorted((i for i, r in enumerate(recs) if r[5] and r[1] == 0),
                        key=lambda i: (recs[i][2], recs[i][3])):
            engine, ws = recs[i][5], recs[i][3]
            if _index(engine) in self._refused:
                recs[i] = recs[i][:1] + (-2,) + recs[i][2:]
                continue
            if any(a <= ws for a in accepted):
                continue
            if b not in self._core.inaccurate_at.get(_index(engine), ()):
                accepted.append(ws)
                self.accepted_configs[b].add(engine)
                continue
            recs[i] = recs[i][:1] + (-2,) + recs[i][2:]
            self._refused[_index(engine)] = f"{self.name}: engine config {engine} at batch {b}"

    @property
    def refused_engines(self):
        return dict(self._refused)

    def refuse_engines(self, reasons):
        for engine, why in dict(reasons).items():
            self._refused.setdefault(int(engine), str(why))

    def hold_benchmark_buffers(self, hold):
        self.held.append(bool(hold))

    def engine_notes(self, engine):
        from ucudnn.vocab import parse_engine
        return self._core.engine_notes.get(parse_engine(engine)[0], 0)

    def workspace_for(self, batch, algo, math, engine=""):
        core = self._core
        if not 1 <= batch <= self.n:
            raise InputError(f"{self.name}: field 'batch': micro-batch {batch} not in "
                             f"1..{self.n}")
        key = (self.name, self.op, batch, algo)
        if key in core.unsupported:
            raise CoreError(f"{self.name}: workspace size of algorithm {algo} at batch {batch}: "
                            "CUDNN_STATUS_NOT_SUPPORTED")
        if key in core.true_workspace:
            return core.true_workspace[key]
        for p in core.perfs(self, batch):
            if (p.algo, p.engine) == (algo, engine):
                return p.ws_bytes
        raise CoreError(f"{self.name}: workspace size of algorithm {algo} at batch {batch}: "
                        "CUDNN_STATUS_NOT_SUPPORTED")

    def set_plan(self, plan):
        chunks = list(plan.chunks)
        if sum(c.batch for c in chunks) != self.n:
            raise PlanError(f"{self.name}: plan covers {sum(c.batch for c in chunks)} samples, "
                            f"mini-batch is {self.n}")
        need = max(self.workspace_for(c.batch, c.algo, c.math, c.engine) for c in chunks)
        self.plan, self._ws = plan, need
        with self._core._lock:
            self._core.plans_set.append((self.name, plan.describe()))

    @property
    def workspace_size(self):
        return self._ws


def _index(engine: str) -> int:
    from ucudnn.vocab import parse_engine
    return parse_engine(engine)[0]


def install(monkeypatch, core: FakeCore) -> FakeCore:
    """Make ``core`` the compiled core until ``monkeypatch`` is undone; call :func:`forget`
    before that (the ``fake_core`` fixture does)."""
    import ucudnn
    monkeypatch.setitem(sys.modules, "ucudnn._core", core)
    monkeypatch.setattr(ucudnn, "_core", core, raising=False)
    forget()
    return core


def forget() -> None:
    """Drop the device facts ``ucudnn.measure.bench`` cached (they belong to one core)."""
    from ucudnn.measure import bench
    bench._device_info.cache_clear()


def installed() -> bool:
    """Whether a :class:`FakeCore` stands in for the compiled core now."""
    return isinstance(sys.modules.get("ucudnn._core"), FakeCore)
