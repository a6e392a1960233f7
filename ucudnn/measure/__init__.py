"""The GPU side: device facts and benchmarks through the compiled core (:mod:`.bench`), the
SQLite benchmark cache (:mod:`.cache`), the H200 data shipped with the package found by kernel
identity (:mod:`.shipped`), and planning for live kernels, which the C API calls
(:mod:`.runtime`).

Imports :mod:`ucudnn.plan` and :mod:`ucudnn.vocab`; never :mod:`ucudnn.caffe`,
:mod:`ucudnn.experiments` or the CLI. The compiled core is imported lazily, so the cache and the
shipped data work on a machine without CUDA.
"""
