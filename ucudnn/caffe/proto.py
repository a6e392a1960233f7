"""Caffe's net messages and the prototxt text format, through protobuf only.

:func:`load_caffe_pb2` gives Caffe's message classes (``NetParameter``, ``LayerParameter``,
``UcudnnParameter``, ...); :func:`parse_net` / :func:`read_net` read a prototxt with
``google.protobuf.text_format`` (the one reader of nets: ``ucudnn prototxt``, ``ucudnn plan
--prototxt`` and the experiments) and :func:`write_net` writes one. Variants are made by setting
message fields (:func:`ucudnn.caffe.params.set_param`), never by editing text; shape inference
over the parsed messages is :mod:`ucudnn.caffe.shapes`.

Note [Where the Caffe classes come from]
    By default from ``caffe_net.proto`` beside this module: the schema of every net BVLC
    Caffe reads -- NetParameter and every message and enum it can hold (LayerParameter with
    all its ``*_param`` messages, TransformationParameter, the data layers' parameters,
    BlobProto for weights, V1LayerParameter, V0LayerParameter), with the names, numbers,
    types, labels, defaults and enums of caffe.proto at ``ucudnn.vocab.CAFFE_COMMIT`` with
    caffe_patch/ applied. ``scripts/gen_caffe_schema.py`` writes it from the descriptors of
    that patched file: it is the project's own file, none of Caffe's text or comments, and it
    is regenerated when caffe_patch/ changes caffe.proto (tests/caffe/test_schema.py compares
    every message reachable from NetParameter, field by field, both ways, and fails until
    then). It is written once rather than compiled from the fetched caffe.proto at build time
    because ``pip install`` must work where there is no Caffe download (air-gapped nodes, a
    user's laptop), where such a build would need a written fallback -- this file -- anyway.
    ``setup.py`` (``build_py``) compiles it into ``caffe_net.desc``, a serialized
    ``FileDescriptorSet`` shipped in the wheel (a build output: not in git); at run time the
    descriptors go into a private ``DescriptorPool`` and ``message_factory`` makes the
    classes. So run time needs neither protoc nor generated ``_pb2.py`` code, and a
    descriptor set has no gencode/runtime version rule (protobuf >= 5.26 refuses ``_pb2.py``
    newer than its runtime): any protobuf >= 3.20 reads it, whichever protoc wrote it. The
    build needs a protobuf compiler: ``$PROTOC``, ``protoc`` on ``PATH`` (Ubuntu's 3.21 on the
    air-gapped node, ``--no-build-isolation``), or grpcio-tools (a build requirement, so an
    isolated ``pip install`` on a machine without protoc gets one). Beside the ``.desc`` the
    build writes ``caffe_net.desc.sha256``, the SHA-256 of the ``.proto`` it compiled. The
    ``.desc`` is used whenever that digest matches the ``.proto``'s content -- never by
    modification times, which an installed wheel does not keep in order -- so a user's
    ``protoc`` (of whatever version is first on ``PATH``) is never run for ucudnn's own
    schema. Where the ``.desc`` is missing (a source tree never built) or its digest names
    another ``.proto`` (one edited since the build), the ``.proto`` is compiled on the fly
    when a compiler is there.

    Another caffe.proto is used instead when it is named: the ``proto`` argument
    (``--caffe-proto``) or ``$UCUDNN_CAFFE_PROTO`` -- a Caffe fork's file. It is compiled at
    run time by grpcio-tools' protoc (``pip install 'ucudnn[caffe-proto]'``; ``$PROTOC``
    names another), never by whichever protoc is first on ``PATH``, so that a fork's net
    reads alike on every machine with the package; without a compiler the error says how to
    install one. It is compiled rather than read by a parser of ucudnn's own: protoc resolves
    the names, nested types, options and defaults of the ``.proto`` language, and a reader
    that got one default wrong would give wrong shapes without a word. The compiled schema
    gets ``UcudnnParameter`` where the fork lacks it, and shape inference reads the fork's
    messages with BVLC's defaults for the fields it lacks (Note [Caffe forks] in
    :mod:`ucudnn.caffe.fork`). A build tree is not picked up on its own, so that results do
    not depend on what happens to be built.

Note [Strict reading]
    :func:`parse_net` is the one reader of nets: ``ucudnn prototxt`` and shape inference
    (:mod:`ucudnn.caffe.prototxt`) both go through it. It accepts what
    Caffe's ``ReadProtoFromTextFile`` accepts and refuses the rest: an unknown or misspelled
    field (``strid: 4``), a fork's field (``ceil_mode``), a value of the wrong type or out
    of range, a singular field given twice, a missing required field, and the few inputs on
    which protobuf's Python parser is laxer than Caffe's C++ one (Note [Where the parsers
    part] in :mod:`ucudnn.caffe.textscan`). A skipped field would be lost from a written
    variant, or read as its default by shape inference. An error reads like Caffe's with
    caffe_patch/0002, ``FILE:LINE:COL: layer 'NAME': message`` (the layer: the top-level
    ``layer { }`` block the position is in, :func:`enclosing_layer`), and quotes at most
    :data:`EXCERPT` characters of the input, cut around a "..." (a 50 MB line included);
    nesting deeper than protobuf's recursive parser follows (a RecursionError) is an error
    naming the line where the text gets that deep. No input ends in a traceback.
    :func:`ucudnn.caffe.params.check_params` names a ucudnn_param value that Caffe's ucudnn
    layer refuses at its line of the input. Written files carry no comments (text_format drops them) and list
    each message's fields by number.

Note [Unknown layer types]
    Caffe's ``Net::Init`` creates every layer of its phase through the layer registry, which
    stops at a type no layer registers ("Unknown layer type: Axpy (known types: ...)"): a
    fork's layer (SENet's Axpy, SSD's PriorBox) in a net read with BVLC's schema.
    :func:`check_layer_types` refuses such a net with Caffe's words (the list of known types
    left out: one line stays short), the file, the line and the layer, in either phase (a net
    is refused as a whole, as its other phase would be). It is a check of Net::Init, not of
    the reader: Caffe's parser takes any type name, and so does parse_net. With a fork's caffe.proto
    (``--caffe-proto``) the fork's registry is not known: its types are taken, and their
    tops' shapes are unknown (Note [Shapes the prototxt does not settle] in
    :mod:`ucudnn.caffe.shapes`). ``ucudnn plan --layer-shape TYPE=same[:K]`` names a type
    whose tops have the shape of its bottom K (0: the first), so that a net with it is
    planned with BVLC's schema.

Note [Old net formats]
    Caffe upgrades V1 nets (``layers { type: CONVOLUTION ... }``) and V0 nets (``layers {
    layer { ... } }``) when it reads them (upgrade_proto.cpp). parse_net upgrades V1 nets the
    same way (Note [Upgrading V1 nets] in :mod:`ucudnn.caffe.upgrade`) and says so on stderr;
    a variant written of one (``ucudnn prototxt``) is the upgraded net. V0 nets are refused,
    naming the file, the line of the first ``layers`` block and its layer, with the advice to
    run Caffe's ``upgrade_net_proto_text`` once: V0's upgrade (padding layers folded into
    convolutions, per-type V0 fields) is a larger copy of Caffe's rules, for nets older than
    any public model in use. The schema declares both messages, so such a net is refused by
    name, not as a field error.
"""
from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Callable, Optional

from ..plan.table import read_text as read_text_file, write_text
from ..vocab import InputError
from .protoc import (DIGEST_SUFFIX, ProtocError, descriptor_set, digest_text, find_protoc,
                     grpc_protoc)
from .textscan import (EXCERPT, cut, enclosing_layer, field_path, lexical_problems, line_col,
                       offset, position, tokens)
from .fork import add_ucudnn, as_bvlc as fork_view
from .upgrade import upgrade_v1

__all__ = ["PrototxtError", "OWNED_PROTO", "LAYER_TYPES", "INSTALL_COMPILER", "find_caffe_proto",
           "load_caffe_pb2", "owned_pb2", "as_bvlc", "read_text", "parse_net",
           "check_layer_types", "read_net", "locate", "write_net", "EXCERPT"]

_HERE = Path(__file__).resolve().parent
#: ucudnn's schema of Caffe's nets (Note [Where the Caffe classes come from])
OWNED_PROTO = _HERE / "caffe_net.proto"
#: its FileDescriptorSet, written by setup.py
OWNED_DESCRIPTOR = _HERE / "caffe_net.desc"

#: what an unknown field's error adds where the classes are ucudnn's own
_UNKNOWN_FIELD_HINT = ("BVLC Caffe has no such field either; for a fork's field, name that "
                       "fork's caffe.proto with --caffe-proto PATH or $UCUDNN_CAFFE_PROTO")
#: the layer types the patched Caffe registers (REGISTER_LAYER_CLASS / _CREATOR at
#: ucudnn.vocab.CAFFE_COMMIT with caffe_patch/ applied): Note [Unknown layer types]
LAYER_TYPES = (
    "AbsVal", "Accuracy", "ArgMax", "BNLL", "BatchNorm", "BatchReindex", "Bias", "Clip",
    "Concat", "ContrastiveLoss", "Convolution", "Crop", "Data", "Deconvolution", "Dropout",
    "DummyData", "ELU", "Eltwise", "Embed", "EuclideanLoss", "Exp", "Filter", "Flatten",
    "HDF5Data", "HDF5Output", "HingeLoss", "Im2col", "ImageData", "InfogainLoss",
    "InnerProduct", "Input", "LRN", "LSTM", "LSTMUnit", "LayoutConversion", "Log", "MVN",
    "MemoryData", "MultinomialLogisticLoss", "PReLU", "Parameter", "Pooling", "Power",
    "Python", "RNN", "ReLU", "Reduction", "Reshape", "SPP", "Scale", "Sigmoid",
    "SigmoidCrossEntropyLoss", "Silence", "Slice", "Softmax", "SoftmaxWithLoss", "Split",
    "Swish", "TanH", "Threshold", "Tile", "WindowData")
#: how to install the compiler of a fork's caffe.proto
INSTALL_COMPILER = "pip install 'ucudnn[caffe-proto]'"
_UPGRADE = "upgrade the net with Caffe's upgrade_net_proto_text (tools/upgrade_net_proto_text)"


class PrototxtError(InputError):
    """A prototxt or caffe.proto that cannot be read, compiled or used; the message names the
    file (line:column for text-format errors), the layer and the field."""



def _named_proto(proto: Optional[str]):
    """(how it is named, the path) of the caffe.proto named by ``proto`` or
    ``$UCUDNN_CAFFE_PROTO``; None: ucudnn's own."""
    for name, c in (("--caffe-proto", proto), ("UCUDNN_CAFFE_PROTO",
                                                os.environ.get("UCUDNN_CAFFE_PROTO"))):
        if c:
            if not Path(c).is_file():
                raise PrototxtError(f"{name}: {c}: no such file")
            return name, Path(c).resolve()
    return None


def find_caffe_proto(proto: Optional[str] = None) -> Optional[Path]:
    """Caffe's caffe.proto named by ``proto`` or ``$UCUDNN_CAFFE_PROTO``; None: ucudnn's own."""
    named = _named_proto(proto)
    return None if named is None else named[1]


def _descriptor_set(proto: Path, cmd=None) -> bytes:
    try:
        return descriptor_set(proto, cmd)
    except ProtocError as e:
        raise PrototxtError(f"{proto}: {e}") from None


def _fork_descriptor_set(option: str, proto: Path) -> bytes:
    """A fork's caffe.proto (named by ``option``) compiled by ``$PROTOC`` where it is set,
    else by grpcio-tools' protoc (Note [Where the Caffe classes come from])."""
    cmd = [os.environ["PROTOC"]] if os.environ.get("PROTOC") else grpc_protoc()
    if cmd is None:
        raise PrototxtError(f"{option}: {proto}: reading a fork's caffe.proto needs the "
                            f"protobuf compiler of grpcio-tools: {INSTALL_COMPILER} (or name "
                            "a protoc in $PROTOC)")
    try:
        return descriptor_set(proto, cmd)
    except ProtocError as e:
        said = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
        raise PrototxtError(f"{option}: {proto}: {cut(said, 4 * EXCERPT)}") from None


def _owned_descriptor_set() -> bytes:
    """The shipped descriptor set where it is there and was compiled from this
    ``caffe_net.proto`` (its digest file matches the ``.proto``'s content, or there is no
    digest file to say otherwise); else the ``.proto`` compiled now, where a compiler is there
    (a source tree whose ``.proto`` was edited since the build). Never decided by mtimes: an
    installed wheel's files may carry any times."""
    have = OWNED_DESCRIPTOR.is_file()
    if have and _owned_digest_matches():
        return OWNED_DESCRIPTOR.read_bytes()
    if have and not find_protoc():
        return OWNED_DESCRIPTOR.read_bytes()
    if not have and not find_protoc():
        raise PrototxtError(f"{OWNED_DESCRIPTOR} is missing (setup.py builds it): reinstall "
                            "ucudnn (pip install .), or install protoc")
    return _descriptor_set(OWNED_PROTO)


def _owned_digest_matches() -> bool:
    """Whether the shipped descriptor was compiled from ``OWNED_PROTO`` as it is now: its
    digest file (:data:`ucudnn.caffe.protoc.DIGEST_SUFFIX`) names the ``.proto``'s content;
    True where there is no digest file (a build without one: the descriptor is all there
    is to go by)."""
    recorded = OWNED_DESCRIPTOR.with_name(OWNED_DESCRIPTOR.name + DIGEST_SUFFIX)
    try:
        want = recorded.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return True
    except (OSError, UnicodeDecodeError):
        return False
    try:
        return want == digest_text(OWNED_PROTO)
    except OSError:
        return False


def _classes(files, source: Path):
    """The message classes and enum values of the file descriptors ``files``."""
    from google.protobuf import descriptor_pool, message_factory
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
    if not hasattr(ns, "NetParameter") or "layer" not in ns.NetParameter.DESCRIPTOR.fields_by_name:
        raise PrototxtError(f"{source} has no NetParameter.layer: not a Caffe caffe.proto")
    return ns


def _file_set(data: bytes, source: Path):
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError
    try:
        return descriptor_pb2.FileDescriptorSet.FromString(data)
    except DecodeError as e:
        raise PrototxtError(f"{source}: not a protobuf descriptor set: {e}") from None


_loaded = {}


def _owned_set():
    return _file_set(_owned_descriptor_set(), OWNED_DESCRIPTOR)


def owned_pb2():
    """The message classes of ucudnn's own schema, BVLC Caffe's with caffe_patch/, whatever
    ``$UCUDNN_CAFFE_PROTO`` names."""
    if OWNED_PROTO not in _loaded:
        _loaded[OWNED_PROTO] = _classes(_owned_set().file, OWNED_PROTO)
    return _loaded[OWNED_PROTO]


def load_caffe_pb2(proto: Optional[str] = None):
    """Caffe's message classes as attributes of one namespace (``pb2.NetParameter()``, ...),
    from the caffe.proto named by ``proto`` or ``$UCUDNN_CAFFE_PROTO`` (a fork's, with
    UcudnnParameter added where it lacks it: Note [Caffe forks] in :mod:`ucudnn.caffe.fork`),
    else from ucudnn's own schema (Note [Where the Caffe classes come from]); cached per
    source."""
    named = _named_proto(proto)
    if named is None or named[1] == OWNED_PROTO:
        return owned_pb2()
    option, path = named
    if path not in _loaded:
        fork = _file_set(_fork_descriptor_set(option, path), path)
        add_ucudnn(fork, _owned_set())
        _loaded[path] = _classes(fork.file, path)
    return _loaded[path]


def as_bvlc(msg):
    """A message of a net read as BVLC Caffe's: itself where its schema is ucudnn's own, else
    a view with BVLC's defaults for the fields its fork lacks (Note [Caffe forks] in
    :mod:`ucudnn.caffe.fork`)."""
    return fork_view(msg, owned_pb2().pool)


def read_text(path) -> str:
    """A prototxt's text; an error naming the file where it cannot be read or is not text."""
    return read_text_file(path, PrototxtError, "a prototxt (protobuf text format)")


def locate(text: str, source: str, at: Optional[int], layer: Optional[str] = None) -> str:
    """``source:line:col: layer 'NAME'`` for offset ``at`` of ``text`` (None: the file)."""
    if at is None:
        where = source
    else:
        line, col = line_col(text, at)
        where = f"{source}:{line}:{col}"
        if layer is None:
            layer = enclosing_layer(text, line, col)
    return where + ("" if layer is None else f": layer {cut(layer, EXCERPT // 2)!r}")


# -- reading ----------------------------------------------------------------------------------

def _note(msg: str) -> None:
    print(f"ucudnn: note: {msg}", file=sys.stderr)


def parse_net(pb2, text: str, source: str = "<prototxt>",
              note: Optional[Callable[[str], None]] = None):
    """The ``NetParameter`` of prototxt ``text``, read as strictly as Caffe reads it; errors
    name ``source``:line:col, the layer and the field (Note [Strict reading], Note [Old net
    formats]). A V1 net is upgraded (Note [Upgrading V1 nets] in
    :mod:`ucudnn.caffe.upgrade`), which ``note`` (default: a line on stderr) says."""
    from google.protobuf import text_format
    net = pb2.NetParameter()
    parsed, problems = lexical_problems(net.DESCRIPTOR, text)
    try:
        text_format.Parse(parsed, net)
    except text_format.ParseError as e:
        if not problems or e.GetLine() is None or offset(
                text, e.GetLine(), e.GetColumn() or 1) < problems[0][0]:
            raise _parse_error(pb2, text, parsed, source, e) from None
    except RecursionError:
        raise _too_deep(text, source) from None
    if problems:
        raise PrototxtError(f"{locate(text, source, problems[0][0])}: {problems[0][1]}")
    if not net.IsInitialized():
        missing = net.FindInitializationErrors()[0]
        steps = field_path(missing)
        where = locate(text, source, position(text, steps[:-1]))
        raise PrototxtError(f"{where}: required field {cut(missing)!r} is missing")
    if "layers" in net.DESCRIPTOR.fields_by_name and len(net.layers):
        v0 = any(l.HasField("layer") for l in net.layers)
        if v0:
            first = net.layers[0].layer.name
            where = locate(text, source, position(text, [("layers", 0)]), first or None)
            raise PrototxtError(f"{where}: V0 layer definitions ('layers {{ layer {{ ... }} }}') "
                                f"are not supported (Caffe's old net format): {_UPGRADE}")
        try:
            n = upgrade_v1(net, source)
        except ValueError as e:
            raise PrototxtError(str(e)) from None
        (note or _note)(f"{source}: {n} V1 'layers' definitions upgraded to 'layer' as Caffe "
                        "upgrades them when it reads the net (UpgradeV1Net)")
    return net


def check_layer_types(net, text: str, source: str, layer_types=()) -> None:
    """Caffe's ``LayerRegistry::CreateLayer``: a layer of a type nobody registers stops
    ``Net::Init``, in whichever phase (Note [Unknown layer types]). Only for nets read with
    ucudnn's own schema; ``layer_types``: a fork's types given a shape rule."""
    if getattr(_loaded.get(OWNED_PROTO), "NetParameter", None) is not type(net):
        return                          # a fork's schema: its registry is not known
    known = set(LAYER_TYPES) | set(layer_types)
    for i, layer in enumerate(net.layer):
        if layer.HasField("type") and layer.type not in known:
            where = locate(text, source, position(text, [("layer", i)]),
                           layer.name if layer.HasField("name") else f"#{i + 1}")
            ltype = cut(layer.type, EXCERPT // 4)
            raise PrototxtError(
                f"{where}: Unknown layer type: {ltype} (not one of the {len(LAYER_TYPES)} "
                f"types BVLC Caffe registers); for a fork's layer, name the fork's caffe.proto "
                f"(--caffe-proto), or plan with --layer-shape {ltype}=same[:K] where its tops "
                "have the shape of its bottom K")


def _parse_error(pb2, text: str, parsed: str, source: str, e) -> PrototxtError:
    """The error for protobuf's ParseError ``e`` on ``parsed`` (``text`` as the parser got
    it: :func:`~ucudnn.caffe.textscan.lexical_problems`)."""
    msg, line, col = str(e), e.GetLine(), e.GetColumn()
    if line is None:
        return PrototxtError(f"{source}: {cut(msg)}")
    msg = msg.split(" : ", 1)[-1]
    # newer protobufs quote the whole current line first ("'LINE': what"): the position says
    # where, and a line may be megabytes long
    lines = parsed.split("\n", line + 1)[max(line - 2, 0):line + 1]
    for quoted in sorted({f"'{t}': " for t in lines + [""]}, key=len, reverse=True):
        if msg.startswith(quoted):
            msg = msg[len(quoted):]
            break
    where = locate(text, source, offset(text, line, col or 1))
    if "has no field named" in msg and pb2.source == OWNED_PROTO:
        return PrototxtError(f"{where}: {cut(msg)} ({_UNKNOWN_FIELD_HINT})")
    return PrototxtError(f"{where}: {cut(msg)}")


def _too_deep(text: str, source: str) -> PrototxtError:
    depth, at = 0, None
    for d, kind, _, where in tokens(text):
        if kind == "open" and d + 1 > depth:
            depth, at = d + 1, where
    return PrototxtError(f"{locate(text, source, at)}: messages nested {depth} deep, more "
                         "than protobuf's text parser follows")


def read_net(pb2, path):
    """The ``NetParameter`` of the prototxt at ``path`` (:func:`parse_net`)."""
    return parse_net(pb2, read_text(path), str(path))


# -- writing ----------------------------------------------------------------------------------

def write_net(net, path, *, replace: bool = True) -> None:
    """Write ``net`` as prototxt (no comments, Note [Strict reading]) atomically: a temporary
    file, then a rename (``ucudnn.files.write_text``; ``replace=False``: an existing
    ``path`` is an error, never overwritten)."""
    from google.protobuf import text_format
    path = os.fspath(path)
    try:
        write_text(path, text_format.MessageToString(net, as_utf8=True), replace=replace)
    except FileExistsError:
        raise PrototxtError(f"{path}: exists; not overwritten") from None
