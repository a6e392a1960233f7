"""Where the C API lives, for C/C++ programs that embed Python and call ucudnn (Caffe).

``ucudnn config --cflags`` / ``--libs`` (or ``python -m ucudnn config ...``) print the flags to compile and link such a
program: the package's ``include/`` (ucudnn.h and the Cython-generated ``_capi_api.h``), the
cuDNN and CUDA headers the core was built against, and the embedding flags of this Python.
"""
from __future__ import annotations

import json
import os
import sysconfig
from typing import List

__all__ = ["get_include", "build_config", "cflags", "libs"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def get_include() -> str:
    return os.path.join(_HERE, "include")


def build_config() -> dict:
    path = os.path.join(_HERE, "_build_config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: the compiled core was not built "
                                "(pip install . builds it)")
    with open(path) as f:
        return json.load(f)


def _python_cflags() -> List[str]:
    inc = {sysconfig.get_path("include"), sysconfig.get_path("platinclude")}
    return [f"-I{d}" for d in sorted(inc)]


def _python_libs() -> List[str]:
    libdir = sysconfig.get_config_var("LIBDIR")
    ver = sysconfig.get_config_var("LDVERSION") or sysconfig.get_config_var("VERSION")
    out = [f"-L{libdir}", f"-Wl,-rpath,{libdir}", f"-lpython{ver}"]
    extra = (sysconfig.get_config_var("LIBS") or "").split()
    return out + extra + ["-lm"]


def cflags() -> List[str]:
    cfg = build_config()
    return [f"-I{get_include()}"] + [f"-I{d}" for d in cfg["include_dirs"]] + _python_cflags()


def libs() -> List[str]:
    cfg = build_config()
    out = []
    for lib in cfg["libraries"]:
        out += [f"-L{os.path.dirname(lib)}", f"-Wl,-rpath,{os.path.dirname(lib)}",
                f"-l:{os.path.basename(lib)}"]
    return out + _python_libs()
