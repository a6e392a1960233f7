"""ucudnn._core: micro-batched cuDNN convolutions; the compiled core's Python face.

Two layers, top-down:

* ``Kernel`` (Python class over a C struct): one convolution operation of one layer. It builds
  the cuDNN descriptors, benchmarks the choices of each family per micro-batch size
  (``benchmark``: legacy algorithms and graph-API engine configs, Note [Choices] in
  ucudnn/vocab.py), takes a plan from the planners in ``ucudnn`` (``set_plan``) and resolves
  it into C arrays, building the graph plans it names.
* ``run_kernel`` (C, ``nogil``): walks the resolved plan and calls cuDNN once per micro-batch.
  No Python, no host synchronisation: chunks are ordered on the caller's stream.

The graph family's backend-API calls are plain C in graph.h; the core decides which engine
configs to try and times them as it times algorithms.

The core is a ``.pxd``/``.pyx`` pair per responsibility in cython/ucudnn/ (compiler directives
in setup.py), and this module re-exports what Python uses of them:

=================  ============================================================================
``_types.pxd``     the C types: ucudnn_types.h's, graph.h's, the kernel struct the hot path walks
``_roles.pxd``     ``OP_ROLES``, the operand roles of each op as one table (Note [Operand roles])
``_conv.pxd``      ``conv_call``, the legacy API's one convolution call (inline)
``_device``        errors and the thread's last-error buffer, devices, cuDNN handles (Note
                   [Thread handles]), device buffers and their fills
``_timing``        one choice timed the way plans run (Notes [Re-timing near the front],
                   [Re-timing after the Finds], [Timing over the mini-batch], [Backward-filter
                   timed with beta 1])
``_legacy``        a kernel's cudnnFind, re-timing and workspace queries
``_graph``         a kernel's graph-API engine configs and plans (Note [Graph choices tried])
``_check``         graph results checked against a legacy algorithm's (Note [Graph results
                   checked])
``_bench``         a kernel's benchmark over both families
``_kernel``        ``Kernel`` (Notes [Benchmark workspace], [Find times]); its larger methods'
                   bodies are functions of the modules above, taking the kernel as argument
``_run``           the nogil hot path, ``run_kernel``, and ``time_run`` (Notes [Micro-batch
                   semantics], [Plans timed back to back])
=================  ============================================================================

The C API for C++ hosts (``cdef public api``, cython/ucudnn.h) is the separate module
``ucudnn._capi``, which cimports ``Kernel``, ``run_kernel`` and the last-error buffer from
those. Imports run one way: the core imports only :mod:`ucudnn.vocab`. Among the compiled
modules only cimports cross between those that cimport ``Kernel`` (Python-level imports reach
only ``_device`` and ``_timing``), so that any of them can be imported first.
"""

# the vocabulary the core checks its arguments by, as ucudnn._core offers it too
from ucudnn.vocab import (DTYPES, ENGINE_FAMILIES, GRAPH_ALGO, LAYOUTS, MATH_MODES,
                          NUMERICAL_NOTES, OP_CODES, OPS, InputError, PlanError, Status,
                          UcudnnError, engine_text, focus_configs, packed_strides,
                          parse_engine)

from ucudnn._device import (CoreError, CudaError, CudnnError, DeviceBuffer, Handle, _MAX_SIZE_T,
                            _device_lock, _device_locks, _device_locks_guard, cudnn_version,
                            device_count, device_info, random_values, set_device,
                            thread_handle_stats)
from ucudnn._timing import RETIME_ALWAYS_MS, RETIME_MARGIN, RETIME_WARMUP, _Events, _far_behind
from ucudnn._graph import (BEHAVIOR_RUNTIME_COMPILATION, HEUR_MODES, NOTE_DOWN_CONVERT,
                           NOTE_REDUCED_PRECISION, NOTE_TENSOR_CORE, GraphPlan)
from ucudnn._check import (CHECK_ELEMENTS, STATUS_INACCURATE, _FloatCopies, check_tolerance,
                           relative_error)
from ucudnn._bench import _choices, _merge_runs
from ucudnn._kernel import GRAPH_CONFIGS_DEFAULT, Kernel
from ucudnn._run import time_run
