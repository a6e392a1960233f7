"""ucudnn: μ-cuDNN for today's GPUs — micro-batched cuDNN convolutions for Caffe.

Planning (pure Python, runs on a CPU): :mod:`ucudnn.dp` (per-kernel DP, desirable sets),
:mod:`ucudnn.ilp` (network-wide workspace division), :mod:`ucudnn.network`,
:mod:`ucudnn.cache` (SQLite benchmark cache), :mod:`ucudnn.table` (CSV tables).
GPU: the compiled core ``ucudnn._core`` (Cython over cuDNN), :mod:`ucudnn.bench`,
:mod:`ucudnn.runtime` (what the C API calls). CLI: ``ucudnn`` / ``python -m ucudnn``.
"""
__version__ = "0.1.0"
