"""Experiments: the paper's grid run with the patched Caffe, training curves, DeepBench, and
the figures drawn from saved results only.

* :mod:`.reproduce` -- ``ucudnn reproduce``: the runner and its Options;
* :mod:`.baseline` -- ``ucudnn baseline``: Caffe + ucudnn against every PyTorch mode, their
  processes interleaved; :mod:`.baseline_report` its CSV files and README;
* :mod:`.pytorch_modes` -- the PyTorch modes a comparison times, and its baseline among them;
* :mod:`.caffe_input` -- a net's DummyData drawn once (a Python layer), the input both sides get;
  :mod:`.caffe_input_layer` that layer, which imports pycaffe (Caffe imports it, nothing here);
* :mod:`.grid` -- the points of the grid, their names and order;
* :mod:`.caffe_run` -- one ``caffe time`` process of a point, with plan records;
* :mod:`.predict` -- a point planned from the shipped data (no GPU, no Caffe);
* :mod:`.results` -- the results document (schema 2, schema 1 read);
* :mod:`.summary` -- its CSV files and the text table;
* :mod:`.gpu_memory` -- a child process run with a timeout, its peak GPU memory from NVML;
* :mod:`.nvml` -- NVML: the GPU's clock, power and temperature while a process runs, versions;
* :mod:`.deepbench` -- DeepBench's training convolutions: layers, the runner's JSON, summary;
* :mod:`.plots` -- the figures;
* :mod:`.torch_study` -- the 3-D study of scripts/bench_torch.py: its layers, models, rows,
  process schedule and figure (no torch at import);
* :mod:`.torch_memcap` -- the memory-capped study of scripts/bench_torch.py (the 3-D models
  under a per-process memory cap): its schedule, rows, verdict per cap and figure (no torch at
  import);
* :mod:`.torch_frontend` -- the front-end overhead benchmark of scripts/bench_torch.py
  (ResNet-50 through ucudnn.torch against PyTorch's convolutions): its schedule, timing loop,
  records and medians (no torch at import);
* :mod:`.training` -- ``ucudnn training``: learning curves through pycaffe with and without
  micro-batching (a folder of its own).

Imports every layer below (:mod:`ucudnn.caffe`, :mod:`ucudnn.measure`, :mod:`ucudnn.plan`,
:mod:`ucudnn.vocab`, :mod:`ucudnn.paths`); never :mod:`ucudnn.cli` (Note [Layers of the
package] in :mod:`ucudnn`).
"""
