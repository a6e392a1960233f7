"""ucudnn._graph: a kernel's calls of cuDNN's graph API (the calls themselves are plain C in
graph.h).

Which engine configs to try at a micro-batch size (Note [Graph choices tried]), each built
into its plans (``GraphPlan``: an operation graph and an execution plan), their workspace and
the numerical notes of their engines. Each function takes the kernel as its first argument;
the Kernel's methods of the same names call them. The configs are timed and checked by
ucudnn._bench and ucudnn._check.
"""

from libc.stdlib cimport calloc, free
from libc.string cimport memset
from libc.stdint cimport int64_t

cimport cudnn as dnn
from ucudnn._device cimport Handle, _thread_handle, check_cudnn
from ucudnn._kernel cimport Kernel
from ucudnn._roles cimport OP_ROLES
from ucudnn._types cimport (UCG_MAX_CONFIGS, UCG_MAX_SLABS, ucudnn_engine_config,
                            ucudnn_graph_geom, ucg_engine_notes, ucg_graph_build,
                            ucg_graph_destroy, ucg_heuristics, ucg_plan_build, ucg_plan_destroy)

from collections import namedtuple
from time import perf_counter

from ucudnn.vocab import (NUMERICAL_NOTES, InputError, PlanError, configs_within, engine_text,
                          focus_configs, parse_engine, slab_choice, slab_trials,
                          split_slabs)


# Note [Graph choices tried]
#     For each micro-batch size the engine configs of cuDNN's heuristics modes A, B and
#     FALLBACK, in that order, without repeats; a config whose numerics differ from what the
#     kernel's dtype and math ask for is left out, as PyTorch's Conv_v8 does: for float32,
#     engines that convert the inputs down (DOWN_CONVERT_INPUTS) always, and tensor-core
#     (TF32) engines under math "fma"; for float16 and bfloat16, engines that reduce in
#     reduced precision (the kernel promises float accumulation). ``max_graph_configs`` > 0
#     (default GRAPH_CONFIGS_DEFAULT) keeps the first that many that fit the benchmark's
#     workspace cap (Note [Graph choices within the cap]). ``graph_focus`` keeps only the
#     configs it names, else those of their engines,
#     where the heuristics propose any (Note [Graph focus in the pruned search] in
#     ucudnn/measure/for_plan.py). Each one left is built into a plan (cudnnBackendFinalize of
#     the execution plan, where runtime-compiled engines compile) and timed with CUDA events:
#     a warm-up and one timed run each, then the median of back-to-back runs for those near
#     the (time, workspace) front, the rule Note [Re-timing near the front] (_timing.pyx)
#     applies to cudnnFind's times.
#
# Note [Graph choices within the cap]
#     The heuristics rank configs by speed, not by workspace, and a config's workspace is
#     known only once its plan is built. At 3-D sizes the first eight proposals can all need
#     more than a cap: nnU-Net's 128^3 layers at batch 2 in bf16 needed more than 256 MiB in
#     every one of them on an H100, so ucudnn at that cap had no graph config to plan with
#     (results/h100/torch/models-large/), though slower configs within it existed. So the
#     pruned search walks the ranking of every mode and builds each config, and keeps the
#     first ``max_graph_configs`` whose workspace fits the cap offered, and also the first
#     two that fit each tier of ``vocab.GRAPH_TIERS`` below the cap (0, 16 MiB, 64 MiB, 256
#     MiB, 1 GiB, 4 GiB; ``vocab.configs_within``); one that fails to build stays as the
#     record of its failure. It stops when those are found, or after six times
#     ``max_graph_configs`` builds. The tiers keep the benchmark cache's rule that an entry
#     measured under a larger cap answers a smaller one (Note [Workspace cap and timing in
#     the key]): a lookup at a tier finds the fastest-ranked configs that fit it.
HEUR_MODES = (("A", 3), ("B", 1), ("FALLBACK", 2))
NOTE_TENSOR_CORE, NOTE_DOWN_CONVERT, NOTE_REDUCED_PRECISION, NOTE_NONDETERMINISTIC = (
    1 << NUMERICAL_NOTES.index(n)
    for n in ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION",
              "NONDETERMINISTIC"))
BEHAVIOR_RUNTIME_COMPILATION = 1 << 0


cdef class GraphPlan:
    """One built graph plan: the operation graph of a kernel at one micro-batch size and beta,
    and the execution plan of one engine config on it (graph.h). Owns both."""

    def __cinit__(self):
        memset(&self.g, 0, sizeof(self.g))
        memset(&self.p, 0, sizeof(self.p))
        memset(&self.s, 0, sizeof(self.s))
        self.pieces = 1

    @property
    def ws_bytes(self):
        if self.pieces > 1:         # one workspace serves the pieces in turn
            return max(part.ws_bytes for part in self.parts)
        return int(self.p.ws_bytes) if self.have_plan else 0

    def __dealloc__(self):
        if self.have_plan:
            ucg_plan_destroy(&self.p)
        if self.have_graph:
            ucg_graph_destroy(&self.g)


cdef dnn.cudnnStatus_t _build_graph(Handle handle, const ucudnn_graph_geom* geom, GraphPlan gp,
                                    int batch, double beta, char* msg, size_t msglen):
    """Build ``gp``'s operation graph of ``geom`` at ``batch`` samples and output scale
    ``beta`` (``gp`` owns it, built or not); cuDNN's status, what failed in ``msg``."""
    cdef dnn.cudnnStatus_t st
    msg[0] = 0
    with nogil:
        st = ucg_graph_build(handle.h, geom, batch, beta, &gp.g, msg, msglen)
    gp.have_graph = True
    return st


cdef object _config_text(const ucudnn_engine_config* c):
    return engine_text(c.engine, [(c.knob_type[i], c.knob_value[i]) for i in range(c.n_knobs)])


cdef int _config_from_text(object text, ucudnn_engine_config* c) except -1:
    engine, knobs = parse_engine(text)
    if len(knobs) > 64:
        raise InputError(f"field 'engine': {text!r} has more than 64 knobs")
    memset(c, 0, sizeof(ucudnn_engine_config))
    c.engine = engine
    c.n_knobs = len(knobs)
    for i, (t, v) in enumerate(knobs):
        c.knob_type[i], c.knob_value[i] = t, v
    return 0


cdef object _graph_plan(Kernel kern, engine, int batch, double beta):
    """``(GraphPlan, 0, "")`` for engine config ``engine`` at ``batch`` samples and output
    scale ``beta`` (a slab choice: :func:`_slab_plan`), or ``(None, cudnnStatus_t, what
    failed)``."""
    base, pieces = split_slabs(engine)
    if pieces > 1:
        return _slab_plan(kern, base, pieces, batch, beta)
    return _plan_of(kern, engine, &kern.geom, batch, beta)


cdef object _plan_of(Kernel kern, engine, const ucudnn_graph_geom* geom, int batch,
                     double beta):
    """:func:`_graph_plan` of one engine config on ``geom``."""
    cdef GraphPlan gp = GraphPlan()
    cdef ucudnn_engine_config cfg
    cdef char msg[512]
    cdef dnn.cudnnStatus_t st
    cdef Handle handle = _thread_handle()
    _config_from_text(engine, &cfg)
    gp.engine, gp.batch, gp.beta = engine, batch, beta
    t0 = perf_counter()
    st = _build_graph(handle, geom, gp, batch, beta, msg, sizeof(msg))
    if st == dnn.CUDNN_STATUS_SUCCESS:
        with nogil:
            st = ucg_plan_build(handle.h, &gp.g, &cfg, &gp.p, msg, sizeof(msg))
        gp.have_plan = True
    gp.build_seconds = perf_counter() - t0
    if st != dnn.CUDNN_STATUS_SUCCESS:
        return None, int(st), msg.decode("utf-8", "replace")
    return gp, 0, ""


# Note [Slab plans]
#     A slab choice (Note [Slabs below one sample] in ucudnn/plan/slabs.py) builds one plan
#     per piece, each on the kernel's geometry with the split axis (the outermost spatial
#     one, dims[2]) cut to the piece's rows and padded as the piece says, its tensors views
#     into the whole one at the piece's first row (so a piece's tensors are not packed: the
#     channel and sample strides stay the whole tensor's). For an op that accumulates every
#     piece after the first is built with beta 1. The byte alignment the plans are built
#     for is the kernel's, lowered to what the pieces' offsets keep.
#     cuDNN 9.19 builds such plans for every engine, and some of them compute wrong values
#     without an error: on an H100, nnU-Net's 32->32 3x3x3 convolution at 128^3 in two
#     pieces gave NaN in forward (engine 71, bf16) and backward-data (78, bf16), and filter
#     gradients off by more than 100 % (engines 1 and 20 with unequal pads, 70 with any
#     view), while engines 22, 62, 67, 10 and 65 matched the undivided convolution
#     (results/h100/slabs/). So a slab choice is checked like any graph config (Note [Graph
#     results checked] in _check.pyx), over every value of a sample rather than its first.


cdef object _slab_plan(Kernel kern, base, int pieces, int batch, double beta):
    """:func:`_graph_plan` of engine config ``base`` over ``pieces`` slabs (Note [Slab
    plans]); ``(None, CUDNN_STATUS_NOT_SUPPORTED, why)`` where the axis cannot be split so."""
    cdef GraphPlan gp = GraphPlan()
    cdef GraphPlan part
    cdef ucudnn_graph_geom geom
    cdef int i
    if pieces > UCG_MAX_SLABS:
        return None, int(dnn.CUDNN_STATUS_NOT_SUPPORTED), f"{pieces} slabs"
    try:
        pieces_geom = kern.shape.slabs(kern.op, pieces)
    except ValueError as e:
        return None, int(dnn.CUDNN_STATUS_NOT_SUPPORTED), str(e)
    accumulates = OP_ROLES[kern.k.op].accumulates
    e = kern.k.elem_size
    xrow, yrow = kern.x_strides[2] * e, kern.y_strides[2] * e
    align = kern.geom.align
    while align > e and any(sl.x[0] * xrow % align or sl.y[0] * yrow % align
                            for sl in pieces_geom):
        align //= 2
    gp.engine, gp.batch, gp.beta = slab_choice(base, pieces), batch, beta
    gp.pieces, gp.parts, gp.build_seconds = pieces, [], 0.0
    for i, sl in enumerate(pieces_geom):
        geom = kern.geom
        geom.xdim[2], geom.ydim[2] = sl.x_rows, sl.y_rows
        geom.pad[0], geom.post[0] = sl.pre, sl.post
        geom.align = align
        got, status, why = _plan_of(kern, base, &geom, batch,
                                    1.0 if accumulates and i > 0 else beta)
        if got is None:
            return None, status, f"slab {i + 1} of {pieces}: {why}"
        part = got
        gp.build_seconds += part.build_seconds
        gp.parts.append(part)
        gp.s.plan[i] = &part.p
        gp.s.x_off[i], gp.s.y_off[i] = sl.x[0] * xrow, sl.y[0] * yrow
    gp.s.n = pieces
    return gp, 0, ""


cdef object _engine_notes(Kernel kern, engine):
    """:meth:`Kernel.engine_notes`."""
    cdef GraphPlan gp
    cdef int numerical = 0, behavior = 0
    cdef int64_t index
    cdef char msg[512]
    cdef dnn.cudnnStatus_t st
    index = parse_engine(engine)[0]
    if index in kern._engine_notes:
        return kern._engine_notes[index]
    gp = GraphPlan()
    st = _build_graph(_thread_handle(), &kern.geom, gp, kern.n, 0.0, msg, sizeof(msg))
    if st == dnn.CUDNN_STATUS_SUCCESS:
        with nogil:
            st = ucg_engine_notes(&gp.g, index, &numerical, &behavior, msg, sizeof(msg))
    check_cudnn(st, f"{kern.name}: notes of {engine}: {msg.decode('utf-8', 'replace')}")
    kern._engine_notes[index] = numerical
    return numerical


cdef object _graph_configs(Kernel kern, int batch, double beta):
    """The engine configs proposed at ``batch`` in the heuristics' order, those of the focus
    where there is one (Note [Graph choices tried]), as text, with their behaviour and
    numerical notes: ``[(engine, behavior_notes, numerical_notes)]``."""
    cdef GraphPlan gp = GraphPlan()
    cdef ucudnn_engine_config* cfgs = <ucudnn_engine_config*>calloc(
        UCG_MAX_CONFIGS, sizeof(ucudnn_engine_config))
    cdef char msg[512]
    cdef int got = 0, i, mode
    cdef dnn.cudnnStatus_t st
    cdef Handle handle = _thread_handle()
    if cfgs == NULL:
        raise MemoryError()
    seen = {}
    try:
        st = _build_graph(handle, &kern.geom, gp, batch, beta, msg, sizeof(msg))
        if st != dnn.CUDNN_STATUS_SUCCESS:
            kern.last_graph_error = (f"{kern.name}: operation graph at batch {batch}: "
                                     f"{msg.decode('utf-8', 'replace')}")
            return []
        drop = 0
        if kern.k.dtype == 0:
            drop = NOTE_DOWN_CONVERT | (NOTE_TENSOR_CORE if kern.math == "fma" else 0)
        elif kern.k.dtype in (2, 9):
            drop = NOTE_REDUCED_PRECISION
        focus = kern.graph_focus
        for _, mode in HEUR_MODES:
            if focus and any(e in focus for e in seen):
                break           # Note [Graph focus in the pruned search] (for_plan.py)
            with nogil:
                st = ucg_heuristics(&gp.g, mode, cfgs, UCG_MAX_CONFIGS, &got, msg, sizeof(msg))
            for i in range(got):
                if cfgs[i].numerical_notes & drop:
                    continue
                seen.setdefault(_config_text(&cfgs[i]),
                                (cfgs[i].behavior_notes, cfgs[i].numerical_notes))
        if focus:           # Note [Graph focus in the pruned search] (for_plan.py)
            seen = {e: seen[e] for e in focus_configs(list(seen), focus)}
        if not seen:
            kern.last_graph_error = f"{kern.name}: no engine config at batch {batch}"
        return [(e, behavior, numerical) for e, (behavior, numerical) in seen.items()]
    finally:
        free(cfgs)


#: one config of the graph family built at a micro-batch size (:func:`_graph_build`)
GraphConfig = namedtuple("GraphConfig", "engine plan status compiled deterministic")


cdef object _graph_build(Kernel kern, int b, size_t cap, bint slabs=False):
    """The graph family's configs at micro-batch ``b`` (Note [Graph choices tried]) within
    the workspace ``cap`` (Note [Graph choices within the cap]), each built into its plan:
    ``[GraphConfig(engine, GraphPlan or None, cudnnStatus_t, runtime
    compiled, deterministic)]`` (deterministic: its engine lacks the NONDETERMINISTIC
    note, Note [Deterministic plans] in ucudnn/plan/dp.py). The plans of an op that
    accumulates (backward-filter) have beta 1 (Note [Backward-filter timed with beta 1] in
    _timing.pyx), and its beta-0 plan must build too (Note [Graph plans and beta] in
    graph.h). Built before the benchmark allocates its
    workspace, which their needs size (Note [Benchmark workspace] in _kernel.pyx). With
    ``slabs``, also the slab choices of Note [Slab choices tried] (ucudnn/plan/slabs.py)
    that fit the cap, up to ``kern.max_slabs`` pieces."""
    cdef double beta = 1.0 if OP_ROLES[kern.k.op].accumulates else 0.0
    spent = kern.benchmark_seconds
    t0 = perf_counter()
    configs = {e: (behavior, numerical)
               for e, behavior, numerical in kern._graph_configs(b, beta)}
    spent["graph_heuristics"] += perf_counter() - t0
    built = {}

    def build(engine):
        """The engine's plan at ``b`` (and its beta-0 twin): its workspace, or None."""
        plan, status, _ = kern._graph_plan(engine, b, beta)
        if plan is not None:
            spent["graph_build"] += plan.build_seconds
        if plan is not None and beta != 0.0:
            other, status, _ = kern._graph_plan(engine, b, 0.0)
            spent["graph_build"] += other.build_seconds if other is not None else 0.0
        built[engine] = (plan if status == 0 else None, status)
        return built[engine][0].ws_bytes if status == 0 else None

    def config(choice, engine):
        """The GraphConfig of ``choice`` as built: ``engine``, or ``engine`` over slabs."""
        behavior, numerical = configs[engine]
        plan, status = built[choice]
        return GraphConfig(choice, plan, status, bool(behavior & BEHAVIOR_RUNTIME_COMPILATION),
                           not numerical & NOTE_NONDETERMINISTIC)

    out = [config(engine, engine) for engine, _ in
           configs_within(list(configs), build, kern.max_graph_configs, cap)]
    if slabs and kern.max_slabs >= 2:
        ranked = [(e, p.ws_bytes if p is not None else None) for e, (p, _) in built.items()]
        for engine, tries in slab_trials(ranked, cap, kern.max_slabs):
            for pieces in tries:
                choice = slab_choice(engine, pieces)
                ws = build(choice)
                if ws is not None and ws <= cap:
                    out.append(config(choice, engine))
                    break
    return out


cdef object _graph_plans_for(Kernel kern, int batch, engine, dict built):
    """``(beta-0 plan, beta-1 plan)`` of ``engine`` at ``batch`` (Note [Graph plans and
    beta] in graph.h), from ``built`` or built into it; PlanError naming the layer, size
    and config when a plan the op needs does not build. A beta-1 plan that does not build
    is None for an op that does not accumulate (forward and backward-data run it only for a
    caller's beta 1; Note [Operand roles] in _roles.pxd)."""
    key = (batch, engine)
    got = built.get(key)
    if got is None:
        plans = []
        for beta in (0.0, 1.0):
            plan, status, why = kern._graph_plan(engine, batch, beta)
            if plan is None and (beta == 0.0 or OP_ROLES[kern.k.op].accumulates):
                raise PlanError(f"{kern.name}: engine config {engine} at batch {batch} "
                                f"(beta {beta:g}): {why}")
            plans.append(plan)
        got = built[key] = tuple(plans)
    return got
