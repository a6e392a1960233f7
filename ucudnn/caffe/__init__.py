"""Caffe's side: prototxt read and written through protobuf's text_format (:mod:`.proto`),
Caffe's shape rules over the parsed net (:mod:`.prototxt`), the structured plan records that
Caffe writes through the core (:mod:`.records`), and ``caffe time`` logs (:mod:`.log`).

Imports :mod:`ucudnn.plan`, :mod:`ucudnn.measure` and :mod:`ucudnn.vocab`; never
:mod:`ucudnn.experiments` or the CLI.
"""
