"""Planning, pure and CPU-only: everything here is testable from benchmark tables on a machine
without a GPU.

* :mod:`.conv` -- convolution geometry: the output-size rule and the kernel record
  (:class:`~.conv.ConvShape`) the cache keys on;
* :mod:`.layers` -- a net's convolution layers as the planners see them
  (:class:`~.layers.LayerSpec`) and the layer-list CSV;
* :mod:`.table` -- benchmark tables: what cuDNN measured per (layer, op, micro-batch size,
  algorithm), read and written as CSV;
* :mod:`.settings` -- the one settings record of a plan (:class:`~.settings.PlanSettings`),
  its defaults, and the workspace a plan may use;
* :mod:`.dp` -- one kernel's plan: dynamic programming over micro-batch sizes, desirable sets;
* :mod:`.search` -- the pruned search over micro-batch sizes (the ``all`` plan from a
  fraction of the benchmarks);
* :mod:`.ilp` -- the network-wide workspace division as an integer linear program;
* :mod:`.network` -- the one network planner: a net's kernels and settings to every kernel's
  plan and where its workspace lies;
* :mod:`.slabs` -- a convolution split along its outermost spatial axis, below one sample:
  each piece's rows, halo and padding (not yet executed by the core).

Imports :mod:`ucudnn.vocab` only (and PuLP for the ILP); never :mod:`ucudnn.measure`,
:mod:`ucudnn.caffe`, :mod:`ucudnn.experiments`, :mod:`ucudnn.cli` or the compiled core (Note
[Layers of the package] in :mod:`ucudnn`). Owns no I/O but reading and writing CSV tables.
"""
