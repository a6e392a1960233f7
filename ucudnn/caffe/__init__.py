"""Caffe's side, without Caffe: its nets read and written, their shapes, and what Caffe and the
core write while they run.

* :mod:`.proto` -- Caffe's net messages and the prototxt text format, through protobuf only;
* :mod:`.protoc` -- a ``.proto`` compiled with whatever protoc there is (setup.py loads it by
  path, so it uses the standard library only);
* :mod:`.fork` -- a Caffe fork's schema with ``UcudnnParameter``, its messages read with
  BVLC's defaults;
* :mod:`.upgrade` -- V1 nets upgraded as Caffe upgrades them when it reads them;
* :mod:`.textscan` -- where things are in a prototxt's text, and what protobuf's parser reads
  otherwise than Caffe's;
* :mod:`.params` -- ``ucudnn_param`` and the plan settings it means;
* :mod:`.shapes` -- Caffe's shape rules over a parsed net: every blob's shape, a
  :class:`~ucudnn.plan.layers.LayerSpec` per Convolution layer;
* :mod:`.prototxt` -- what ``ucudnn plan --prototxt`` and ``ucudnn prototxt`` need of a net;
* :mod:`.memory` -- what a Caffe net holds on the GPU while it trains, from its prototxt;
* :mod:`.records` -- reading the plan records the core writes inside Caffe;
* :mod:`.log` -- reading what ``caffe time`` prints.

Imports :mod:`ucudnn.measure` (the plan records' constants), :mod:`ucudnn.plan` and
:mod:`ucudnn.vocab`; never :mod:`ucudnn.experiments` or the CLI (Note [Layers of the
package] in :mod:`ucudnn`).
"""
