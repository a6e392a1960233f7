"""The GPU side: measuring cuDNN, the benchmark cache, the shipped data, and plans for live
kernels.

* :mod:`.bench` -- the one door to the compiled core, device facts, one kernel's benchmarks at
  given sizes through the cache;
* :mod:`.cache` -- the SQLite benchmark cache, shared by processes, runs and users;
* :mod:`.shipped` -- the H200 benchmark data shipped with the package, found by kernel
  identity;
* :mod:`.for_plan` -- measuring for a plan: a kernel's benchmarks for its settings (the
  pruned search at run time), a net's kernels, spread over several GPUs;
* :mod:`.live` -- plans for live kernels: one kernel, several one by one, a whole net,
  resolved in the core with the fallbacks;
* :mod:`.runtime` -- what the C API calls (``_capi`` imports it; it sets up the host's
  logging from ``$UCUDNN_LOG``);
* :mod:`.planner_state` -- what the planners know of each live kernel (its settings, benchmark
  table, bench record and timing), kept beside the core's ``Kernel``;
* :mod:`.records` -- the plan records' writer (``$UCUDNN_RECORDS``) and their schema
  constants;
* :mod:`.sources` -- where ``ucudnn plan``, ``bench`` and ``cache`` get benchmark data:
  tables, the cache, this GPU, the shipped data.

Within the folder: planner_state < records, cache, shipped < bench < for_plan < live < runtime,
sources.
Imports :mod:`ucudnn.plan`, :mod:`ucudnn.vocab` and :mod:`ucudnn.paths`; never
:mod:`ucudnn.caffe`, :mod:`ucudnn.experiments` or the CLI (Note [Layers of the package] in
:mod:`ucudnn`). The compiled core is imported lazily through :mod:`.bench` only, so the cache,
the shipped data and planning from them work on a machine without CUDA.
"""
