"""Experiments: the paper's grid run with the patched Caffe and the figures drawn from saved
results only (:mod:`.plots`).

``ucudnn reproduce``: :mod:`.reproduce` (the runner and its Options) over :mod:`.grid` (the
points), :mod:`.caffe_run` (one ``caffe time`` process with plan records), :mod:`.predict`
(planned from the shipped data, no GPU), :mod:`.results` (the results document, schema 2 with
schema 1 read), :mod:`.summary` (CSV and the text table) and :mod:`.gpu_memory` (a process's
peak GPU memory from NVML). ``ucudnn training``: :mod:`.training` (learning curves through
pycaffe with and without micro-batching).

May import every layer below (caffe, measure, plan, vocab); nothing below imports it.
"""
