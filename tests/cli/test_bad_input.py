"""Bad input on the command line: sizes and counts out of range, empty and special paths,
huge files, names with control characters, non-finite numbers in ``plan --json``. Each ends
in one line ``ucudnn: error: ...`` naming the option or file, exit status 2 -- never a
traceback, a hang or memory exhausted, and nothing written over. Then a seeded fuzz of the
same options through :func:`ucudnn.cli.main`, in process.

The fuzz runs ``UCUDNN_FUZZ_CASES`` cases (:data:`DEFAULT_CASES` by default) from
``UCUDNN_FUZZ_SEED`` (:data:`SEED`); a failure names the seed, the case and its command line,
and ``UCUDNN_FUZZ_SEED=S UCUDNN_FUZZ_FIRST=K UCUDNN_FUZZ_CASES=1`` replays case K alone."""
import json
import os
import random
import sys
import time

import pytest

from cli_fuzz import fuzz_settings, one_line_error as _one_line_error
from cli_fuzz import run_case, run_main as _run, snapshot as _snapshot
from repo_paths import NETS, SHARED, SHIPPED

from ucudnn import files
from ucudnn.caffe import proto as cp
from ucudnn.caffe import protoc
from ucudnn.cli import plan as plan_cmd
from ucudnn.cli.common import clean
from ucudnn.vocab import SIZE_MAX, InputError, parse_size

SEED = 48
DEFAULT_CASES = 300


# ---------------------------------------------------------------------------------------------
# files of every kind
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def kinds(tmp_path):
    """Paths of every kind a user might give, by name."""
    d = tmp_path / "inputs"
    d.mkdir()
    fifo = d / "fifo"
    os.mkfifo(fifo)
    (d / "link-to-fifo").symlink_to(fifo)
    big = d / "big.prototxt"
    with open(big, "wb") as f:         # sparse: its size is over the bound, no disk used
        f.truncate(files.TEXT_LIMIT + 1)
    (d / "long-line.prototxt").write_text(" " * (files.LINE_LIMIT + 1))
    (d / "nul.prototxt").write_bytes(b"name: \"x\"\0")
    (d / "latin1.prototxt").write_bytes(b"name: \"caf\xe9\"\n")
    (d / "slice.prototxt").write_text(
        'input: "data"\ninput_shape { dim: 2 dim: 4 dim: 8 dim: 8 }\n'
        'layer { name: "sl" type: "Slice" bottom: "data" }\n'
        'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
        'convolution_param { num_output: 4 kernel_size: 3 } }\n')
    (d / "huge-batch.prototxt").write_text(
        'input: "data"\ninput_shape { dim: 2000000 dim: 1 dim: 64 dim: 64 }\n'
        'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
        'convolution_param { num_output: 1000 kernel_size: 1 } }\n')
    (d / "escapes.prototxt").write_text(
        (NETS / "alexnet.prototxt").read_text().replace('name: "conv1"',
                                                        'name: "conv1\\033[2J\\nX"'))
    (d / "existing.out").write_text("keep me\n")
    return {"empty": "", "blank": " ", "fifo": str(fifo), "link-to-fifo": str(d / "link-to-fifo"),
            "folder": str(d), "devnull": os.devnull, "devzero": "/dev/zero",
            "big": str(big), "long-line": str(d / "long-line.prototxt"),
            "nul": str(d / "nul.prototxt"), "latin1": str(d / "latin1.prototxt"),
            "missing": str(d / "missing.prototxt"), "slice": str(d / "slice.prototxt"),
            "huge-batch": str(d / "huge-batch.prototxt"),
            "escapes": str(d / "escapes.prototxt"), "existing": str(d / "existing.out"),
            "alexnet": str(NETS / "alexnet.prototxt"), "resnet18": str(NETS / "resnet18.prototxt"),
            "layers": str(SHARED / "layers_alexnet.csv"),
            "table": str(SHARED / "alexnet_default.csv")}


# ---------------------------------------------------------------------------------------------
# each defect
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("9007199254740993", 2**53 + 1), (str(2**63 - 1), 2**63 - 1), ("1.5KiB", 1536),
    (".5K", 512), ("0.25MiB", 262144), ("8191.9990234375K", 8388607), ("007", 7),
    ("1" + "0" * 18, 10**18), ("8.000000000000000000000000001KiB", None),
])
def test_sizes_are_integers_end_to_end(text, value):
    if value is None:
        with pytest.raises(InputError, match="not a whole number of bytes"):
            parse_size(text)
    else:
        assert parse_size(text) == value and type(parse_size(text)) is int


@pytest.mark.parametrize("text", [str(2**63), "9" * 400, "9" * 5000 + "KiB", "8EiB",
                                  "8388608TiB", str(2**64)])
def test_sizes_beyond_int64_are_refused(text):
    with pytest.raises(InputError, match=r"--limit: .*(largest size|cannot parse)") as e:
        parse_size(text, "--limit")
    assert len(str(e.value)) < 200 and SIZE_MAX == 2**63 - 1


@pytest.mark.parametrize("argv,message", [
    (["plan", "--limit", "9" * 400], "--limit: '9999"),
    (["plan", "--limit", str(2**63)], "--limit: '9223372036854775808' is 9223372036854775808 "
                                      "bytes, more than the largest size"),
    (["plan", "--cudnn-version", "-1"], "--cudnn-version: expected a cuDNN version"),
    (["plan", "--cudnn-version", "9" * 30], "--cudnn-version: expected a cuDNN version"),
    (["cache", "export", "--net", "alexnet", "--cudnn-version", "-1"],
     "--cudnn-version: expected a cuDNN version"),
    (["prototxt", "{alexnet}", "-o", "{existing}", "--force", "--repeats", "9" * 30],
     "--repeats: must be at most 2147483647"),
    (["plan", "--batch", "1000000000"], "--batch: must be at most 1048576, got 1000000000"),
    (["plan", "--prototxt", "{empty}"], "--prototxt: an empty name"),
    (["plan", "--net", "{empty}"], "--net: an empty name"),
    (["plan", "--layers", "{empty}"], "--layers: an empty name"),
    (["plan", "--prototxt", "{fifo}"], "is a FIFO, not a text file"),
    (["plan", "--prototxt", "{link-to-fifo}"], "is a FIFO, not a text file"),
    (["plan", "--layers", "{fifo}"], "is a FIFO, not a text file"),
    (["plan", "--table", "{fifo}"], "is a FIFO, not a text file"),
    (["plan", "--prototxt", "{devzero}"], "/dev/zero: is a character device"),
    (["prototxt", "{devzero}", "-o", "{existing}"], "/dev/zero: is a character device"),
    (["plan", "--prototxt", "{big}"], "larger than the 67108864 bytes read at most"),
    (["plan", "--prototxt", "{long-line}"], ":1: a line of 1048577 characters, longer than"),
    (["prototxt", "{long-line}", "-o", "{existing}", "--force"], ":1: a line of 1048577 "),
    (["plan", "--prototxt", "{slice}"], "layer 'sl' (type Slice): Slice Layer takes at least 1 "
                                        "top blob(s) as output"),
    (["plan", "--input-shape", "data=2000000,3,227,227", "--prototxt", "{alexnet}"],
     "--input-shape: data=2000000,3,227,227: more than 2147483647 elements; Caffe refuses"),
    (["plan", "--prototxt", "{huge-batch}"], "layer 'c': a mini-batch of 2000000, more than the "
                                             "1048576 planned at most"),
    (["plan", "--prototxt", "{huge-batch}", "--batch", "1000"],
     "layer 'c': its output would hold 4096000000 elements; Caffe refuses a blob of more than "
     "2147483647"),
])
def test_bad_input_is_one_line(kinds, argv, message):
    argv = [a.format(**kinds) for a in argv]
    before = _snapshot(os.path.dirname(kinds["fifo"]))
    t0 = time.monotonic()
    rc, _, err = _run(argv)
    line = _one_line_error(rc, err, argv)
    assert message in line, (argv, err)
    assert time.monotonic() - t0 < 10
    assert _snapshot(os.path.dirname(kinds["fifo"])) == before


def test_a_50_mb_line_is_refused_before_it_is_parsed(tmp_path):
    p = tmp_path / "spaces.prototxt"
    p.write_bytes(b" " * (50 * 2**20))
    t0 = time.monotonic()
    rc, _, err = _run(["plan", "--prototxt", p])
    assert "a line of 52428800 characters" in _one_line_error(rc, err, p)
    assert time.monotonic() - t0 < 5


def test_read_text_opens_no_special_file(kinds):
    for name in ("fifo", "link-to-fifo", "folder", "devnull", "devzero"):
        with pytest.raises(InputError, match="not a prototxt; nothing was read"):
            files.read_text(kinds[name], what="a prototxt")
    with pytest.raises(InputError, match="an empty file name"):
        files.read_text("")
    with pytest.raises(InputError, match="larger than the 10 bytes"):
        files.read_text(kinds["alexnet"], limit=10)
    with pytest.raises(InputError, match=r":3: a line of 8 characters, longer than the 7"):
        files.read_text(_write(os.path.dirname(kinds["fifo"]), "a\nb\n12345678\n"),
                        line_limit=7)


def _write(folder, text):
    p = os.path.join(folder, "lines.txt")
    with open(p, "w") as f:
        f.write(text)
    return p


def test_names_with_control_characters_are_escaped(kinds, tmp_path):
    rc, out, err = _run(["plan", "--prototxt", kinds["escapes"]])
    assert rc == 0, err
    assert "\x1b" not in out + err and "conv1\\x1b[2J\\nX/fwd" in out
    assert all(not ln.startswith("X") for ln in out.splitlines())
    rc, out, err = _run(["plan", "--prototxt", kinds["escapes"], "--json"])
    assert rc == 0 and json.loads(out)["kernels"][0]["layer"] == "conv1\x1b[2J\nX"
    rc, _, err = _run(["plan", "--net", "vgg\x1b[31m\n"])
    assert "'vgg\\x1b[31m\\n'" in _one_line_error(rc, err, "--net")
    assert clean("a\x00b\x7f\x9b\tc\u00e9") == "a\\x00b\\x7f\\x9b\\tc\u00e9"


def test_plan_json_is_strict_json():
    doc = {"a": [1.5, float("inf"), -float("inf"), float("nan")], "b": {"c": float("inf")},
           "d": 2, "e": "x"}
    text = plan_cmd.strict_json(doc)
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text) == {"a": [1.5, None, None, None], "b": {"c": None}, "d": 2,
                                "e": "x"}
    finite = {"t": [0.1, 2.5e-7, 1e300], "n": None, "s": "\u00e9"}
    assert plan_cmd.strict_json(finite) == json.dumps(finite, indent=2)


def test_the_shipped_descriptor_is_used_without_protoc(tmp_path, monkeypatch):
    """A digest that matches: the shipped descriptor, whatever the mtimes and whatever
    protoc is on PATH; a digest of another .proto: compiled again."""
    if not cp.OWNED_DESCRIPTOR.is_file():
        pytest.skip("a source tree without caffe_net.desc")
    proto, desc = tmp_path / "caffe_net.proto", tmp_path / "caffe_net.desc"
    proto.write_bytes(cp.OWNED_PROTO.read_bytes())
    desc.write_bytes(b"shipped")
    digest = tmp_path / ("caffe_net.desc" + protoc.DIGEST_SUFFIX)
    digest.write_text(protoc.digest_text(proto) + "\n")
    os.utime(desc, (1, 1))                      # the .proto is much newer
    ran = []
    monkeypatch.setattr(cp, "OWNED_PROTO", proto)
    monkeypatch.setattr(cp, "OWNED_DESCRIPTOR", desc)
    monkeypatch.setattr(cp, "find_protoc", lambda: ["protoc"])
    monkeypatch.setattr(cp, "_descriptor_set", lambda p: ran.append(p) or b"compiled")
    assert cp._owned_descriptor_set() == b"shipped" and ran == []
    digest.unlink()
    assert cp._owned_descriptor_set() == b"shipped" and ran == []
    digest.write_text("sha256:" + "0" * 64 + "\n")
    assert cp._owned_descriptor_set() == b"compiled" and ran == [proto]


def test_the_installed_package_has_its_digest():
    if not cp.OWNED_DESCRIPTOR.is_file():
        pytest.skip("a source tree without caffe_net.desc")
    assert cp._owned_digest_matches()
    recorded = cp.OWNED_DESCRIPTOR.with_name(cp.OWNED_DESCRIPTOR.name + protoc.DIGEST_SUFFIX)
    assert recorded.read_text().strip() == protoc.digest_text(cp.OWNED_PROTO)


# ---------------------------------------------------------------------------------------------
# the fuzz
# ---------------------------------------------------------------------------------------------

INTS = ["0", "1", "-1", "2", "7", "64", "256", str(2**20), str(2**20 + 1), str(2**31 - 1),
        str(2**31), str(2**53 + 1), str(2**63 - 1), str(2**63), str(2**64), "9" * 400,
        "1e3", "0x10", "", " ", "1.5", "nan", "inf", "-0", "\u0663", "9" * 5000]
SIZES = INTS + ["8MiB", "64M", "1.5KiB", ".5K", "0.3B", "unlimited", "none", "-5MiB",
                "1e309", "9" * 400 + "KiB", "8 MiB", "MiB", "8XB", "\x1b[31m", "1" * 5000,
                "8388607.5", "0.0000001GiB", "1" + "0" * 40]
TEXTS = ["", " ", "G", "NVIDIA H200", "\x1b[2J\x1b[H", "a\nb", "\x00", "\u2028", "x" * 3000]
POLICIES = ["undivided", "powerOfTwo", "all", "ALL", "fast", ""]
PATH_KINDS = ["empty", "blank", "fifo", "link-to-fifo", "folder", "devnull", "devzero", "big",
              "long-line", "nul", "latin1", "missing", "slice", "escapes"] + \
    ["alexnet", "resnet18", "layers"] * 4


#: values that plan, by option: half the values drawn are one of these
GOOD = {"--limit": ["8MiB", "64MiB", "0", "unlimited", "1.5MiB"], "--budget": ["1GiB", "512MiB"],
        "--batch": ["1", "8", "32", "300"], "--cudnn-version": ["91400"],
        "--sizes": ["1,2,4", "8", "16,32"], "--policy": ["undivided", "powerOfTwo", "all"],
        "--gpu": ["NVIDIA H200"], "--repeats": ["1", "3"]}


def _value(rng, pool, option=None):
    if option in GOOD and rng.random() < 0.5:
        return rng.choice(GOOD[option])
    v = rng.choice(pool)
    if rng.random() < 0.15:                     # a random mix of the pool's characters
        chars = "".join(pool[:12]) + "-.,=\x1b\n"
        v = "".join(rng.choice(chars) for _ in range(rng.randint(0, 12)))
    return v


def _case(rng, kinds):
    """One command line."""
    def path():
        return kinds[rng.choice(PATH_KINDS)]
    what = rng.choice(["plan"] * 8 + ["prototxt", "cache-list", "cache-export", "bench"])
    opts = {"--limit": SIZES, "--budget": SIZES, "--batch": INTS, "--cudnn-version": INTS,
            "--sizes": INTS + ["1,2,4", "4,,2", "1," * 50 + "8"], "--policy": POLICIES,
            "--gpu": TEXTS, "--repeats": INTS}
    if what == "plan":
        argv = ["plan", rng.choice(["--net", "--net", "--prototxt", "--prototxt", "--layers"])]
        argv.append(rng.choice(["alexnet", "resnet18", "alexnet", "", "\x1b"])
                    if argv[1] == "--net" else path())
        for opt in rng.sample(sorted(opts), rng.randint(0, 4)):
            if opt != "--repeats":
                argv += [opt, _value(rng, opts[opt], opt)]
        if rng.random() < 0.2:
            argv += ["--input-shape", "data=" + ",".join(_value(rng, INTS) for _ in range(4))]
        if rng.random() < 0.2:
            argv += [rng.choice(["--table", "--cache"]), path() if rng.random() < 0.7
                     else kinds["table"]]
        if rng.random() < 0.3:
            argv.append("--json")
    elif what == "prototxt":
        argv = ["prototxt", path(), "-o", rng.choice([kinds["existing"], kinds["fifo"],
                                                      kinds["devnull"], kinds["folder"], ""])]
        for opt in rng.sample(["--limit", "--repeats", "--policy", "--sizes"], rng.randint(0, 2)):
            argv += [opt, _value(rng, opts[opt], opt)]
    elif what == "cache-list":
        argv = ["cache", "list", "--cache", path()]
    elif what == "cache-export":
        argv = ["cache", "export", rng.choice([kinds["existing"], kinds["fifo"],
                                               kinds["devnull"]]), "--cache", path()]
    else:
        argv = ["bench", "--net", "alexnet", "--repeats", _value(rng, INTS, "--repeats")]
    return argv


def test_fuzz_command_line(kinds):
    """Random values of the options and paths above: exit status 0 or 2, never a traceback
    or another exception, an error is one line (the last on stderr), no case takes longer
    than CASE_LIMIT_S, and no file in the inputs' folder (nor /dev/null) is changed."""
    seed, first, cases = fuzz_settings(SEED, DEFAULT_CASES)
    folder = os.path.dirname(kinds["fifo"])
    before = _snapshot(folder)
    counts = {0: 0, 2: 0}
    rng = random.Random(seed)
    argvs = [_case(rng, kinds) for _ in range(first + cases)][first:]
    t0 = time.monotonic()
    for k, argv in enumerate(argvs, start=first):
        where = f"UCUDNN_FUZZ_SEED={seed} UCUDNN_FUZZ_FIRST={k} UCUDNN_FUZZ_CASES=1: {argv!r}"
        rc, _ = run_case(argv, where)
        counts[rc] += 1
        assert _snapshot(folder) == before, f"{where}: a file changed"
    print(f"fuzz: seed {seed}, {len(argvs)} cases, {counts[0]} planned, {counts[2]} refused "
          f"in one line, {time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize("count", [str(2**63), "1025"])
def test_a_layer_list_counting_too_many_layers_is_refused_at_once(tmp_path, count):
    """A row's ``count`` instantiates that many kernel plans: beyond MAX_COUNT, one line."""
    from ucudnn.cli.common import MAX_COUNT
    text = (SHIPPED / "alexnet_layers.csv").read_text().splitlines()
    cells = text[2].split(",")
    cells[-2] = count
    p = tmp_path / "l.csv"
    p.write_text("\n".join(text[:2] + [",".join(cells)] + text[3:]) + "\n")
    t0 = time.monotonic()
    rc, _, err = _run(["plan", "--layers", p])
    assert (f"--layers: {p}: layer 'conv2': field 'count': {count} identical layers, more than "
            f"the {MAX_COUNT} planned at most") in _one_line_error(rc, err, p)
    assert time.monotonic() - t0 < 5
    cells[-2] = str(MAX_COUNT)
    p.write_text("\n".join(text[:2] + [",".join(cells)] + text[3:]) + "\n")
    assert _run(["plan", "--layers", p])[0] == 0


_OPENED = []


def _audit(event, args):
    if event == "open" and _OPENED and _OPENED[0] is not None and isinstance(args[0], str):
        _OPENED[0].append(args[0])


def _opens(argv):
    """(exit status, the files ``ucudnn ARGV`` opened), seen by an audit hook."""
    if not _OPENED:
        sys.addaudithook(_audit)                # a hook stays: it records only while asked
        _OPENED.append(None)
    _OPENED[0] = []
    try:
        rc, _, err = _run(argv)
    finally:
        opened, _OPENED[0] = _OPENED[0], None
    assert rc == 0, err
    return opened


@pytest.mark.parametrize("argv", [
    ["plan", "--layers", "{layers}", "--table", "{table}"],
    ["plan", "--net", "alexnet", "--table", "{table}", "--table", "{table}"],
    ["cache", "import", "{table}", "--layers", "{layers}", "--cache", "{cache}",
     "--gpu", "NVIDIA H200", "--cudnn-version", "91400"],
])
def test_a_named_table_or_layer_list_is_read_once(tmp_path, argv):
    paths = {"layers": str(SHIPPED / "alexnet_layers.csv"),
             "table": str(SHARED / "alexnet_default.csv"), "cache": str(tmp_path / "c.sqlite")}
    argv = [a.format(**paths) for a in argv]
    opened = _opens(argv)
    for name in ("layers", "table"):
        given = argv.count(paths[name])
        if not given:
            continue
        # cache import opens its FILE once more first, for the 16 bytes that mark a cache
        sniff = int(name == "table" and argv[:2] == ["cache", "import"])
        assert opened.count(paths[name]) == given + sniff, (name, opened)
