"""A Caffe fork's ``caffe.proto`` (``--caffe-proto``) read as BVLC Caffe's, with ucudnn's fields.

:func:`add_ucudnn` adds ``UcudnnParameter`` and the fields that hold it to a fork's schema;
:func:`as_bvlc` reads a message of a fork's schema with BVLC's defaults for the fields the fork
lacks. Both take what BVLC Caffe (with caffe_patch/) declares from ucudnn's own schema, the
descriptor set shipped in the package (Note [Where the Caffe classes come from] in
:mod:`ucudnn.caffe.proto`): nothing of BVLC's is copied here by hand.

Note [Caffe forks]
    Forks branched from BVLC Caffe at some commit and added their own layers and fields
    (ENet's, TSN's, py-faster-rcnn's, SSD's, SegNet's); they lack what BVLC added later
    (``PoolingParameter.round_mode``, ``ConvolutionParameter.dilation`` and ``axis``,
    ``InputParameter``, ...) and what caffe_patch/ adds (``UcudnnParameter``). Caffe's C++
    reads a field it lacks as nothing at all: the fork's layer code simply does not know the
    feature, which is what BVLC's default means (ceil rounding, no dilation, axis 1).

    - Schema: :func:`add_ucudnn` edits the fork's ``FileDescriptorProto`` before its classes
      are made. ``UcudnnParameter`` is copied from the shipped descriptor, with its enums,
      and every field of type ``UcudnnParameter`` (or one of its enums) that the shipped
      schema has on a message the fork also has (``NetParameter.ucudnn_param``,
      ``LayerParameter.ucudnn_param`` and ``layout``) is added under its shipped name, with
      the shipped number where the fork leaves it free, else the next number above the
      fork's highest (outside protobuf's reserved 19000-19999). Numbers matter only to
      binary files, which ucudnn never writes; a prototxt names fields. A fork already
      patched with caffe_patch/0002 keeps its own declarations.
    - Values: shape inference reads a fork's net through :func:`as_bvlc`, a read-only view
      whose field reads are the fork's where the fork has the field and BVLC's default
      where it does not (a message field: BVLC's message, empty; a repeated one: empty;
      ``HasField``: False). A field the fork declares is read as the fork declares it,
      default included. The view is the one place where such defaults are read; ucudnn's
      own schema is BVLC's, so its messages are read as they are.
"""
from __future__ import annotations

__all__ = ["UCUDNN_MESSAGE", "BvlcView", "add_ucudnn", "as_bvlc", "declared", "is_repeated"]

#: the message caffe_patch/0002 adds to caffe.proto
UCUDNN_MESSAGE = "UcudnnParameter"
#: the package of BVLC's caffe.proto
_BVLC_PACKAGE = "caffe"
#: field numbers protobuf reserves for itself
_RESERVED = range(19000, 20000)


def _qualified(package: str, name: str) -> str:
    return f".{package}.{name}" if package else f".{name}"


def _free_number(message, wanted: int) -> int:
    """``wanted`` where ``message`` (a ``DescriptorProto``) leaves it free, else the first free
    number above its highest; a free number is in no field, reserved or extension range."""
    used = {f.number for f in message.field}
    ranges = [(r.start, r.end) for r in list(message.reserved_range)
              + list(message.extension_range)] + [(_RESERVED.start, _RESERVED.stop)]

    def taken_until(n: int) -> int:
        """The first number from ``n`` on that may be free (``n`` where ``n`` is free)."""
        return max([n + 1] * (n in used) + [end for start, end in ranges if start <= n < end]
                   + [n])

    if taken_until(wanted) == wanted:
        return wanted
    number = max(used | {0}) + 1
    while taken_until(number) != number:
        number = taken_until(number)
    return number


def add_ucudnn(fork_set, owned_set) -> None:
    """Add ``UcudnnParameter`` and the fields holding it to the fork's ``FileDescriptorSet``
    ``fork_set`` (in place) where the fork lacks them, as ``owned_set`` (ucudnn's shipped
    descriptor set) declares them (Note [Caffe forks])."""
    owned = next(f for f in owned_set.file
                 if any(m.name == UCUDNN_MESSAGE for m in f.message_type))
    target = next((f for f in fork_set.file
                   if any(m.name == "NetParameter" for m in f.message_type)), None)
    if target is None:
        return                  # not a Caffe schema: proto.py says so
    ours = _qualified(owned.package, UCUDNN_MESSAGE)
    theirs = _qualified(target.package, UCUDNN_MESSAGE)
    message = next((m for f in fork_set.file for m in f.message_type
                    if m.name == UCUDNN_MESSAGE), None)
    if message is None:
        message = target.message_type.add()
        message.CopyFrom(next(m for m in owned.message_type if m.name == UCUDNN_MESSAGE))
    # a fork patched with an older caffe_patch/ may lack an enum a field needs
    known = {ours} | {f"{ours}.{e.name}" for e in message.enum_type}
    fork_messages = {m.name: m for m in target.message_type}
    for declared_here in owned.message_type:
        mine = fork_messages.get(declared_here.name)
        if mine is None or declared_here.name == UCUDNN_MESSAGE:
            continue
        names = {f.name for f in mine.field}
        for field in declared_here.field:
            if field.type_name not in known or field.name in names:
                continue
            number = _free_number(mine, field.number)
            added = mine.field.add()
            added.CopyFrom(field)
            added.type_name = theirs + field.type_name[len(ours):]
            added.number = number
            names.add(field.name)


class BvlcView:
    """A message of a fork's schema, read-only, with BVLC's defaults for the fields the fork
    lacks (Note [Caffe forks]); sub-messages read through it are views too."""

    __slots__ = ("_msg", "_bvlc")

    def __init__(self, msg, bvlc_class):
        object.__setattr__(self, "_msg", msg)
        object.__setattr__(self, "_bvlc", bvlc_class)

    def __getattr__(self, name):
        msg, bvlc = self._msg, self._bvlc
        mine = msg.DESCRIPTOR.fields_by_name.get(name)
        if mine is not None:
            return _wrap(getattr(msg, name), mine, bvlc)
        theirs = None if bvlc is None else bvlc.DESCRIPTOR.fields_by_name.get(name)
        if theirs is not None:
            return _default(theirs)
        try:
            return getattr(msg, name)       # methods, nested enums and their values
        except AttributeError:
            if bvlc is None:
                raise
            return getattr(bvlc, name)      # an enum of BVLC's the fork lacks

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    def HasField(self, name: str) -> bool:  # noqa: N802 - protobuf's name
        if name in self._msg.DESCRIPTOR.fields_by_name:
            return self._msg.HasField(name)
        if self._bvlc is not None and name in self._bvlc.DESCRIPTOR.fields_by_name:
            return False
        return self._msg.HasField(name)     # protobuf's own error for a field nobody has

    def __repr__(self) -> str:
        return f"BvlcView({self._msg.DESCRIPTOR.full_name})"


def declared(msg, name: str):
    """The descriptor of field ``name`` of ``msg`` (a message or a :class:`BvlcView`): the
    fork's where it declares the field, else BVLC's; None where neither does."""
    if isinstance(msg, BvlcView):
        mine = msg._msg.DESCRIPTOR.fields_by_name.get(name)
        if mine is None and msg._bvlc is not None:
            return msg._bvlc.DESCRIPTOR.fields_by_name.get(name)
        return mine
    return msg.DESCRIPTOR.fields_by_name.get(name)


def is_repeated(field) -> bool:
    """Whether the field descriptor ``field`` is of a repeated field."""
    # is_repeated: protobuf >= 6.31, where label warns
    return (field.is_repeated if hasattr(field, "is_repeated")
            else field.label == field.LABEL_REPEATED)


def _sub_class(field, bvlc_class):
    """BVLC's class of message field ``field`` (of BVLC's message ``bvlc_class``), or None."""
    if bvlc_class is None:
        return None
    theirs = bvlc_class.DESCRIPTOR.fields_by_name.get(field.name)
    if theirs is None or theirs.message_type is None:
        return None
    if theirs.message_type.full_name != _bvlc_name(field.message_type, theirs.message_type):
        return None
    return _class_of(theirs.message_type)


def _bvlc_name(fork_desc, bvlc_desc) -> str:
    """The full name ``fork_desc`` would have in BVLC's package."""
    fork_pkg, bvlc_pkg = fork_desc.file.package, bvlc_desc.file.package
    name = fork_desc.full_name
    if fork_pkg and name.startswith(fork_pkg + "."):
        name = name[len(fork_pkg) + 1:]
    return f"{bvlc_pkg}.{name}" if bvlc_pkg else name


def _wrap(value, field, bvlc_class):
    if field.message_type is None:
        return value
    sub = _sub_class(field, bvlc_class)
    if is_repeated(field):
        return [BvlcView(v, sub) for v in value]
    return BvlcView(value, sub)


def _default(field):
    """BVLC's default of its field ``field``: an empty message, an empty list, or the value."""
    if is_repeated(field):
        return []
    if field.message_type is not None:
        return _class_of(field.message_type)()
    return field.default_value


def _class_of(desc):
    from google.protobuf import message_factory
    get = getattr(message_factory, "GetMessageClass", None)      # protobuf >= 4.22
    if get is None:
        return message_factory.MessageFactory(desc.file.pool).GetPrototype(desc)
    return get(desc)


def as_bvlc(msg, bvlc_pool):
    """``msg`` read as BVLC's (Note [Caffe forks]): ``msg`` itself where its schema is BVLC's
    (its descriptors are in ``bvlc_pool``, ucudnn's own), else a :class:`BvlcView` over
    BVLC's message of the same name (none: the fork's own message, read as it is)."""
    if isinstance(msg, BvlcView):
        return msg
    desc = msg.DESCRIPTOR
    if desc.file.pool is bvlc_pool:
        return msg
    pkg = desc.file.package
    name = desc.full_name[len(pkg) + 1:] if pkg else desc.full_name
    try:
        theirs = bvlc_pool.FindMessageTypeByName(_qualified(_BVLC_PACKAGE, name)[1:])
    except KeyError:
        return BvlcView(msg, None)
    return BvlcView(msg, _class_of(theirs))
