"""Where ucudnn's files are, in one place: the nets and the benchmark data shipped with the
package, the source checkout (when there is one), and the Caffe that scripts/build_caffe.sh
builds.

Note [Checkout and installed package]
    An editable install runs from the checkout (``CHECKOUT``): the nets are its ``prototxt/``
    folder, Caffe is its ``third_party/caffe``. A wheel has no checkout: the nets are packaged
    into it (``ucudnn/nets``, copied from ``prototxt/`` when the wheel is built), and the
    files that only a checkout has (``scripts/``, ``third_party/caffe``) are looked for under
    the working directory (``scripts/gpu_node.sh`` runs from the checkout). Either way the nets
    are the same files: ``prototxt/`` is their one copy in the repository.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

__all__ = ["PACKAGE", "CHECKOUT", "local_root", "nets_dir", "net_prototxt", "net_names",
           "shipped_dir", "SHIPPED", "caffe_root", "caffe_build", "caffe_binary", "pycaffe_dir",
           "caffe_patches"]

#: The ``ucudnn`` package folder.
PACKAGE = Path(__file__).resolve().parent
#: The benchmark data shipped in the package (``ucudnn/data/h200``): its folder name.
SHIPPED = "h200"


def _checkout() -> Optional[Path]:
    root = PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "prototxt").is_dir() else None


#: The source checkout the package runs from (an editable install), or None (a wheel).
CHECKOUT = _checkout()


def local_root() -> Path:
    """Where the checkout's own files (``scripts/``, ``third_party/caffe``) are: the checkout,
    else the working directory (Note [Checkout and installed package])."""
    return CHECKOUT or Path.cwd()


def nets_dir() -> Path:
    """The nets' prototxt folder: the checkout's ``prototxt/``, else the wheel's copy."""
    return CHECKOUT / "prototxt" if CHECKOUT is not None else PACKAGE / "nets"


def net_names() -> List[str]:
    """The shipped nets (``alexnet``, ``resnet18``, ...), sorted."""
    return sorted(p.stem for p in nets_dir().glob("*.prototxt"))


def net_prototxt(name: str) -> Path:
    """The prototxt of the shipped net ``name``."""
    return nets_dir() / f"{name}.prototxt"


def shipped_dir() -> Path:
    """The shipped benchmark data (``ucudnn/data/h200``: layer lists, tables, meta.json)."""
    return PACKAGE / "data" / SHIPPED


def caffe_root() -> Path:
    """``third_party/caffe`` under :func:`local_root` (scripts/build_caffe.sh's prefix)."""
    return local_root() / "third_party" / "caffe"


def caffe_build() -> Path:
    """``$UCUDNN_CAFFE_BUILD``, else the build folder under :func:`caffe_root`."""
    env = os.environ.get("UCUDNN_CAFFE_BUILD")
    return Path(env) if env else caffe_root() / "build"


def caffe_binary() -> Path:
    """``$UCUDNN_CAFFE``, else ``tools/caffe`` of :func:`caffe_build`."""
    env = os.environ.get("UCUDNN_CAFFE")
    return Path(env) if env else caffe_build() / "tools" / "caffe"


def pycaffe_dir() -> Path:
    """``$UCUDNN_PYCAFFE``, else the patched source's ``python/`` under :func:`caffe_root`."""
    env = os.environ.get("UCUDNN_PYCAFFE")
    return Path(env) if env else caffe_root() / "src" / "python"


def caffe_patches(build: Path) -> Optional[List[str]]:
    """The patch stamp scripts/build_caffe.sh writes into the source tree next to ``build``
    (``source=...``, then one ``NAME SHA256`` line per patch applied), or None."""
    stamp = Path(build).parent / "src" / ".ucudnn-patches"
    return stamp.read_text(encoding="utf-8").splitlines() if stamp.is_file() else None
