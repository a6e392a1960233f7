"""ucudnn: μ-cuDNN for today's GPUs — micro-batched cuDNN convolutions for Caffe.

The package, top-down (imports run downward only; each folder's docstring says what it owns):

* :mod:`ucudnn.cli` — the ``ucudnn`` command, one thin module per subcommand.
* :mod:`ucudnn.experiments` — the paper's grid with Caffe (``reproduce``) and the figures.
* :mod:`ucudnn.caffe` — Caffe's side: prototxt through protobuf, shape inference, variants,
  the plan records Caffe writes through the core, ``caffe time`` logs.
* :mod:`ucudnn.measure` — the GPU side: device facts, benchmarks through the compiled core,
  the SQLite benchmark cache, the shipped H200 data, planning for live kernels (what the C API
  calls).
* :mod:`ucudnn.plan` — pure, CPU-only planning over benchmark tables: convolution shapes, DP,
  desirable sets, the ILP, whole networks.
* :mod:`ucudnn.vocab` — the vocabulary every layer shares: ops, policies, dtypes, math modes,
  algorithm names, sizes, status codes and error classes.

The compiled core (``cython/``): ``ucudnn._core`` (Kernel over cuDNN, run and time without the
GIL) and ``ucudnn._capi`` (the C API for C++ hosts such as Caffe, on top of
:mod:`ucudnn.measure.runtime`).
"""
__version__ = "0.2.0"
