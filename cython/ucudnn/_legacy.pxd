# Declarations of ucudnn._legacy: the legacy convolution API's calls for a kernel: cudnnFind,
# the re-timing of what it found, and the workspace queries.

from libc.stdint cimport uintptr_t
from ucudnn._device cimport DeviceBuffer, Handle
from ucudnn._kernel cimport Kernel


cdef list _find_c(Kernel kern, Handle handle, uintptr_t xd_, uintptr_t yd_, DeviceBuffer x,
                  DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws)
cdef list _time_c(Kernel kern, Handle handle, uintptr_t xd_, uintptr_t yd_, DeviceBuffer x,
                  DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, list records, int iters,
                  int warmup, int b, int slices)
cdef _retime(Kernel kern, Handle handle, uintptr_t xd, uintptr_t yd, DeviceBuffer x,
             DeviceBuffer y, DeviceBuffer w, DeviceBuffer ws, dict found, int b,
             int iters, int warmup, int samples, dict spent)
cdef object _legacy_need(Kernel kern, sizes, cap)
cdef object _legacy_workspace(Kernel kern, int batch, int algo, int math)
