"""ucudnn for PyTorch (the ``torch`` extra: ``pip install 'ucudnn[torch]'``): convolutions
micro-batched through the compiled core, as PyTorch operators and modules. Usage and scope:
docs/torch.md.

* :func:`convert` (:mod:`.convert`) -- swap a model's convolution modules for the core's, and
  say which stay PyTorch's and why;
* :func:`plan` (:mod:`.planning`) -- a model's kernels with their plans, as ``ucudnn plan``
  prints them;
* :mod:`.modules` -- the converted modules, subclasses of PyTorch's;
* :mod:`.ops` -- the operators ``ucudnn::conv_fwd``, ``conv_bwd_data``, ``conv_bwd_filter``:
  CUDA, fake and autograd implementations, in two registration styles;
* :mod:`.eager` -- a module's call: the operators, or in plain eager mode their
  implementations under an autograd Function of its own (Note [Eager calls]), in C++ where
  the extension ``_native`` (``native.cpp``, built beside PyTorch) loads (Note [Native calls]);
* :mod:`.runtime` -- the settings ids, one planned kernel per input shape, the call on
  PyTorch's stream with PyTorch's memory;
* :mod:`.netwide` -- a converted model's kernels planned together (``ilp``, ``shared``);
* :mod:`.geometry` -- the one bridge from a PyTorch convolution to the core's geometry;
* :mod:`.libcudnn` -- one libcudnn in the process (Note [One cuDNN with PyTorch]).

Within the folder: libcudnn, geometry < netwide < runtime < ops < eager < modules < convert
< planning.
Importing it checks that PyTorch and the core share one cuDNN (:func:`.libcudnn.check_process`)
and registers the operators; ``import ucudnn`` never imports it.
Imports every other layer of the package (the plan printing of :mod:`ucudnn.cli.plan`, the
planning and measuring packages), and torch; never :mod:`ucudnn.__main__` (Note [Layers of
the package] in :mod:`ucudnn`).
"""
from .convert import ConvertReport, convert
from .libcudnn import CudnnMismatch, check_process
from .modules import Conv2d, Conv3d, ConvTranspose2d, ConvTranspose3d
from .ops import active
from .planning import PlanReport, plan
from .runtime import CaptureError

__all__ = ["convert", "plan", "ConvertReport", "PlanReport", "CaptureError", "CudnnMismatch",
           "Conv2d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d"]

check_process()
active()
