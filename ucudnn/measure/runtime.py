"""What the C API calls (cython/ucudnn/_capi.pyx imports this module): a host's whole net
planned (``ucudnn_net_plan``: :func:`plan_net`), one kernel prepared (``ucudnn_kernel_create``:
:func:`prepare_kernel`) and planned again within a smaller limit (:func:`replan_kernel`). The
work is :mod:`.live`'s (planning live kernels) over :mod:`.for_plan`'s (measuring for a plan).

Importing this module gives a host that configures no Python logging (Caffe) the package's log
lines on stderr where ``$UCUDNN_LOG`` asks for them (:func:`~.live.log_from_environment`).
"""
from __future__ import annotations

from .live import LiveNet, log_from_environment, plan_net, prepare_kernel, replan_kernel

__all__ = ["LiveNet", "plan_net", "prepare_kernel", "replan_kernel"]

log_from_environment()
