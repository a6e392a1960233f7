#!/usr/bin/env python3
"""Write ucudnn/caffe/caffe_net.proto: the schema of every net BVLC Caffe reads, from the
descriptors of Caffe's patched caffe.proto (Note [Where the Caffe classes come from] in
ucudnn/caffe/proto.py).

    scripts/build_caffe.sh --skip-build --prefix /tmp/caffe
    python scripts/gen_caffe_schema.py /tmp/caffe/src/src/caffe/proto/caffe.proto

Only what a NetParameter can hold is written: NetParameter and every message and enum its
fields reach (LayerParameter and all its *_param messages, BlobProto, V1LayerParameter,
V0LayerParameter, ...). What is carried over are the interface's facts -- message, field and
enum names, numbers, types, labels, defaults, options -- read from the compiled descriptors;
none of Caffe's text or comments. Messages come in alphabetical order after NetParameter,
fields by number. Run it again when caffe_patch/ changes caffe.proto;
tests/caffe/test_schema.py fails until then. ``--check`` only compares (exit status 1 where
the file would change).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "ucudnn" / "caffe" / "caffe_net.proto"
ROOT = "NetParameter"

HEADER = """\
// The schema of the Caffe nets ucudnn reads and writes: NetParameter and every message and
// enum it can hold, as BVLC Caffe at ucudnn.vocab.CAFFE_COMMIT with caffe_patch/ applied
// declares them (names, numbers, types, labels, defaults: Caffe's interface). Written by
// scripts/gen_caffe_schema.py from the descriptors of the patched caffe.proto -- regenerate
// it, do not edit it; tests/caffe/test_schema.py checks it against that file. Messages in
// alphabetical order after NetParameter, fields by number.
"""


def _load(proto: Path):
    sys.path.insert(0, str(REPO))
    from google.protobuf import descriptor_pb2
    from ucudnn.caffe.protoc import descriptor_set
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set(proto)).file
    caffe = [f for f in files if f.package == "caffe"]
    if len(caffe) != 1:
        sys.exit(f"{proto}: expected one file of package caffe, got {len(caffe)}")
    return caffe[0]


def reachable(fd):
    """The top-level messages and enums reachable from NetParameter (names without package)."""
    messages = {m.name: m for m in fd.message_type}
    enums = {e.name for e in fd.enum_type}
    seen, todo, used_enums = set(), [ROOT], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for f in messages[name].field:
            top = f.type_name.rsplit(".", 1)[-1] if f.type_name.count(".") == 2 else None
            if f.type == f.TYPE_MESSAGE and top in messages:
                todo.append(top)
            elif f.type == f.TYPE_ENUM and top in enums:
                used_enums.add(top)
    return seen, used_enums


_SCALAR = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
           7: "fixed32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32",
           16: "sfixed64", 17: "sint32", 18: "sint64"}
_LABEL = {1: "optional", 2: "required", 3: "repeated"}


def _default(f) -> str:
    """The default as .proto text: a string's is its raw text (escaped here), a bytes
    field's is C-escaped already, every other kind's is written as it is."""
    v = f.default_value
    if f.type == f.TYPE_STRING:
        return '"' + "".join(c if c.isprintable() and c not in '"\\' else
                             "\\%03o" % ord(c) for c in v) + '"'
    if f.type == f.TYPE_BYTES:
        return f'"{v}"'
    return v


def _field(f, package) -> str:
    if f.type in (f.TYPE_MESSAGE, f.TYPE_ENUM):
        kind = f.type_name[len(package) + 2:] if f.type_name.startswith(f".{package}.") \
            else f.type_name
    else:
        kind = _SCALAR[f.type]
    opts = []
    if f.HasField("default_value"):
        opts.append(f"default = {_default(f)}")
    if f.options.HasField("packed"):
        opts.append(f"packed = {'true' if f.options.packed else 'false'}")
    if f.options.HasField("deprecated"):
        opts.append(f"deprecated = {'true' if f.options.deprecated else 'false'}")
    rest = f.options.__class__()
    rest.CopyFrom(f.options)
    rest.ClearField("packed")
    rest.ClearField("deprecated")
    if rest.ListFields():
        sys.exit(f"field {f.name}: options this script does not write: {rest}")
    tail = f" [{', '.join(opts)}]" if opts else ""
    return f"{_LABEL[f.label]} {kind} {f.name} = {f.number}{tail};"


def _enum(e, indent: str) -> list:
    if e.HasField("options") or e.reserved_range or e.reserved_name:
        sys.exit(f"enum {e.name}: options or reserved values this script does not write")
    return ([f"{indent}enum {e.name} {{"]
            + [f"{indent}  {v.name} = {v.number};" for v in e.value] + [f"{indent}}}"])


def _message(m, package, indent="") -> list:
    for what in ("oneof_decl", "extension", "extension_range", "reserved_range",
                 "reserved_name"):
        if getattr(m, what):
            sys.exit(f"message {m.name}: {what} is not written by this script")
    if m.HasField("options"):
        sys.exit(f"message {m.name}: options are not written by this script")
    out = [f"{indent}message {m.name} {{"]
    for e in m.enum_type:
        out += _enum(e, indent + "  ")
    for n in m.nested_type:
        out += _message(n, package, indent + "  ")
    out += [f"{indent}  {_field(f, package)}" for f in sorted(m.field, key=lambda f: f.number)]
    return out + [f"{indent}}}"]


def render(fd) -> str:
    messages, enums = reachable(fd)
    lines = [HEADER, 'syntax = "proto2";', "", f"package {fd.package};", ""]
    for e in fd.enum_type:
        if e.name in enums:
            lines += _enum(e, "") + [""]
    by_name = {m.name: m for m in fd.message_type}
    for name in [ROOT] + sorted(messages - {ROOT}):
        lines += _message(by_name[name], fd.package) + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("caffe_proto", type=Path, help="the patched src/caffe/proto/caffe.proto")
    ap.add_argument("-o", "--output", type=Path, default=OUT, help=f"default: {OUT}")
    ap.add_argument("--check", action="store_true", help="only compare with --output")
    args = ap.parse_args(argv)
    fd = _load(args.caffe_proto)
    if "UcudnnParameter" not in {m.name for m in fd.message_type}:
        sys.exit(f"{args.caffe_proto}: no UcudnnParameter: apply caffe_patch/ first")
    text = render(fd)
    if args.check:
        same = args.output.is_file() and args.output.read_text() == text
        print(f"{args.output}: {'up to date' if same else 'differs'}")
        return 0 if same else 1
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
