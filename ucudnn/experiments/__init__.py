"""Experiments: the paper's grid run with the patched Caffe (:mod:`.reproduce`) and the
figures drawn from saved results only (:mod:`.plots`).

May import every layer below (caffe, measure, plan, vocab); nothing below imports it.
"""
