"""One libcudnn in the process: the cuDNN that PyTorch loaded, the one the core was built
against, and the check that importing :mod:`ucudnn.torch` makes (:func:`check_process`).

Note [One cuDNN with PyTorch]
    A CUDA build of PyTorch loads its own cuDNN (the nvidia-cudnn wheel's) when it is
    imported. The dynamic linker serves a library's ``libcudnn.so.9`` dependency with one
    already loaded under that soname, so a core loaded after torch (importing
    :mod:`ucudnn.torch` imports torch first, and the core only when it is used) runs on
    PyTorch's cuDNN, whichever it was built against. The other order is not safe: PyTorch
    2.15 loads its cuDNN by path, so a core loaded first from another file (a GPU probe that
    imports ``ucudnn._core`` before torch, as the tests' conftest does) leaves two libcudnn
    files in the process. Building the core against PyTorch's cuDNN makes both orders one
    file (docs/torch.md). Importing :mod:`ucudnn.torch` checks the process's memory map
    (``/proc/self/maps``) for:

    * two libcudnn files mapped at once (a copy loaded by its path, such as ``ctypes.CDLL``
      of another cuDNN): two cuDNNs whose handles and descriptors must never meet.
      :class:`CudnnMismatch` is raised, naming both files.
    * the core built against another cuDNN than the one PyTorch loaded: the core's headers
      are not those of the library it runs on. Within one major version cuDNN keeps its ABI,
      so this is logged as a warning naming both files and how to build the core against
      PyTorch's (docs/torch.md); another major version raises :class:`CudnnMismatch`.

    A PyTorch without CUDA maps no cuDNN, and a core that was never built records none: then
    there is nothing to compare. Files are compared as files (device and inode), so a symbolic
    link and its target are one.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import List, Optional

from ..config import build_config
from ..vocab import UcudnnError

__all__ = ["CudnnMismatch", "CudnnFacts", "mapped_cudnn", "judge", "check_process"]

log = logging.getLogger("ucudnn")

MAPS = "/proc/self/maps"
#: cuDNN's main library (its sub-libraries, libcudnn_cnn.so.9 and others, are not it)
_MAIN = re.compile(r"^libcudnn\.so(\.\d+)*$")


class CudnnMismatch(UcudnnError, ImportError):
    """Two cuDNNs in one process, or a core built against another major version than the one
    PyTorch loaded (Note [One cuDNN with PyTorch])."""


@dataclass(frozen=True)
class CudnnFacts:
    """What :func:`judge` compares: the libcudnn files mapped in the process (PyTorch's, when
    only PyTorch has loaded one), and the library and version the core was built against
    (None: no core built)."""
    mapped: List[str]
    built: Optional[str]
    built_version: Optional[str]


def mapped_cudnn(maps_path: str = MAPS) -> List[str]:
    """The distinct libcudnn main-library files mapped in the process whose memory map is
    ``maps_path``, as real paths in the order they first appear ([] where the map cannot be
    read: not Linux)."""
    try:
        with open(maps_path) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    files: List[str] = []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].strip()
        if _MAIN.match(os.path.basename(path)):
            real = os.path.realpath(path)
            if not any(_same(real, f) for f in files):
                files.append(real)
    return files


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _major(version: Optional[str]) -> Optional[str]:
    return version.split(".", 1)[0] if version else None


def _file_major(path: str) -> Optional[str]:
    """The major version in a library file's name (libcudnn.so.9.19.0 -> '9')."""
    m = re.search(r"\.so\.(\d+)", os.path.basename(path))
    return m.group(1) if m else None


def judge(facts: CudnnFacts) -> Optional[str]:
    """Raise :class:`CudnnMismatch` for two cuDNNs, or a core built against another major
    version; return the warning for a core built against another file of the same major
    version; None where all is one library (Note [One cuDNN with PyTorch])."""
    if len(facts.mapped) > 1:
        raise CudnnMismatch("ucudnn.torch: two libcudnn files are loaded in this process: "
                            + " and ".join(facts.mapped) + "; load one cuDNN (build the core "
                            "against PyTorch's: docs/torch.md)")
    if not facts.mapped or facts.built is None or _same(facts.mapped[0], facts.built):
        return None
    loaded = facts.mapped[0]
    fix = (f"build the core against it: CUDNN_ROOT={os.path.dirname(os.path.dirname(loaded))} "
           "pip install --force-reinstall --no-deps . (docs/torch.md)")
    built_major = _major(facts.built_version) or _file_major(facts.built)
    loaded_major = _file_major(loaded)
    if built_major and loaded_major and built_major != loaded_major:
        raise CudnnMismatch(f"ucudnn.torch: the core was built against cuDNN "
                            f"{facts.built_version or built_major} ({facts.built}), PyTorch "
                            f"loaded {loaded}, major version {loaded_major}; {fix}")
    return (f"ucudnn.torch: the core was built against {facts.built} (cuDNN "
            f"{facts.built_version or '?'}); PyTorch loaded {loaded}, which the core runs on "
            f"(one library per soname); {fix}")


def _built() -> tuple:
    try:
        cfg = build_config()
    except FileNotFoundError:
        return None, None
    return cfg.get("cudnn_library"), cfg.get("cudnn_version")


def check_process(maps_path: str = MAPS) -> CudnnFacts:
    """Check this process (Note [One cuDNN with PyTorch]): raise or log, and return the facts
    compared."""
    facts = CudnnFacts(mapped_cudnn(maps_path), *_built())
    warning = judge(facts)
    if warning is not None:
        log.warning("%s", warning)
    return facts
