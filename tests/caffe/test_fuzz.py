"""Mutated Caffe nets through the one reader of nets (ucudnn.caffe.proto.parse_net / read_net,
what `ucudnn prototxt` and shape inference call): every input ends in a net or in an
InputError whose message starts with the file name, carries the line and column where the
parser gives one, and quotes at most a capped excerpt -- never another exception, never a
traceback. The cases are deterministic (a fixed seed); and where a protobuf compiler is
there, ucudnn accepts exactly the mutated nets that Caffe's own (C++) parser accepts."""
import math
import random
import re
import time
import warnings

import pytest

from caffe_nets import TARBALL_NETS, cxx_parse, tarball_nets  # noqa: E402

from ucudnn.caffe import proto as cp  # noqa: E402
from ucudnn.vocab import InputError  # noqa: E402

SEED = 20180821
#: mutations of each net, fewer of the two GoogLeNets (40 kB, 15 ms a parse: ten times the
#: others): 2 x 100 + 27 x 364 = 10,028 mutated texts, plus the special cases
CASES_PER_NET, CASES_PER_BIG_NET, BIG_NET = 364, 100, 20_000
#: every how many-th case has its line checked against protobuf's own parse (a second parse)
CHECK_LINE_EVERY = 3
#: what an error message may hold after the file name: position, layer (capped), the
#: parser's text (capped) and the hint for unknown fields
MAX_TAIL = 420

EXTREMES = ["0", "-1", "1", str(2**31 - 1), str(2**31), str(-2**31 - 1), str(2**32),
            str(2**63 - 1), str(2**63), str(2**64), str(-2**63 - 1), "1e309", "-1e309",
            "1e-400", "nan", "-nan", "inf", "-inf", "0x7fffffff", "0xffffffffffffffffff",
            "1.5", "-0", "00", "1e5", "3.4e39"]
GARBAGE = "{}<>[]:;,\"'#\\-.0123456789aeXZ_ \t\n\x00\x01\x7f\u00e9\u2028\U0001f600"
_SPLIT = re.compile(r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|#[^\n]*|\s+|[A-Za-z_]\w*"""
                    r"""|[-+]?[0-9][\w.+-]*|.""", re.S)


def _mutate(rng: random.Random, text: str) -> str:
    toks = _SPLIT.findall(text)
    real = [i for i, t in enumerate(toks) if not t.isspace() and not t.startswith("#")]
    kind = rng.randrange(11)
    i = rng.choice(real)
    if kind == 0:                                   # a token deleted
        toks[i] = ""
    elif kind == 1:                                 # two neighbours swapped
        j = real[min(real.index(i) + 1, len(real) - 1)]
        toks[i], toks[j] = toks[j], toks[i]
    elif kind == 2:                                 # two tokens anywhere swapped
        j = rng.choice(real)
        toks[i], toks[j] = toks[j], toks[i]
    elif kind in (3, 4):                            # a number (or any token) at an extreme
        nums = [k for k in real if toks[k][0].isdigit() or toks[k][0] == "-"]
        toks[rng.choice(nums) if nums and kind == 3 else i] = rng.choice(EXTREMES)
    elif kind == 5:                                 # a field name misspelled
        names = [k for k in real if toks[k][0].isalpha() and k + 1 < len(toks)
                 and toks[k + 1] in (":", " ")]
        k = rng.choice(names or [i])
        w, at = toks[k], rng.randrange(len(toks[k]))
        toks[k] = rng.choice([w[:at] + w[at + 1:], w[:at] + w[at] + w[at:],
                              w[:at] + rng.choice("abcdefghijklmnopqrstuvwxyz_") + w[at + 1:]])
    elif kind == 6:                                 # a token repeated elsewhere
        toks.insert(rng.choice(real), " " + toks[i] + " ")
    elif kind == 7:                                 # cut short
        return text[:rng.randrange(len(text))]
    elif kind == 8:                                 # garbage characters
        at = rng.randrange(len(text))
        junk = "".join(rng.choice(GARBAGE) for _ in range(rng.randint(1, 8)))
        return text[:at] + junk + text[at:]
    elif kind == 9:                                 # a line doubled or dropped
        lines = text.split("\n")
        k = rng.randrange(len(lines))
        lines[k:k + 1] = [lines[k]] * rng.choice([0, 2])
        return "\n".join(lines)
    else:                                           # a fork's field (Caffe refuses it)
        at = text.find("pooling_param {")
        if at < 0:
            at = text.find("layer {")
            return text[:at + 7] + " ceil_mode: true" + text[at + 7:]
        return text[:at + 15] + " ceil_mode: true" + text[at + 15:]
    return "".join(toks)


def _cases(nets):
    """(name, text) for every mutated net, deterministic."""
    rng = random.Random(SEED)
    for path in nets:
        text = path.read_text()
        for k in range(CASES_PER_BIG_NET if len(text) > BIG_NET else CASES_PER_NET):
            yield f"{path.parent.name}/{path.stem}#{k}.prototxt", _mutate(rng, text)


def _special_texts():
    deep_unknown = 'layer { name: "deep" ' + "nosuch { " * 400 + "}" * 400 + " }"
    deep_known = "layer { " * 400 + "}" * 400
    deep_v1 = "layers { layer { blobs { shape { " + "dim { " * 400 + "}" * 404
    return [("deep_unknown.prototxt", deep_unknown), ("deep_known.prototxt", deep_known),
            ("deep_v1.prototxt", deep_v1), ("empty.prototxt", ""), ("blank.prototxt", " \n\t"),
            ("comment.prototxt", "# nothing but a comment\n"),
            ("unclosed.prototxt", "layer {" * 3), ("closers.prototxt", "}" * 1000),
            ("strid.prototxt", 'layer { name: "conv1" type: "Convolution"\n'
                               '  convolution_param { num_output: 8 kernel_size: 3 strid: 4 } }')]


def _check(source: str, read, at_most=None):
    """Run ``read``: 'ok' or 'error'; any other outcome fails the test. ``at_most``: the
    error must name a line and column, the line not after this one."""
    try:
        read()
    except InputError as e:
        msg = str(e)
        assert msg.startswith(source), (source, msg[:300])
        assert len(msg) - len(source) <= MAX_TAIL, (source, len(msg), msg[:300])
        if at_most is not None:
            m = re.match(re.escape(source) + r":(\d+):(\d+): ", msg)
            assert m and int(m.group(1)) <= at_most, (source, msg[:300])
        return "error"
    return "ok"


def _stop(text):
    """The line where protobuf's parser itself stops on ``text``; inf where it reads the
    text (what remains are ucudnn's checks: Note [Where the parsers part], V1 nets, required
    fields)."""
    from google.protobuf import text_format
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            text_format.Parse(text, cp.load_caffe_pb2().NetParameter())
        except text_format.ParseError as e:
            return e.GetLine()
        except (RecursionError, DeprecationWarning):
            pass
    return math.inf


@pytest.fixture(scope="module")
def nets(patched_caffe_source):
    found = tarball_nets(patched_caffe_source)
    assert len(found) == TARBALL_NETS, [str(p) for p in found]
    return found


def test_mutated_nets_end_in_a_net_or_a_named_error(nets):
    pb2 = cp.load_caffe_pb2()
    start = time.perf_counter()
    outcomes = {"ok": 0, "error": 0}
    n = 0
    for source, text in _cases(nets):
        line = _stop(text) if n % CHECK_LINE_EVERY == 0 else math.inf
        outcomes[_check(source, lambda: cp.parse_net(pb2, text, source), line)] += 1
        n += 1
    for source, text in _special_texts():
        _check(source, lambda: cp.parse_net(pb2, text, source))
    took = time.perf_counter() - start
    print(f"{n} mutated nets in {took:.1f} s: {outcomes}")
    assert n >= 10_000
    # neither degenerate: many mutations still read, most do not
    assert outcomes["ok"] > 0.05 * n and outcomes["error"] > 0.5 * n, outcomes


def test_special_inputs(tmp_path):
    pb2 = cp.load_caffe_pb2()
    for source, text in _special_texts():
        outcome = _check(source, lambda: cp.parse_net(pb2, text, source))
        assert outcome == ("ok" if source in ("empty.prototxt", "blank.prototxt",
                                              "comment.prototxt") else "error"), source
    with pytest.raises(cp.PrototxtError) as e:
        cp.parse_net(pb2, _special_texts()[0][1], "deep.prototxt")
    assert str(e.value).startswith("deep.prototxt:1:22: layer 'deep': ") and \
        '"nosuch"' in str(e.value), str(e.value)
    with pytest.raises(cp.PrototxtError) as e:
        cp.parse_net(pb2, _special_texts()[-1][1], "s.prototxt")
    assert str(e.value).startswith("s.prototxt:2:52: layer 'conv1': ") and '"strid"' in str(
        e.value), str(e.value)


def test_a_50_mb_line_is_quoted_in_part(tmp_path):
    """One 50 MB line: an unterminated string in a layer; the message quotes a window."""
    path = tmp_path / "huge.prototxt"
    path.write_text('name: "n"\nlayer { name: "big" type: "' + "x" * (50 << 20))
    with pytest.raises(cp.PrototxtError) as e:
        cp.read_net(cp.load_caffe_pb2(), path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:2:27: layer 'big': String missing ending quote"), msg[:300]
    assert "..." in msg and len(msg) - len(str(path)) <= MAX_TAIL


def test_binary_garbage_and_empty_files(tmp_path):
    rng = random.Random(SEED)
    pb2 = cp.load_caffe_pb2()
    seen = set()
    for k in range(200):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
        if k % 4 == 0:                  # mostly text, some bytes of anything
            data = b'name: "x"\nlayer { name: "a" ' + data + b" }"
        path = tmp_path / f"garbage{k}.prototxt"
        path.write_bytes(data)
        seen.add(_check(str(path), lambda: cp.read_net(pb2, path)))
    assert "error" in seen
    for k, data in enumerate((b"", b"\n", b"\xef\xbb\xbf", b"\x00")):
        path = tmp_path / f"empty{k}.prototxt"
        path.write_bytes(data)
        assert _check(str(path), lambda: cp.read_net(pb2, path)) == (
            "error" if data == b"\x00" else "ok")


def test_nesting_deeper_than_the_parser_follows(tmp_path):
    """A fork's schema with a message that holds itself: 5,000 levels exhaust the recursion
    of protobuf's text parser; the error names the file and the line where it gets deep."""
    from ucudnn.caffe.protoc import find_protoc
    if find_protoc() is None:
        pytest.skip("no protobuf compiler (protoc or grpcio-tools) for the fork's caffe.proto")
    fork = tmp_path / "caffe.proto"
    fork.write_text('syntax = "proto2";\npackage caffe;\n'
                    "message UcudnnParameter { optional int64 workspace_limit = 3; }\n"
                    "message Node { optional Node child = 1; }\n"
                    "message LayerParameter { optional string name = 1; }\n"
                    "message NetParameter { optional string name = 1; optional Node node = 2; "
                    "optional UcudnnParameter ucudnn_param = 9; "
                    "repeated LayerParameter layer = 100; }\n")
    pb2 = cp.load_caffe_pb2(str(fork))
    text = 'name: "n"\nnode {\n' + "child { " * 5000 + "}" * 5000 + "\n}\n"
    with pytest.raises(cp.PrototxtError) as e:
        cp.parse_net(pb2, text, "rec.prototxt")
    assert re.match(r"rec\.prototxt:3:\d+: messages nested 5001 deep", str(e.value)), str(e.value)
    shallow = 'name: "n"\nnode { ' + "child { " * 50 + "}" * 50 + " }"
    assert cp.parse_net(pb2, shallow, "ok.prototxt").node.child.child.HasField("child")


def test_ucudnn_accepts_what_caffes_parser_accepts(nets, patched_caffe_source):
    """600 of the mutated nets, each through Caffe's C++ text-format parser (protoc
    --encode against the patched caffe.proto) and through ucudnn: the same verdict, and the
    line or an earlier one where both refuse (Caffe's names the token after the offending
    one). ucudnn's refusal of V0 nets (Note [Old net formats]) is the one difference."""
    from ucudnn.caffe.protoc import find_protoc
    cases = [c for _, c in zip(range(600), _cases(nets))]
    cases += [("special/" + s, t) for s, t in _special_texts()]
    proto = patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"
    verdicts = cxx_parse(find_protoc(), proto, [t for _, t in cases])
    pb2 = cp.load_caffe_pb2()
    differ = []
    for (source, text), (cxx_ok, cxx_msg) in zip(cases, verdicts):
        try:
            cp.parse_net(pb2, text, source)
            ours, line = True, None
        except cp.PrototxtError as e:
            if "Caffe's old net format" in str(e):
                continue
            ours, line = False, int(re.match(re.escape(source) + r":(\d+):", str(e)).group(1))
        if ours != cxx_ok:
            differ.append((source, ours, cxx_msg[:200]))
        elif not ours:
            m = re.match(r"input:(\d+):", cxx_msg)
            if m and int(m.group(1)) < line:
                differ.append((source, "line", line, cxx_msg[:200]))
    assert not differ, differ[:10]


#: (prototxt, whether ucudnn reads it): Note [Where the parsers part], case by case
PARTS = [
    ('layer { name: "a\\qb" }', False), ('layer { name: "a\\8" }', False),
    ('layer { name: "a\\u00e9\\101\\x41\\n" }', True), ('layer { name: "a\\?" }', False),
    ("layer { convolution_param { kernel_size: +3 } }", False),
    ("layer { loss_weight: +1 }", False), ("layer { loss_param { ignore_label: +1 } }", False),
    ("layer { convolution_param { kernel_size: -0 } }", False),
    ("layer { convolution_param { kernel_size: [3, -0] } }", False),
    ("layer { loss_param { ignore_label: - 1 } }", True), ("layer { loss_weight: - inf }", True),
    ("layer { loss_param { ignore_label: -0 } }", True), ("input_dim: -0", True),
    ("layer {\u2028name: 'a' }", False), ("layer { name: 'a' }\u00a0", False),
    ("layer { name: 'a'\x01 }", False), ("layer { name: 'a\x00' }", False),
    ("layer { name: 'a\x01' }", True), ("# caf\u00e9 \x01\nlayer { name: '\u00e9' }", True),
    ('layer { name: "\\xff" }', False),
]
#: where ucudnn differs from Caffe on purpose: \? (Python misreads it) and bytes that are not
#: UTF-8 in a string (Python's strings are text)
APART = {'layer { name: "a\\?" }', 'layer { name: "\\xff" }'}


@pytest.mark.parametrize("text, reads", PARTS)
def test_where_the_parsers_part(text, reads):
    pb2 = cp.load_caffe_pb2()
    assert _check("p.prototxt", lambda: cp.parse_net(pb2, text, "p.prototxt"),
                  math.inf) == ("ok" if reads else "error")
    if reads and "- " in text:          # '- 1' is read as Caffe reads it
        net = cp.parse_net(pb2, text, "p.prototxt")
        value = (net.layer[0].loss_param.ignore_label if "ignore_label" in text
                 else net.layer[0].loss_weight[0])
        assert value == (-1 if "ignore_label" in text else -math.inf)


def test_caffes_parser_agrees_on_where_the_parsers_part(patched_caffe_source):
    from ucudnn.caffe.protoc import find_protoc
    proto = patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"
    verdicts = cxx_parse(find_protoc(), proto, [t for t, _ in PARTS])
    assert [(t, ok) for (t, _), (ok, _) in zip(PARTS, verdicts) if t not in APART] == [
        (t, reads) for t, reads in PARTS if t not in APART]
    assert all(ok for (t, _), (ok, _) in zip(PARTS, verdicts) if t in APART)
