"""Prototxt variants through Caffe's own protobuf classes.

``caffe_pb2`` is generated with ``protoc`` from the *patched* ``caffe.proto`` (caffe_patch/0002
adds ``UcudnnParameter``), so a variant is written by setting message fields, never by editing
text. Where the proto comes from, in order: the ``proto`` argument, ``$UCUDNN_CAFFE_PROTO``,
``third_party/caffe/src/src/caffe/proto/caffe.proto`` of a source checkout (what
``scripts/build_caffe.sh`` leaves there).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Optional

__all__ = ["CaffeProtoError", "find_caffe_proto", "load_caffe_pb2", "read_net", "write_net",
           "set_ucudnn_param", "POLICY_NAMES"]

#: CLI/planner policy names -> UcudnnParameter.Policy names
POLICY_NAMES = {"undivided": "UNDIVIDED", "powerOfTwo": "POWER_OF_TWO", "all": "ALL"}
_MATH_NAMES = {"default": "DEFAULT_MATH", "tensor_op": "TENSOR_OP", "fma": "FMA"}
_OPTIMIZER_NAMES = {"dp": "DP", "ilp": "ILP"}
_CHECKOUT_PROTO = Path("third_party/caffe/src/src/caffe/proto/caffe.proto")


class CaffeProtoError(RuntimeError):
    """caffe.proto cannot be found, compiled or is not the patched one."""


def find_caffe_proto(proto: Optional[str] = None) -> Path:
    cands = [proto, os.environ.get("UCUDNN_CAFFE_PROTO"),
             Path(__file__).resolve().parents[1] / _CHECKOUT_PROTO, Path.cwd() / _CHECKOUT_PROTO]
    for c in cands:
        if c and Path(c).is_file():
            return Path(c).resolve()
    raise CaffeProtoError("caffe.proto not found: pass --caffe-proto PATH or set "
                          "UCUDNN_CAFFE_PROTO (scripts/build_caffe.sh --skip-build writes "
                          f"{_CHECKOUT_PROTO})")


_loaded = {}


def load_caffe_pb2(proto: Optional[str] = None):
    """The ``caffe_pb2`` module generated from the patched caffe.proto (cached per path)."""
    path = find_caffe_proto(proto)
    if path in _loaded:
        return _loaded[path]
    if "UcudnnParameter" not in path.read_text():
        raise CaffeProtoError(f"{path} has no UcudnnParameter: apply caffe_patch/0002 first")
    protoc = shutil.which("protoc")
    if protoc is None:
        raise CaffeProtoError("protoc not found (apt-get install protobuf-compiler)")
    out = Path(tempfile.mkdtemp(prefix="ucudnn-caffe-pb2-"))
    res = subprocess.run([protoc, f"--proto_path={path.parent}", f"--python_out={out}",
                          str(path)], capture_output=True, text=True)
    if res.returncode != 0:
        raise CaffeProtoError(f"protoc failed on {path}: {res.stderr.strip()}")
    spec = importlib.util.spec_from_file_location(f"_ucudnn_caffe_pb2_{len(_loaded)}",
                                                  out / "caffe_pb2.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    _loaded[path] = module
    return module


def read_net(pb2, path: str):
    from google.protobuf import text_format
    net = pb2.NetParameter()
    try:
        text_format.Parse(Path(path).read_text(), net)
    except text_format.ParseError as e:
        raise CaffeProtoError(f"{path}: {e}") from None
    return net


def write_net(net, path: str) -> None:
    """Write atomically (temporary file, then rename)."""
    from google.protobuf import text_format
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".prototxt",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text_format.MessageToString(net))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _enum_value(enum, names, value, option):
    """The proto enum number for a CLI name; an error naming the option otherwise."""
    if value not in names:
        raise CaffeProtoError(f"{option}: unknown value {value!r} "
                              f"(expected one of {', '.join(names)})")
    return enum.Value(names[value])


def set_ucudnn_param(net, *, policy: Optional[str] = None, optimizer: Optional[str] = None,
                     limit: Optional[int] = None, budget: Optional[int] = None,
                     sizes: Optional[Iterable[int]] = None, math: Optional[str] = None,
                     repeats: Optional[int] = None, cache_path: Optional[str] = None,
                     layers: Optional[Iterable[str]] = None):
    """Set ``ucudnn_param`` on the net (the default of every layer) or on the named layers."""
    targets = [net.ucudnn_param]
    if layers is not None:
        names = list(layers)
        by_name = {l.name: l for l in net.layer}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise CaffeProtoError(f"--layers: no layer named {', '.join(missing)} in the net")
        targets = [by_name[n].ucudnn_param for n in names]
    for p in targets:
        if policy is not None:
            p.policy = _enum_value(p.Policy, POLICY_NAMES, policy, "--policy")
        if optimizer is not None:
            p.optimizer = _enum_value(p.Optimizer, _OPTIMIZER_NAMES, optimizer, "--optimizer")
        if limit is not None:
            p.workspace_limit = limit
        if budget is not None:
            p.total_workspace = budget
        if sizes is not None:
            del p.micro_batch_size[:]
            p.micro_batch_size.extend(sizes)
        if math is not None:
            p.math = _enum_value(p.MathMode, _MATH_NAMES, math, "--math")
        if repeats is not None:
            p.benchmark_repeats = repeats
        if cache_path is not None:
            p.cache_path = cache_path
    return net
