# Declarations of ucudnn._graph: the graph family's calls for a kernel (graph.h's backend-API
# calls): the engine configs to try, their plans built, their workspace, their notes.

from ucudnn._kernel cimport Kernel
from ucudnn._types cimport ucg_graph, ucg_plan, ucg_slabs


cdef class GraphPlan:
    cdef ucg_graph g
    cdef ucg_plan p
    cdef bint have_graph, have_plan
    cdef readonly object engine, batch, beta, build_seconds
    # a slab choice (pieces > 1): its pieces' plans (parts, each a GraphPlan of one slab),
    # run in order through s; g and p are then unused
    cdef readonly int pieces
    cdef ucg_slabs s
    cdef list parts


cdef object _graph_plan(Kernel kern, engine, int batch, double beta)
cdef object _engine_notes(Kernel kern, engine)
cdef object _graph_configs(Kernel kern, int batch, double beta)
cdef object _graph_build(Kernel kern, int b, size_t cap, bint slabs=*)
cdef object _graph_plans_for(Kernel kern, int batch, engine, dict built)
