"""ucudnn: μ-cuDNN for today's GPUs — micro-batched cuDNN convolutions for Caffe.

The package, top-down (each folder's docstring says what it owns):

* :mod:`ucudnn.cli` — the ``ucudnn`` command, one thin module per subcommand;
* :mod:`ucudnn.experiments` — the paper's grid with Caffe (``reproduce``), training curves,
  DeepBench, and the figures;
* :mod:`ucudnn.caffe` — Caffe's side: prototxt through protobuf, shape inference, variants,
  the plan records Caffe writes through the core, ``caffe time`` logs;
* :mod:`ucudnn.measure` — the GPU side: device facts, benchmarks through the compiled core,
  the SQLite benchmark cache, the shipped H200 data, measuring for a plan, planning live
  kernels (what the C API calls);
* :mod:`ucudnn.plan` — pure, CPU-only planning over benchmark tables: convolution shapes,
  settings, DP, desirable sets, the pruned search, the ILP, whole networks;
* :mod:`ucudnn.vocab` — the vocabulary every layer shares: ops, policies, dtypes, math modes,
  algorithm names, sizes, status codes and error classes;
* :mod:`ucudnn.paths` — where the package's files are: the nets, the shipped data, the
  checkout, the Caffe build;
* :mod:`ucudnn.config` — compile and link flags for C/C++ hosts of the C API;
* :mod:`ucudnn.__main__` — ``python -m ucudnn``;
* :mod:`ucudnn.torch` — the optional PyTorch integration (the ``torch`` extra): operators,
  converted modules, planning a model; imported only by its users, never by ``import ucudnn``.

The compiled core (``cython/``): ``ucudnn._core`` (Kernel over cuDNN, run and time without the
GIL) and ``ucudnn._capi`` (the C API for C++ hosts such as Caffe, on top of
:mod:`ucudnn.measure.runtime`).

Note [Layers of the package]
    The package is layered; a module imports only modules of its own layer or of the layers
    below it, lowest first:

    0. ``ucudnn`` (this file), :mod:`ucudnn.vocab`, :mod:`ucudnn.paths`, :mod:`ucudnn.config`,
       :mod:`ucudnn.files`: import nothing of the package;
    1. :mod:`ucudnn.plan`: imports layer 0;
    2. :mod:`ucudnn.measure`: imports layers 0-1;
    3. :mod:`ucudnn.caffe`: imports layers 0-2 (the plan records' constants come from
       :mod:`ucudnn.measure.records`);
    4. :mod:`ucudnn.experiments`: imports layers 0-3;
    5. :mod:`ucudnn.cli`: imports layers 0-4;
    6. :mod:`ucudnn.__main__`: imports layer 5;
    7. :mod:`ucudnn.torch`: imports layers 0-5 (the CLI's plan printing among them); nothing
       of the package imports it, so ``import ucudnn`` and the command never need torch.

    Within a layer the imports form no cycle. Imports of the package's own modules sit at the
    top of each module, so that the graph a reader sees is the graph Python runs; the one
    exception is the compiled core, imported inside one function only,
    ``ucudnn.measure.bench._load_core`` (behind ``core()`` and ``core_status()``), so that
    what needs no GPU runs without it, or with the tests' fake core installed as
    ``sys.modules["ucudnn._core"]`` (tests/support/fake_core.py). Third-party packages that
    are slow to import or optional stay inside the functions that use them, so that the
    command starts fast and the extras stay optional: protobuf (:mod:`ucudnn.caffe`), PuLP
    and its solver (:mod:`ucudnn.plan.ilp`), NVML, matplotlib, numpy, scikit-learn and pycaffe
    (:mod:`ucudnn.experiments`); torch is imported at the top of :mod:`ucudnn.torch`'s
    modules, which only users of the extra import. tests/test_imports.py checks these rules, reading the source
    with ``ast``.
"""
__version__ = "0.2.0"
