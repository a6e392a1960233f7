# Declarations of ucudnn._check: the check of graph results against a legacy algorithm's
# (Note [Graph results checked] in _check.pyx).

from libc.stdint cimport uintptr_t
from ucudnn._device cimport DeviceBuffer, Handle
from ucudnn._graph cimport GraphPlan
from ucudnn._kernel cimport Kernel


cdef object _check_region(Kernel kern, bint whole=*)
cdef object _reference(Kernel kern, Handle handle, int b, uintptr_t xd_, uintptr_t yd_,
                       DeviceBuffer x, DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, role,
                       size_t count)
cdef object _graph_error(Kernel kern, Handle handle, GraphPlan gp, DeviceBuffer x,
                         DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, uintptr_t out_,
                         size_t count, bytes ref, int ref_dtype)
cdef object _check_graph(Kernel kern, Handle handle, int b, DeviceBuffer x, DeviceBuffer y,
                         DeviceBuffer w, DeviceBuffer ws, uintptr_t xd_, uintptr_t yd_,
                         list out, dict plans)
cdef object _mark_refused(Kernel kern, dict result)
