"""Caffe's net messages and the prototxt text format, through protobuf only.

:func:`load_caffe_pb2` gives Caffe's message classes (``NetParameter``, ``LayerParameter``,
``UcudnnParameter``, ...); :func:`read_net` / :func:`parse_net` read a prototxt with
``google.protobuf.text_format`` and :func:`write_net` writes one; :func:`set_ucudnn_param` makes
a variant by setting message fields, never by editing text. Shape inference over the parsed
messages is :mod:`ucudnn.caffe.prototxt`.

Note [Where the Caffe classes come from]
    By default from ``caffe_subset.proto`` beside this module: ucudnn's own schema for the
    Caffe nets it handles -- the messages and fields that shape inference reads and that usual
    deploy/benchmark nets (AlexNet, VGG, ResNet, GoogLeNet-style Concat, CIFAR-10 quick, LeNet
    with an Input layer) use, with Caffe's names, numbers, types, defaults and enums as
    caffe_patch/0002 leaves caffe.proto at ``ucudnn.vocab.CAFFE_COMMIT``. It is not a copy of
    Caffe's file (third-party source is never committed); NetParameter and LayerParameter
    declare a subset of their fields, data-reading layers' parameters, weights (``blobs``) and
    the solver are left out, and V1's ``layers`` is an empty stub so that such nets are refused
    by name. So nothing of Caffe is needed -- no checkout, no build. ``setup.py``
    (``build_py``) compiles it into ``caffe_subset.desc``, a serialized ``FileDescriptorSet``
    shipped in the wheel (a build output: not in git); at run time the descriptors go into a
    private ``DescriptorPool`` and ``message_factory`` makes the classes. So run time needs
    neither protoc nor generated ``_pb2.py`` code, and a descriptor set has no gencode/runtime
    version rule (protobuf >= 5.26 refuses ``_pb2.py`` newer than its runtime): any protobuf >=
    3.20 reads it, whichever protoc wrote it. The build needs a protobuf compiler: ``$PROTOC``,
    ``protoc`` on ``PATH`` (Ubuntu's 3.21 on the air-gapped node, ``--no-build-isolation``), or
    grpcio-tools (a build requirement, so an isolated ``pip install`` on a machine without
    protoc gets one). Where the ``.desc`` is missing (a source tree never built) or older than
    the ``.proto``, it is compiled on the fly when a compiler is there.

    Caffe's own (patched) caffe.proto is used instead when it is named: the ``proto`` argument
    (``--caffe-proto``) or ``$UCUDNN_CAFFE_PROTO``; it is compiled the same way, so it needs
    protoc at run time. That is the way to write variants of nets using fields outside the
    subset. tests/test_caffe_proto.py checks every subset field against the patched file
    (number, type, label, default, enums; messages other than NetParameter/LayerParameter
    complete), that the shipped nets serialize to the same bytes with both, and that both give
    the same LayerSpecs. A build tree is not picked up on its own, so that results do not
    depend on whether protoc happens to be on ``PATH``.

Note [Strict and lenient reading]
    :func:`read_net` is strict by default: an unknown field is an error (file:line:col and the
    field), because a variant written from a net whose fields were skipped would silently lose
    them; with the subset the error says to name the patched caffe.proto instead
    (:data:`SUBSET_HINT`). Shape inference (``lenient=True``) parses with
    ``allow_unknown_field`` and ``allow_unknown_extension``, so nets with layers or fields the
    schema does not model (data layers' parameters, transform_param, weights, ...) still give
    their convolution shapes. Written files carry no comments (text_format drops them) and list
    fields in schema order.
"""
from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Iterable, Optional

from ..plan.table import read_text as read_text_file, write_text
from ..vocab import InputError

__all__ = ["PrototxtError", "CaffeProtoError", "OWNED_PROTO", "find_caffe_proto",
           "SUBSET_HINT", "load_caffe_pb2", "read_text", "parse_net", "read_net", "write_net",
           "check_ucudnn_param", "set_ucudnn_param", "merged_ucudnn_param", "POLICY_NAMES"]

#: CLI/planner policy names -> UcudnnParameter.Policy names
POLICY_NAMES = {"undivided": "UNDIVIDED", "powerOfTwo": "POWER_OF_TWO", "all": "ALL"}
_MATH_NAMES = {"default": "DEFAULT_MATH", "tensor_op": "TENSOR_OP", "fma": "FMA"}
_OPTIMIZER_NAMES = {"dp": "DP", "ilp": "ILP", "shared": "SHARED"}

_HERE = Path(__file__).resolve().parent
#: ucudnn's own subset of Caffe's net messages (Note [Where the Caffe classes come from])
OWNED_PROTO = _HERE / "caffe_subset.proto"
#: its FileDescriptorSet, written by setup.py
OWNED_DESCRIPTOR = _HERE / "caffe_subset.desc"


#: what a strict read with the subset adds to an unknown field's error
SUBSET_HINT = ("not in ucudnn's caffe_subset.proto, which declares only the fields of the "
               "usual layers: pass --caffe-proto PATH (or set $UCUDNN_CAFFE_PROTO) with "
               "Caffe's patched caffe.proto, e.g. "
               "third_party/caffe/src/src/caffe/proto/caffe.proto after "
               "scripts/build_caffe.sh --skip-build")


class PrototxtError(InputError):
    """A prototxt or caffe.proto that cannot be read, compiled or used; the message names the
    file (line:column for text-format errors), the layer and the field."""


#: the name older callers use
CaffeProtoError = PrototxtError


def find_caffe_proto(proto: Optional[str] = None) -> Optional[Path]:
    """Caffe's caffe.proto named by ``proto`` or ``$UCUDNN_CAFFE_PROTO``; None: ucudnn's own."""
    for name, c in (("--caffe-proto", proto), ("UCUDNN_CAFFE_PROTO",
                                                os.environ.get("UCUDNN_CAFFE_PROTO"))):
        if c:
            if not Path(c).is_file():
                raise PrototxtError(f"{name}: {c}: no such file")
            return Path(c).resolve()
    return None


def _descriptor_set(proto: Path) -> bytes:
    from .protoc import ProtocError, descriptor_set
    try:
        return descriptor_set(proto)
    except ProtocError as e:
        raise PrototxtError(f"{proto}: {e}") from None


def _owned_descriptor_set() -> bytes:
    from .protoc import find_protoc
    have = OWNED_DESCRIPTOR.is_file()
    stale = have and OWNED_PROTO.stat().st_mtime > OWNED_DESCRIPTOR.stat().st_mtime
    if have and not (stale and find_protoc()):
        return OWNED_DESCRIPTOR.read_bytes()
    if not have and not find_protoc():
        raise PrototxtError(f"{OWNED_DESCRIPTOR} is missing (setup.py builds it): reinstall "
                            "ucudnn (pip install .), or install protoc")
    return _descriptor_set(OWNED_PROTO)


def _classes(data: bytes, source: Path):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    files = descriptor_pb2.FileDescriptorSet.FromString(data).file
    pool = descriptor_pool.DescriptorPool()
    for f in files:
        pool.Add(f)
    get = getattr(message_factory, "GetMessageClass", None)      # protobuf >= 4.22
    if get is None:
        get = message_factory.MessageFactory(pool).GetPrototype
    ns = types.SimpleNamespace(source=source, pool=pool)
    for f in files:
        fd = pool.FindFileByName(f.name)
        for name, desc in fd.message_types_by_name.items():
            setattr(ns, name, get(desc))
        for name, enum in fd.enum_types_by_name.items():
            for v in enum.values:
                setattr(ns, v.name, v.number)
    if not hasattr(ns, "UcudnnParameter"):
        raise PrototxtError(f"{source} has no UcudnnParameter: apply caffe_patch/0002 first")
    return ns


_loaded = {}


def load_caffe_pb2(proto: Optional[str] = None):
    """Caffe's message classes as attributes of one namespace (``pb2.NetParameter()``, ...),
    from ucudnn's caffe_subset.proto or the named caffe.proto (Note [Where the Caffe classes
    come from]); cached per source."""
    path = find_caffe_proto(proto) or OWNED_PROTO
    if path not in _loaded:
        if path == OWNED_PROTO:
            data = _owned_descriptor_set()
        else:
            try:
                text = path.read_text(errors="replace")
            except OSError as e:
                raise PrototxtError(f"{path}: cannot read: {e.strerror or e}") from None
            if "UcudnnParameter" not in text:
                raise PrototxtError(f"{path} has no UcudnnParameter: apply caffe_patch/0002 "
                                    "first")
            data = _descriptor_set(path)
        _loaded[path] = _classes(data, path)
    return _loaded[path]


def read_text(path) -> str:
    """A prototxt's text; an error naming the file where it cannot be read or is not text."""
    return read_text_file(path, PrototxtError, "a prototxt (protobuf text format)")


def parse_net(pb2, text: str, source: str = "<prototxt>", *, lenient: bool = False):
    """A ``NetParameter`` from prototxt ``text`` (Note [Strict and lenient reading])."""
    from google.protobuf import text_format
    net = pb2.NetParameter()
    try:
        text_format.Parse(text, net, allow_unknown_extension=lenient, allow_unknown_field=lenient)
    except text_format.ParseError as e:
        msg = str(e)
        line, col = e.GetLine(), e.GetColumn()
        if line is not None:
            msg = msg.split(" : ", 1)[-1]
            where = f"{source}:{line}:{col}"
        else:
            where = source
        if "V1LayerParameter" in msg:
            msg += ("; V1 'layers' definitions are not supported: upgrade the net with Caffe's "
                    "upgrade_net_proto_text")
        elif "has no field named" in msg and pb2.source == OWNED_PROTO:
            msg += f" ({SUBSET_HINT})"
        raise PrototxtError(f"{where}: {msg}") from None
    return net


def read_net(pb2, path, *, lenient: bool = False):
    """The ``NetParameter`` of the prototxt at ``path``."""
    return parse_net(pb2, read_text(path), str(path), lenient=lenient)


def check_ucudnn_param(p, where: str) -> None:
    """Refuse a UcudnnParameter that Caffe's ucudnn layer would refuse (negative workspace,
    no repeats, a micro-batch size < 1); the error names ``where`` and the field."""
    for field, low in (("workspace_limit", 0), ("total_workspace", 0),
                       ("benchmark_repeats", 1)):
        v = getattr(p, field)
        if v < low:
            raise PrototxtError(f"{where}: field 'ucudnn_param.{field}' must be >= {low}, "
                                f"got {v}")
    bad = [b for b in p.micro_batch_size if b < 1]
    if bad:
        raise PrototxtError(f"{where}: field 'ucudnn_param.micro_batch_size' must be >= 1, "
                            f"got {bad[0]}")


def check_shared_is_net_wide(net, where: str) -> None:
    """Refuse ``optimizer: SHARED`` on a layer of a net that does not set it: the shared arena
    is one for the whole net (Note [Shared arena in Caffe], caffe_patch/0002), and Caffe
    stops on it too."""
    shared = net.ucudnn_param.Optimizer.Value("SHARED") if hasattr(
        net.ucudnn_param, "Optimizer") else None
    if shared is None or net.ucudnn_param.optimizer == shared:
        return
    for layer in net.layer:
        if layer.HasField("ucudnn_param") and layer.ucudnn_param.optimizer == shared:
            raise PrototxtError(f"{where}: layer {layer.name!r}: field "
                                "'ucudnn_param.optimizer' SHARED is net-wide (one arena that "
                                "every layer reuses): set it in the net's ucudnn_param")


def write_net(net, path) -> None:
    """Write ``net`` as prototxt (no comments, Note [Strict and lenient reading]) atomically:
    a temporary file, then a rename. Refuses an invalid ucudnn_param
    (:func:`check_ucudnn_param`)."""
    from google.protobuf import text_format
    path = os.fspath(path)
    if net.HasField("ucudnn_param"):
        check_ucudnn_param(net.ucudnn_param, f"{path}: net")
    for layer in net.layer:
        if layer.HasField("ucudnn_param"):
            check_ucudnn_param(layer.ucudnn_param, f"{path}: layer {layer.name!r}")
    check_shared_is_net_wide(net, path)
    write_text(path, text_format.MessageToString(net, as_utf8=True))


def _enum_value(enum, names, value, option):
    """The proto enum number for a CLI name; an error naming the option otherwise."""
    if value not in names:
        raise PrototxtError(f"{option}: unknown value {value!r} "
                            f"(expected one of {', '.join(names)})")
    return enum.Value(names[value])


def set_ucudnn_param(net, *, policy: Optional[str] = None, optimizer: Optional[str] = None,
                     limit: Optional[int] = None, budget: Optional[int] = None,
                     sizes: Optional[Iterable[int]] = None, math: Optional[str] = None,
                     repeats: Optional[int] = None, cache_path: Optional[str] = None,
                     layers: Optional[Iterable[str]] = None):
    """Set ``ucudnn_param`` on the net (the default of every layer) or on the named layers.

    Errors name the CLI option and the field (``--limit (workspace_limit): ...``)."""
    for option, field, v, low in (("--limit", "workspace_limit", limit, 0),
                                  ("--budget", "total_workspace", budget, 0),
                                  ("--repeats", "benchmark_repeats", repeats, 1)):
        if v is not None and v < low:
            raise PrototxtError(f"{option} ({field}): must be >= {low}, got {v}")
    if sizes is not None:
        sizes = list(sizes)
        if any(b < 1 for b in sizes):
            raise PrototxtError(f"--sizes (micro_batch_size): must be >= 1, got {sizes}")
    targets = [net.ucudnn_param]
    if layers is not None:
        names = list(layers)
        by_name = {l.name: l for l in net.layer}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise PrototxtError(f"--layers: no layer named {', '.join(missing)} in the net")
        targets = [by_name[n].ucudnn_param for n in names]
        if optimizer == "shared":
            raise PrototxtError("--optimizer shared: the shared arena is net-wide; set it "
                                "without --layers")
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


def merged_ucudnn_param(net, layer):
    """The UcudnnParameter Caffe's ``Net::Init`` gives ``layer`` (caffe_patch/0002): the net's
    as the default, the layer's own set fields win (its micro_batch_size replaces the net's);
    None where neither sets one."""
    if not net.HasField("ucudnn_param"):
        return layer.ucudnn_param if layer.HasField("ucudnn_param") else None
    merged = type(net.ucudnn_param)()
    merged.CopyFrom(net.ucudnn_param)
    if len(layer.ucudnn_param.micro_batch_size):
        merged.ClearField("micro_batch_size")
    merged.MergeFrom(layer.ucudnn_param)
    return merged
