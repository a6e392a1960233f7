"""ucudnn._kernel: ``Kernel``, one convolution operation of one layer.

A Python class over a C struct (ucudnn._types.ucudnn_kernel): it builds the cuDNN
descriptors, benchmarks the choices of each family per micro-batch size (``benchmark``:
ucudnn._bench, over ucudnn._legacy and ucudnn._graph, Note [Choices] in ucudnn/vocab.py),
takes a plan from the planners in ``ucudnn`` (``set_plan``) and resolves it into C arrays,
building the graph plans it names, which ``run`` (ucudnn._run) walks. The bodies of its larger
methods are functions of the module responsible, taking the kernel as first argument.
"""

from libc.stdlib cimport calloc, free
from libc.string cimport memset, strncpy
from libc.stdint cimport uintptr_t

cimport cudnn as dnn
cimport cudart as rt
from ucudnn cimport _bench, _check, _graph, _legacy
from ucudnn._device cimport DeviceBuffer, Handle, check_cuda, check_cudnn
from ucudnn._graph cimport GraphPlan
from ucudnn._run cimport _run_error, run_kernel
from ucudnn._conv cimport set_conv_desc, set_filter_desc, set_tensor_desc
from ucudnn._types cimport UCUDNN_OK, ucudnn_chunk

from ucudnn._device import _device_lock
from ucudnn._timing import RETIME_WARMUP
from ucudnn.vocab import (DTYPES, GRAPH_ALGO, LAYOUTS, MATH_MODES, MAX_SLABS, OP_CODES, OPS,
                          InputError, PlanError)


#: engine configs tried per size unless a caller says otherwise; 0 tries every one the
#: heuristics propose. Measured on the H200 with cuDNN 9.19 (results/h200/cudnn919, call M):
#: ResNet-18's cold planning (graph, pruned, 64 MiB) in 32.5 s with 8 against 55.9 s with 16,
#: its plans predicted 0.5 % slower (27.62 against 27.47 ms), and its powerOfTwo graph NHWC
#: plans measured the same (15.92 against 15.94 ms)
GRAPH_CONFIGS_DEFAULT = 8


def kernel_arguments(op, n, dtype, math, name, instances):
    """The checks of :class:`Kernel`'s arguments that need no shape: each raises
    :class:`ucudnn.vocab.InputError` naming the field (and the layer, where ``name`` is given).
    The CPU tests' fake core runs the same (tests/support/fake_core.py)."""
    where = f"layer {name!r}: " if name else ""
    if op not in OP_CODES:
        raise InputError(f"{where}field 'op': unknown operation {op!r} "
                         f"(expected one of {', '.join(OPS)})")
    if dtype not in DTYPES:
        raise InputError(f"{where}field 'dtype': unsupported {dtype!r} "
                         f"(expected one of {', '.join(DTYPES)})")
    if math not in MATH_MODES:
        raise InputError(f"{where}field 'math': unknown math mode {math!r} "
                         f"(expected one of {', '.join(MATH_MODES)})")
    if n < 1:
        raise InputError(f"{where}field 'n': mini-batch size must be >= 1, got {n}")
    if instances < 1:
        raise InputError(f"{where}field 'instances': must be >= 1, got {instances}")


def benchmark_arguments(name, n, sizes, repeats, families):
    """The checks of :meth:`Kernel.benchmark`'s arguments for kernel ``name`` of mini-batch
    ``n``, each raising :class:`ucudnn.vocab.InputError` naming the field: ``(sizes, families)``,
    the sizes sorted without repeats and the families as a tuple. The CPU tests' fake core runs
    the same (tests/support/fake_core.py)."""
    sizes = sorted({int(b) for b in sizes})
    if not sizes or sizes[0] < 1 or max(sizes) > n:
        raise InputError(f"{name}: field 'sizes': micro-batch sizes must lie in "
                         f"1..{n}, got {sizes}")
    if repeats < 1:
        raise InputError(f"{name}: field 'repeats': must be >= 1, got {repeats}")
    families = tuple(families)
    if not families or any(f not in ("legacy", "graph") for f in families):
        raise InputError(f"{name}: field 'families': expected a non-empty subset of "
                         f"('legacy', 'graph'), got {families!r}")
    return sizes, families


def kernel_shape_arguments(shape, name):
    """The checks of :class:`Kernel`'s ``shape`` (a :class:`ucudnn.plan.conv.ConvShape`):
    ``(layout, tensor dimensions, x strides, y strides)``, 4 dimensions for a 2-D shape and
    5 for a 3-D one (Note [N-D geometry] in ucudnn/plan/conv.py), each raising
    :class:`ucudnn.vocab.InputError` naming the field (and the layer, where ``name`` is given).
    The CPU tests' fake core runs the same (tests/support/fake_core.py)."""
    where = f"layer {name!r}: " if name else ""
    layout = getattr(shape, "layout", "NCHW")
    if layout not in LAYOUTS:
        raise InputError(f"{where}field 'layout': unknown layout {layout!r} "
                         f"(expected one of {', '.join(LAYOUTS)})")
    depth = getattr(shape, "d", 0)
    if depth not in (0, None) and not (isinstance(depth, int) and depth >= 1):
        raise InputError(f"{where}field 'd': a depth >= 1 (3-D) or 0 (2-D) expected, "
                         f"got {depth!r}")
    dims = 5 if depth else 4
    out = []
    for what, v in (("x_strides", shape.packed_x_strides()),
                    ("y_strides", shape.packed_y_strides())):
        v = tuple(int(x) for x in v)
        if len(v) != dims or any(not 1 <= x <= _INT_MAX for x in v):
            raise InputError(f"{where}field {what!r}: {dims} positive strides of at most "
                             f"{_INT_MAX} expected, got {v!r}")
        out.append(v)
    return layout, dims, out[0], out[1]


_INT_MAX = 2**31 - 1


cdef class Kernel:
    """One convolution operation of one layer at mini-batch size ``n``.

    ``shape`` is a :class:`ucudnn.plan.conv.ConvShape`; ``op`` is ``fwd``, ``bwd_data`` or
    ``bwd_filter``. Tensors have the shape's layout and strides (Note [NHWC kernels] in
    ucudnn/plan/conv.py); the filter is KCRS for NCHW, KRSC for NHWC. A 3-D shape (Note [N-D
    geometry] there) has five-dimensional descriptors: NCDHW or NDHWC tensors, KCTRS or
    KTRSC filters; every descriptor is set with cuDNN's N-d calls.
    ``instances``: how many times one pass runs this kernel, each on its own workspace (Caffe:
    the layer's group count); the ILP weighs the kernel by it and plan records state it.
    Bad arguments raise :class:`ucudnn.vocab.InputError` naming the field.
    """

    def __cinit__(self):
        memset(&self.k, 0, sizeof(self.k))
        self.k.owner = <void*>self

    def __init__(self, shape, op, int n, dtype="float32", math="default", name=None,
                 int instances=1):
        where = f"layer {name!r}: " if name else ""
        if self.k.wdesc != NULL:
            raise InputError(f"{where}Kernel is already initialised")
        kernel_arguments(op, n, dtype, math, name, instances)
        self.layout, self.nbdims, xs, ys = kernel_shape_arguments(shape, name)
        self.shape, self.op, self.n, self.dtype, self.math = shape, op, n, dtype, math
        self._graph_plans = {}
        self._engine_notes = {}
        self._refused_engines = {}
        self._accepted_at = {}
        self.last_unchecked_sizes = []
        self.last_graph_error = None
        self.max_graph_configs = GRAPH_CONFIGS_DEFAULT
        self.max_slabs = MAX_SLABS if self.nbdims == 5 else 0
        self.graph_focus = None
        self.name = name or f"{op}"
        self.instances = instances
        self.plan = None
        self.benchmark_seconds = {"setup": 0.0, "warmup_find": 0.0, "find": 0.0,
                                  "retime": 0.0, "graph_heuristics": 0.0, "graph_build": 0.0,
                                  "graph_time": 0.0, "graph_check": 0.0}
        self.graph_stats = {"configs": 0, "built": 0, "runtime_compiled": 0, "failed": 0,
                            "checked": 0, "inaccurate": 0, "unchecked": 0}
        check_cuda(rt.cudaGetDevice(&self.device), "cudaGetDevice")
        self.k.op = OP_CODES[op]
        self.k.dtype, self.k.elem_size = DTYPES[dtype]
        self.k.n = n
        cdef bytes bname = self.name.encode("utf-8", "replace")[:127]
        strncpy(self.k.name, bname, 127)
        for i in range(self.nbdims):
            self.x_strides[i], self.y_strides[i] = xs[i], ys[i]
        self.k.x_nstride = self.x_strides[0]
        self.k.y_nstride = self.y_strides[0]
        self._set_geometry()

        cdef dnn.cudnnDataType_t dt = <dnn.cudnnDataType_t>self.k.dtype
        # accumulate half/bfloat16 in float, as Caffe and PyTorch do
        cdef dnn.cudnnDataType_t compute = dnn.CUDNN_DATA_FLOAT if self.k.dtype in (2, 9) else dt
        cdef int wdim[5]
        cdef int pad[3]
        cdef int stride[3]
        cdef int dil[3]
        cdef int nsp = self.nbdims - 2
        for i, v in enumerate(shape.w_dims()):
            wdim[i] = v
        for i in range(nsp):
            pad[i], stride[i], dil[i] = shape.pad[i], shape.stride[i], shape.dilation[i]
        check_cudnn(dnn.cudnnCreateFilterDescriptor(&self.k.wdesc), "cudnnCreateFilterDescriptor")
        check_cudnn(set_filter_desc(
            self.k.wdesc, dt,
            dnn.CUDNN_TENSOR_NCHW if self.layout == "NCHW" else dnn.CUDNN_TENSOR_NHWC,
            self.nbdims, wdim), f"{self.name}: filter descriptor")
        for m in range(4):
            check_cudnn(dnn.cudnnCreateConvolutionDescriptor(&self.k.conv[m]),
                        "cudnnCreateConvolutionDescriptor")
            check_cudnn(set_conv_desc(self.k.conv[m], nsp, pad, stride, dil, compute),
                f"{self.name}: convolution descriptor")
            check_cudnn(dnn.cudnnSetConvolutionMathType(self.k.conv[m], <dnn.cudnnMathType_t>m),
                        "cudnnSetConvolutionMathType")
            check_cudnn(dnn.cudnnSetConvolutionGroupCount(self.k.conv[m], shape.groups),
                        "cudnnSetConvolutionGroupCount")

    cdef int _set_geometry(self) except -1:
        """The graph family's description of this kernel (graph.h's ucudnn_graph_geom)."""
        s = self.shape
        g = &self.geom
        g.op, g.dtype, g.nbdims = self.k.op, self.k.dtype, self.nbdims
        g.compute = 0 if self.k.dtype in (2, 9) else self.k.dtype   # half/bf16 accumulate in float
        xd, yd = s.x_dims(self.n), s.y_dims(self.n)
        wd, ws = s.w_dims(), s.filter_strides()
        for i in range(self.nbdims):
            g.xdim[i], g.xstr[i] = xd[i], self.x_strides[i]
            g.ydim[i], g.ystr[i] = yd[i], self.y_strides[i]
            g.wdim[i], g.wstr[i] = wd[i], ws[i]
        for i in range(self.nbdims - 2):
            g.pad[i], g.stride[i], g.dil[i] = s.pad[i], s.stride[i], s.dilation[i]
            g.post[i] = s.pad[i]
        # every chunk starts a whole number of samples into a 256-byte aligned buffer; a
        # grouped layer's view starts a whole number of groups into it (Note [Grouped layers]
        # in ucudnn/plan/conv.py): its channels, and its filter
        e = self.k.elem_size
        sample_bytes = [self.x_strides[0] * e, self.y_strides[0] * e]
        if s.x_strides is not None or s.y_strides is not None:     # a view into larger blobs
            sample_bytes += [s.c * self.x_strides[1] * e, s.k * self.y_strides[1] * e,
                             self.filter_bytes]
        align = 16
        while align > self.k.elem_size and any(b % align for b in sample_bytes):
            align //= 2
        g.align = align
        self.k.align = align
        return 0

    cdef int _set_tensor(self, dnn.cudnnTensorDescriptor_t d, int which, int b) except -1:
        """which 0: the input side (x / dx); 1: the output side (y / dy); b samples."""
        cdef int dims[5]
        cdef int* strides = &self.x_strides[0]
        if which != 0:
            strides = &self.y_strides[0]
        s = self.shape
        for i, v in enumerate(s.x_dims(b) if which == 0 else s.y_dims(b)):
            dims[i] = v
        check_cudnn(set_tensor_desc(
            d, <dnn.cudnnDataType_t>self.k.dtype, self.nbdims, dims, strides),
            f"{self.name}: {'input' if which == 0 else 'output'} tensor descriptor (batch {b})")
        return 0

    def extent_bytes(self, int which, int b):
        """Bytes a tensor of ``b`` samples spans (input side 0, output side 1)."""
        st = [self.x_strides[i] if which == 0 else self.y_strides[i] for i in range(self.nbdims)]
        s = self.shape
        dims = s.x_dims(b) if which == 0 else s.y_dims(b)
        return (1 + sum((d - 1) * st[i] for i, d in enumerate(dims))) * self.k.elem_size

    @property
    def filter_bytes(self):
        n = self.k.elem_size
        for d in self.shape.w_dims():
            n *= d
        return n

    # ------------------------------------------------------------------ benchmark

    def benchmark(self, sizes, int repeats=1, workspace_cap=None, progress=None,
                  int time_iters=5, families=("legacy",), int time_warmup=RETIME_WARMUP,
                  bint retime_last=True):
        """Time every choice of ``families`` for each micro-batch size: the legacy algorithms
        with cudnnFind...AlgorithmEx, the graph family's engine configs as Note [Graph choices
        tried] in _graph.pyx says.

        Returns ``{b: [(algo, status, time_ms, ws_bytes, math, engine, deterministic),
        ...]}`` (Note [Choices] in ucudnn/vocab.py: ``engine`` is "" for an algorithm, ``algo``
        -1 for an engine config; ``deterministic``: Note [Deterministic plans] in
        ucudnn/plan/dp.py) with the median time of ``repeats`` Finds (one warm-up Find per
        call, or per hold_benchmark_buffers) and every choice's status; callers filter. With
        ``time_iters`` > 0 each successful algorithm near the (time, workspace) front is then
        timed again with CUDA events (median of ``time_iters`` runs enqueued back to back
        after ``time_warmup`` untimed ones), the way plans are executed: see Note [Find
        times] and Note [Re-timing near the front] in _timing.pyx; with ``retime_last`` after
        every size's Find (Note [Re-timing after the Finds] in _timing.pyx), else right after
        each. The benchmark workspace is ``workspace_cap`` (default 8 GiB) capped by free
        memory, or less: Note [Benchmark workspace]. ``benchmark_seconds`` accumulates where
        the calls spent their time.

        Note [Benchmark workspace]
            The workspace offered to the benchmark is held while it runs, so it sets the
            process's peak memory during planning: an offer of the shared arena's budget
            (several GiB) would peak above everything the planned net holds. So the offer is
            the largest workspace that a choice of ``families`` asks for at the sizes
            benchmarked, of those at most ``workspace_cap``: for an algorithm,
            cudnnGet...WorkspaceSize with every math type; for an engine config, its plan's,
            all of them built first (:meth:`_graph_build`; each size's plans live until that
            size is timed). Every choice the whole cap would run is then tried, so the cache
            records the cap as offered.

        Note [Find times]
            On the H200, plans predicted from cudnnFind...Ex times alone were measured 13-29 %
            faster than predicted at 64 and 512 MiB: Find times each algorithm in isolation,
            where launch latency is exposed, while a framework enqueues kernels back to back.
            Re-timing the candidates back to back makes the planner's prediction the time
            the plan is measured at.
        """
        sizes, families = benchmark_arguments(self.name, self.n, sizes, repeats, families)
        cdef int dev = 0
        check_cuda(rt.cudaGetDevice(&dev), "cudaGetDevice")
        with _device_lock(dev):
            return self._benchmark(sizes, repeats, workspace_cap, progress, time_iters,
                                   families, time_warmup, retime_last)

    def hold_benchmark_buffers(self, bint hold):
        """``True``: keep the benchmark's buffers (inputs and outputs for the whole mini-batch,
        filled once, and the workspace offered to cudnnFind) from one ``benchmark`` call to
        the next, so that a search measuring in rounds (Note [Pruned search at run time])
        allocates and fills them once; ``False`` frees them. Each call otherwise sets them up
        anew for its own largest size."""
        self._holding = hold
        if not hold:
            self._held = None
            self._warm = False

    def _benchmark(self, sizes, int repeats, workspace_cap, progress, int time_iters, families,
                   int time_warmup, bint retime_last):
        """:meth:`benchmark` under the device's lock: ``_bench._benchmark``."""
        return _bench._benchmark(self, sizes, repeats, workspace_cap, progress, time_iters,
                                 families, time_warmup, retime_last)

    @property
    def refused_engines(self):
        """``{engine index: why}`` of the engines Note [Graph results checked] (_check.pyx)
        refused for this kernel, by its own benchmarks or :meth:`refuse_engines`."""
        return dict(self._refused_engines)

    def refuse_engines(self, reasons):
        """Refuse the engines of ``{engine index: why}`` (refused before, e.g. by another
        process: the benchmark cache keeps them) as if this kernel's own check had: their
        configs get STATUS_INACCURATE from the next benchmark on."""
        for engine, why in dict(reasons).items():
            self._refused_engines.setdefault(int(engine), str(why))

    def _graph_plan(self, engine, int batch, double beta):
        """``(GraphPlan, 0, "")`` for engine config ``engine`` at ``batch`` samples and output
        scale ``beta``, or ``(None, cudnnStatus_t, what failed)``."""
        return _graph._graph_plan(self, engine, batch, beta)

    def engine_notes(self, engine):
        """The numerical notes of engine config ``engine``'s engine on this kernel, a bit mask
        (bit i: cudnnBackendNumericalNote_t i; vocab.NUMERICAL_NOTES names them); notes
        belong to the engine, not to its knobs or the batch. For choices read back from the
        benchmark cache, which keeps an engine config's text only (Note [Choices] in
        ucudnn/vocab.py)."""
        return _graph._engine_notes(self, engine)

    def _graph_configs(self, int batch, double beta):
        """``_graph._graph_configs``."""
        return _graph._graph_configs(self, batch, beta)

    def _graph_build(self, int b, size_t cap=8 << 30, bint slabs=False):
        """``_graph._graph_build``."""
        return _graph._graph_build(self, b, cap, slabs)

    def _graph_c(self, Handle handle, int b, list built, DeviceBuffer x, DeviceBuffer y,
                 DeviceBuffer w, DeviceBuffer ws, int iters, int slices, uintptr_t xd_,
                 uintptr_t yd_):
        """``_bench._graph_c``."""
        return _bench._graph_c(self, handle, b, built, x, y, w, ws, iters, slices, xd_, yd_)

    def _check_region(self, bint whole=False):
        """``_check._check_region``."""
        return _check._check_region(self, whole)

    def _reference(self, Handle handle, int b, uintptr_t xd_, uintptr_t yd_, DeviceBuffer x,
                   DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, role, size_t count):
        """``_check._reference``."""
        return _check._reference(self, handle, b, xd_, yd_, x, y, w, ws, role, count)

    def _graph_error(self, Handle handle, GraphPlan gp, DeviceBuffer x, DeviceBuffer y,
                     DeviceBuffer w, DeviceBuffer ws, uintptr_t out_, size_t count, bytes ref,
                     int ref_dtype):
        """``_check._graph_error``."""
        return _check._graph_error(self, handle, gp, x, y, w, ws, out_, count, ref,
                                   ref_dtype)

    def _check_graph(self, Handle handle, int b, DeviceBuffer x, DeviceBuffer y,
                     DeviceBuffer w, DeviceBuffer ws, uintptr_t xd_, uintptr_t yd_, list out,
                     dict plans):
        """``_check._check_graph``."""
        return _check._check_graph(self, handle, b, x, y, w, ws, xd_, yd_, out, plans)

    # ------------------------------------------------------------------ plan

    def _legacy_need(self, sizes, cap):
        """``_legacy._legacy_need``."""
        return _legacy._legacy_need(self, sizes, cap)

    def workspace_for(self, int batch, int algo, int math, engine=""):
        """cuDNN's workspace need for a choice at micro-batch ``batch``: algorithm ``algo``
        with ``math``, or engine config ``engine`` (both of its plans, Note [Graph plans and
        beta] in graph.h). Raises if cuDNN cannot run it."""
        if engine:
            return self._graph_workspace(batch, engine, self._graph_plans)
        return _legacy._legacy_workspace(self, batch, algo, math)

    def _graph_plans_for(self, int batch, engine, dict built):
        """``_graph._graph_plans_for``."""
        return _graph._graph_plans_for(self, batch, engine, built)

    def _graph_workspace(self, int batch, engine, dict built):
        """Workspace of ``engine`` at ``batch``: the larger of its plans (_graph_plans_for)."""
        return max(p.ws_bytes for p in self._graph_plans_for(batch, engine, built) if p)

    def set_plan(self, plan):
        """Resolve a :class:`ucudnn.plan.dp.Plan` into C arrays: chunks, per-size descriptors,
        and the graph plans its engine configs need (built here, at planning: the run path
        only executes them).

        The workspace the plan needs is asked of cuDNN for each chunk (not taken from the
        benchmark record), so a stale cache entry cannot under-size it.
        """
        _set_plan(self, plan)

    cdef void _free_plan(self) noexcept:
        cdef int i
        for i in range(self.k.n_descs):
            dnn.cudnnDestroyTensorDescriptor(self.k.xdesc[i])
            dnn.cudnnDestroyTensorDescriptor(self.k.ydesc[i])
        free(self.k.xdesc); free(self.k.ydesc); free(self.k.chunks)
        self.k.xdesc = self.k.ydesc = NULL
        self.k.chunks = NULL
        self.k.n_descs = self.k.n_chunks = 0
        self.k.ws_bytes = 0

    @property
    def workspace_size(self):
        """Bytes of workspace the current plan needs (0 without a plan)."""
        return int(self.k.ws_bytes)

    @property
    def address(self):
        """Address of the C struct, as the C API's ``ucudnn_kernel*``."""
        return <uintptr_t>&self.k

    # ------------------------------------------------------------------ run

    def run(self, Handle handle not None, uintptr_t a, uintptr_t b, uintptr_t out, uintptr_t workspace=0,
            workspace_size=None, double alpha=1.0, double beta=0.0):
        """Run the plan: fwd (a=x, b=w, out=y), bwd_data (a=w, b=dy, out=dx),
        bwd_filter (a=x, b=dy, out=dw). Device addresses as integers; asynchronous."""
        cdef size_t wss = self.k.ws_bytes if workspace_size is None else workspace_size
        cdef float af = alpha, bf = beta
        cdef const void* pa = <const void*>&alpha if self.k.dtype == 1 else <const void*>&af
        cdef const void* pb = <const void*>&beta if self.k.dtype == 1 else <const void*>&bf
        cdef int rc
        with nogil:
            rc = run_kernel(&self.k, handle.h, pa, <const void*>a, <const void*>b, pb,
                            <void*>out, <void*>workspace, wss)
        if rc != UCUDNN_OK:
            raise _run_error(rc)

    def __dealloc__(self):
        cdef int m
        self._free_plan()
        if self.k.wdesc != NULL:
            dnn.cudnnDestroyFilterDescriptor(self.k.wdesc)
        for m in range(4):
            if self.k.conv[m] != NULL:
                dnn.cudnnDestroyConvolutionDescriptor(self.k.conv[m])


cdef _set_plan(Kernel kern, plan):
    """:meth:`Kernel.set_plan`."""
    chunks = list(plan.chunks)
    if sum(c.batch for c in chunks) != kern.n:
        raise PlanError(f"{kern.name}: plan covers {sum(c.batch for c in chunks)} samples, "
                        f"mini-batch is {kern.n}")
    graph_plans = {}        # the plans of this plan's engine configs, built once each
    ws_need = max(kern._graph_workspace(c.batch, c.engine, graph_plans) if c.engine
                  else kern.workspace_for(c.batch, c.algo, c.math) for c in chunks)
    cdef GraphPlan gp
    cdef double predicted = plan.time_ms
    sizes = sorted({c.batch for c in chunks}, reverse=True)
    cdef ucudnn_chunk* arr = <ucudnn_chunk*>calloc(len(chunks), sizeof(ucudnn_chunk))
    cdef dnn.cudnnTensorDescriptor_t* xds = <dnn.cudnnTensorDescriptor_t*>calloc(
        len(sizes), sizeof(dnn.cudnnTensorDescriptor_t))
    cdef dnn.cudnnTensorDescriptor_t* yds = <dnn.cudnnTensorDescriptor_t*>calloc(
        len(sizes), sizeof(dnn.cudnnTensorDescriptor_t))
    if arr == NULL or xds == NULL or yds == NULL:
        free(arr); free(xds); free(yds)
        raise MemoryError()
    cdef int i
    try:
        for i, b in enumerate(sizes):
            check_cudnn(dnn.cudnnCreateTensorDescriptor(&xds[i]), "cudnnCreateTensorDescriptor")
            check_cudnn(dnn.cudnnCreateTensorDescriptor(&yds[i]), "cudnnCreateTensorDescriptor")
            kern._set_tensor(xds[i], 0, b)
            kern._set_tensor(yds[i], 1, b)
        offset = 0
        for i, c in enumerate(chunks):
            arr[i].batch, arr[i].offset, arr[i].algo = c.batch, offset, c.algo
            arr[i].math, arr[i].desc = c.math, sizes.index(c.batch)
            if c.engine:
                arr[i].algo = GRAPH_ALGO
                for j, p in enumerate(graph_plans[(c.batch, c.engine)]):
                    if p is not None:
                        gp = p
                        arr[i].graph[j] = &gp.p
                        if gp.pieces > 1:       # Note [Slab plans] in _graph.pyx
                            arr[i].slabs[j] = &gp.s
            offset += c.batch
    except BaseException:
        for i in range(len(sizes)):
            if xds[i] != NULL: dnn.cudnnDestroyTensorDescriptor(xds[i])
            if yds[i] != NULL: dnn.cudnnDestroyTensorDescriptor(yds[i])
        free(arr); free(xds); free(yds)
        raise
    kern._free_plan()
    kern._graph_plans = graph_plans     # owns the plans arr points into
    kern.k.chunks, kern.k.n_chunks = arr, len(chunks)
    kern.k.xdesc, kern.k.ydesc, kern.k.n_descs = xds, yds, len(sizes)
    kern.k.ws_bytes = ws_need
    kern.k.predicted_ms = predicted
    kern.plan = plan
