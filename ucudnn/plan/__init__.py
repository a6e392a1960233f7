"""Planning, pure and CPU-only: convolution shapes (:mod:`.conv`), benchmark tables
(:mod:`.table`), the per-kernel DP and desirable sets (:mod:`.dp`), the network ILP
(:mod:`.ilp`) and whole-network plans (:mod:`.network`).

Owns no I/O but reading and writing CSV tables; imports only :mod:`ucudnn.vocab` (and PuLP for
the ILP). Never imports the compiled core, the cache, Caffe or the CLI: everything here is
testable from tables on a machine without a GPU.
"""
