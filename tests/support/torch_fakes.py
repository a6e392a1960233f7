"""The ``fake_cuda`` fixture of ucudnn.torch's CPU tests: with the fake core (``fake_core``
fixture), no device guard, a capture state the test sets (``fake_cuda["now"]``), and empty
kernel and arena caches in :mod:`ucudnn.torch.runtime`. A test module imports it after
skipping where torch is missing."""
import contextlib

import pytest
import torch

from ucudnn.torch import runtime


@pytest.fixture
def fake_cuda(fake_core, monkeypatch):
    capturing = {"now": False}
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing["now"])
    monkeypatch.setattr(runtime, "_kernels", {})
    monkeypatch.setattr(runtime, "_slots", {})
    return capturing
