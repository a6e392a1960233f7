# Declarations of ucudnn._kernel: the Kernel class that owns one convolution's kernel struct
# (ucudnn._types.ucudnn_kernel). ucudnn._legacy, _graph, _check and _bench take it as their
# functions' first argument and read its attributes through these declarations.

cimport cudnn as dnn
from ucudnn._types cimport ucudnn_graph_geom, ucudnn_kernel


cdef class Kernel:
    cdef ucudnn_kernel k
    cdef int nbdims                     # tensor dimensions: 4 (2-D) or 5 (3-D)
    cdef int x_strides[5]
    cdef int y_strides[5]
    cdef readonly object shape, op, n, dtype, math, name, layout
    cdef ucudnn_graph_geom geom         # the graph family's description of this kernel
    cdef object _graph_plans            # (batch, engine, beta) -> GraphPlan, for set_plan
    cdef object _engine_notes           # engine index -> numerical notes (engine_notes)
    cdef readonly int device
    cdef readonly int instances # runs of this kernel per pass, each on its own workspace
    cdef public object graph_focus      # None, or the engine configs (texts) to try: Note
                                        # [Graph focus in the pruned search] (for_plan.py)
    cdef public int max_graph_configs   # engine configs tried per size (0: all; Note [Graph
                                        # choices tried] in _graph.pyx)
    cdef public int max_slabs           # most pieces of a slab choice; 0 or 1: none (Note
                                        # [Slab choices tried] in ucudnn/plan/slabs.py)
    cdef readonly object plan   # the plan set_plan resolved into k's C arrays, or None; what
                                # the planners measured and chose on the way is theirs: Note
                                # [Planner state beside the kernel] in
                                # ucudnn/measure/planner_state.py
    cdef readonly object last_benchmark_workspace   # bytes offered to cudnnFind last time
    cdef readonly object last_benchmark_held    # bytes of workspace it held to offer them
    cdef readonly object benchmark_seconds   # where benchmark calls spent their time (sums)
    cdef readonly object graph_stats    # engine configs tried, built, runtime-compiled, failed
    cdef readonly object last_graph_error   # why the graph family had no choice, or None
    cdef object _refused_engines        # engine index -> why it was refused at some size:
                                        # Note [Graph results checked] in _check.pyx
    cdef object _accepted_at            # batch -> engines whose configs the check accepted
    cdef readonly object last_unchecked_sizes   # sizes of the last benchmark call whose
                                        # front an engine refused later in it had shadowed
    cdef bint _holding          # hold_benchmark_buffers(True): keep them between calls
    cdef object _held           # (samples, cap, x, y, w, workspace) kept, or None
    cdef bint _warm             # a Find already ran on the held buffers
    cdef object __weakref__     # the planners find their state by the kernel (planner_state)

    cdef int _set_geometry(self) except -1
    cdef int _set_tensor(self, dnn.cudnnTensorDescriptor_t d, int which, int b) except -1
    cdef void _free_plan(self) noexcept
