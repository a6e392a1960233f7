# Declarations of ucudnn._bench: a kernel's benchmark over both families at its micro-batch
# sizes (Kernel.benchmark).

from libc.stdint cimport uintptr_t
from ucudnn._device cimport DeviceBuffer, Handle
from ucudnn._kernel cimport Kernel


cdef object _benchmark(Kernel kern, sizes, int repeats, workspace_cap, progress,
                       int time_iters, families, int time_warmup, bint retime_last)
cdef object _graph_c(Kernel kern, Handle handle, int b, list built, DeviceBuffer x,
                     DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, int iters, int slices,
                     uintptr_t xd_, uintptr_t yd_)
