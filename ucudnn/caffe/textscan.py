"""Where things are in a prototxt's text, and what protobuf's Python parser reads otherwise
than Caffe's C++ one: the lexical layer under :func:`ucudnn.caffe.proto.parse_net`.

protobuf's ``text_format`` parses; this module only scans tokens to name positions (the
enclosing layer, a field's line) and to find the few inputs on which the two parsers part
(Note [Where the parsers part]).

Note [Where the parsers part]
    Caffe reads nets with the C++ ``TextFormat::Parser``; ucudnn with protobuf's Python
    ``text_format``. Run side by side on mutated nets (tests/caffe/test_fuzz.py), the two
    part on a few inputs that Python reads and Caffe refuses -- an escape Caffe does not
    know in a string literal (``\\q``; Python warns and keeps it), a ``+`` before a number,
    a ``-`` before an unsigned field's value (``-0``), a control or non-ASCII character
    outside string literals and comments (Python takes Unicode white space for white
    space), a NUL --, on ``\\?``, which Caffe reads as ``?`` and Python as both characters,
    and on ``- 1`` (a sign apart from its number), which Caffe reads and Python refuses.
    :func:`lexical_problems` finds the first kinds and ``\\?`` (refused, with the hint to
    write ``?``) before the parse, and hands the parser a
    copy of the text with each of them blanked and each ``- 1`` joined into `` -1``: the same
    length and lines, so that the parser's positions hold for the text and an error it
    finds before the first problem is reported first, as Caffe would. What stays apart:
    string literals that are not UTF-8 (``"\\xff"``: Caffe's proto2 strings hold any bytes,
    protobuf's Python strings are text) are refused, and where both refuse, ucudnn names
    the offending token, Caffe the one after it (on the same line or a later one).
"""
from __future__ import annotations

import re
from typing import Iterator, List, Optional, Sequence, Tuple

__all__ = ["EXCERPT", "tokens", "offset", "line_col", "cut", "enclosing_layer", "position",
           "layer_lines", "field_path", "lexical_problems"]

#: the most characters of the input (a token, a layer name) an error message quotes
EXCERPT = 120

_STRING = r""""[^"\\\n]*(?:\\.[^"\\\n]*)*"?|'[^'\\\n]*(?:\\.[^'\\\n]*)*'?"""
# protobuf's own token classes (text_format.Tokenizer): identifiers may hold + and -,
# numbers start with a digit, a sign or a dot
_TOKEN = re.compile(_STRING + r"""|#[^\n]*|[{<]|[}>]|[A-Za-z_][\w+-]*"""
                    r"""|(?:[0-9+-]|\.[0-9])[\w.+-]*|\S""")


def tokens(text: str) -> Iterator[Tuple[int, str, str, int]]:
    """``(depth, kind, value, offset)`` for the text format's tokens: ``open`` (value: the
    field name before it), ``close``, ``key`` (a field name), ``string`` (the text between
    the quotes), ``number``; comments, enum names and punctuation are skipped. Only as exact
    as naming positions needs; protobuf parses."""
    depth, key, value_next = 0, "", False
    for m in _TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        if c == "#":
            continue
        if c in "{<":
            yield depth, "open", key, m.start()
            depth += 1
            value_next = False
        elif c in "}>":
            depth = max(depth - 1, 0)
            yield depth, "close", "", m.start()
            value_next = False
        elif c in "\"'":
            yield depth, "string", tok[1:-1] if len(tok) > 1 and tok[-1] == c else tok[1:], \
                m.start()
            value_next = False
        elif c.isalpha() or c == "_":
            if value_next:
                value_next = False
            else:
                key = tok
                yield depth, "key", tok, m.start()
        elif c.isdigit() or c in "+-" or c == "." and len(tok) > 1:
            yield depth, "number", tok, m.start()
            value_next = tok in "+-"        # a sign alone: its number follows
        else:
            value_next = c in ":[,"


def offset(text: str, line: int, col: int) -> int:
    """The offset of 1-based ``line``:``col`` (protobuf's positions: lines split at \\n)."""
    pos = 0
    for _ in range(line - 1):
        nl = text.find("\n", pos)
        if nl < 0:
            break
        pos = nl + 1
    return min(pos + max(col - 1, 0), len(text))


def line_col(text: str, at: int) -> Tuple[int, int]:
    """The 1-based line and column of offset ``at``."""
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


def cut(text: str, limit: int = EXCERPT) -> str:
    """``text`` with control characters escaped, or its first and last characters around a
    "..." where that is longer than ``limit``."""
    for _ in range(2):      # cut, escape (which may lengthen it), cut again
        if len(text) > limit:
            tail = limit // 3
            text = text[:limit - tail - 3] + "..." + text[-tail:]
        if not text.isprintable():
            text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text


def enclosing_layer(text: str, line: int, col: int = 1) -> Optional[str]:
    """The ``name`` of the top-level ``layer { }`` (or V1 ``layers { }``) block that the
    1-based position is in, as Caffe's io.cpp names it (caffe_patch/0002); None outside any,
    or where that layer has no name."""
    at = offset(text, line, col)
    inside, name, pending = False, None, False
    for depth, kind, value, where in tokens(text):
        if where >= at and (not inside or name is not None):
            break
        if depth == 0 and kind in ("open", "close"):
            if where >= at:
                break
            inside, name = kind == "open" and value in ("layer", "layers"), None
        elif pending and kind == "string" and name is None:
            name = value
        pending = inside and depth == 1 and kind == "key" and value == "name"
    return name if inside else None


def position(text: str, steps: Sequence[Tuple[str, Optional[int]]]) -> Optional[int]:
    """The offset of the field at ``steps`` -- ``(field name, index among the blocks of that
    name, or of the last step's values given one by one; None: the first)`` from the top
    level down -- or of the deepest block found on the way; None where not even the first is
    in the text."""
    want, seen, found, key_at, keys = 0, 0, None, None, []
    for depth, kind, value, where in tokens(text):
        if depth < want:
            break
        if depth != want or kind not in ("key", "open") or value != steps[want][0]:
            continue
        index, last = steps[want][1], want == len(steps) - 1
        if kind == "key":
            if last and (index is None or len(keys) == index):
                return where
            key_at = where
            keys.append(where)
            continue
        if index is not None and seen != index:
            seen += 1
        elif last:
            return key_at if key_at is not None else where
        else:
            want, seen, keys = want + 1, 0, []
            found = key_at if key_at is not None else where
    return keys[0] if keys else found


def layer_lines(text: str, count: int) -> Optional[List[int]]:
    """The line of each top-level ``layer`` block of ``text`` (of ``layers`` blocks for a V1
    net), where there are ``count`` of them; else None."""
    keys: dict = {"layer": [], "layers": []}
    key_at = None
    for depth, kind, value, where in tokens(text):
        if depth != 0:
            continue
        if kind == "key":
            key_at = where
        elif kind == "open" and value in keys:
            keys[value].append(key_at if key_at is not None else where)
    for name in ("layer", "layers"):
        if len(keys[name]) == count:
            lines, line, last = [], 1, 0
            for at in keys[name]:           # in order: count the newlines once
                line += text.count("\n", last, at)
                lines.append(line)
                last = at
            return lines
    return None


def field_path(path: str) -> List[Tuple[str, Optional[int]]]:
    """``layer[3].clip_param.max`` (protobuf's field paths) as :func:`position` steps."""
    out = []
    for part in path.split("."):
        m = re.fullmatch(r"(\w+)\[(\d+)\]", part)
        out.append((m.group(1), int(m.group(2))) if m else (part, None))
    return out


# -- where the parsers part (Note [Where the parsers part]) ------------------------------------

#: the escapes of a string literal that Caffe's tokenizer accepts, \? aside
_ESCAPE = re.compile(r"""\\(?:[abfnrtv\\'"]|[0-7]|x[0-9A-Fa-f]|u[0-9A-Fa-f]{4}"""
                     r"""|U00[01][0-9A-Fa-f]{5})""")
_STRING_OR_COMMENT = re.compile(_STRING + r"|#[^\n]*")
_SIGN = re.compile(r"(?<![\w.+-])[+-]")
_UNSIGNED = {4, 6, 7, 13}       # FieldDescriptor.TYPE_UINT64, FIXED64, FIXED32, UINT32


def _escapes(text: str) -> List[Tuple[int, str]]:
    out = []
    for m in _STRING_OR_COMMENT.finditer(text):
        lit = m.group()
        i = lit.find("\\") if lit[0] != "#" else -1
        while i >= 0:
            e = _ESCAPE.match(lit, i)
            if e is None:
                out.append((m.start() + i, (
                    "the escape \\? (Caffe reads it as ?, protobuf's Python parser does not): "
                    "write ?") if lit.startswith("\\?", i) else
                    f"invalid escape sequence {cut(lit[i:i + 2])!r} in a string literal"))
                i += 2
            else:
                i = e.end()
            i = lit.find("\\", i) if i < len(lit) else -1
    return out


#: what Caffe's tokenizer takes outside string literals and comments: printable ASCII and
#: its six white-space characters (protobuf's Python one also takes Unicode white space)
_ODD = re.compile(r"[^\x20-\x7e\t\n\r\v\f]")


def _characters(text: str) -> List[Tuple[int, str]]:
    out, pos = [], 0
    for m in list(_STRING_OR_COMMENT.finditer(text)) + [None]:
        end = len(text) if m is None else m.start()
        odd = _ODD.search(text, pos, end)
        if odd:
            out.append((odd.start(), f"the character {ascii(odd.group())[1:-1]} outside a "
                                     "string literal (Caffe's parser refuses it)"))
        if m is not None:
            if "\0" in m.group():
                out.append((m.start() + m.group().index("\0"), "a NUL character in a "
                            + ("comment" if m.group()[0] == "#" else "string literal")))
            pos = m.end()
    return out


def _field_type(root, path: Sequence[str], key: str) -> Optional[int]:
    """The type of field ``key`` in the message at ``path`` below the descriptor ``root``."""
    desc = root
    for name in path:
        f = desc.fields_by_name.get(name)
        if f is None or f.message_type is None:
            return None
        desc = f.message_type
    f = desc.fields_by_name.get(key)
    return None if f is None else f.type


_SPACE = re.compile(r"\s*")


def _signs(root, text: str, chars: List[str]) -> List[Tuple[int, str]]:
    out, path, keys = [], [], {}
    for depth, kind, value, at in tokens(text):
        if kind == "open":
            path[depth:] = [value]
        elif kind == "key":
            keys[depth] = value
        elif kind == "number" and value[0] in "+-":
            key = keys.get(depth, "")
            if value[0] == "+":
                out.append((at, f"field {cut(key)!r}: a + sign before a number (Caffe reads "
                                "none)"))
            elif _field_type(root, path[:depth], key) in _UNSIGNED:
                out.append((at, f"field {cut(key)!r} is unsigned: no - sign (got "
                                f"{cut(value, 20)!r})"))
            elif value == "-":      # '- 1': Caffe reads -1; so does the parser, given ' -1'
                nxt = _SPACE.match(text, at + 1).end()
                if nxt < len(text) and text[nxt - 1] != "\n" and text[nxt] != "#":
                    chars[at], chars[nxt - 1] = " ", "-"
    return out


def lexical_problems(root, text: str) -> Tuple[str, List[Tuple[int, str]]]:
    """(the text for protobuf's parser, ``(offset, what)`` of each input Caffe's parser
    refuses or reads otherwise, in order) for a net whose message descriptor is ``root``
    (Note [Where the parsers part]). The text handed back has the length and lines of
    ``text``; each problem's first character is blanked in it, so that the parser reports
    what comes before the first."""
    odd = _ODD.search(text) is not None
    if "\\" not in text and not odd and not _SIGN.search(text):
        return text, []
    chars = list(text)
    out = ((_escapes(text) if "\\" in text else []) + (_characters(text) if odd else [])
           + _signs(root, text, chars))
    out.sort()
    for at, _ in out:
        chars[at] = " "
    return "".join(chars), out
