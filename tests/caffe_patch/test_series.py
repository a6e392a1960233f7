"""Tests for the Caffe patch series (caffe_patch/) and scripts/build_caffe.sh.

* test_series_applies_to_pinned_source: the series applies cleanly to the
  pinned pristine Caffe tree (fetched and sha256-verified by build_caffe.sh, or
  taken from an already verified download); skipped only when the source
  cannot be obtained at all.
* On the patched tree: the patches that need little apply with only that; Caffe's own
  scripts/cpp_lint.py passes on every C++ file the series touches; 0002 keeps few
  preprocessor branches and interprets no ucudnn_param field; the Notes
  caffe_patch/README.md names are where it says.
* test_ucudnn_series_compiles (marker ``caffe_build``): μ-cuDNN's patches alone
  (build_caffe.sh --series ucudnn) configure, and every translation unit they touch
  compiles (a few minutes; not a second full build).
* test_full_build (marker ``caffe_build``): the full build produces the
  ``caffe`` tool, libcaffe and test.testbin, whose CPU checks pass (``caffe time``'s
  whole iterations, 0006, among them), and pycaffe's blob layouts (0011) work with the
  Python pycaffe was built for. It runs scripts/build_caffe.sh
  with its default work root third_party/caffe, so an existing build is
  reused and the test is quick once Caffe has been built.
  Extra arguments for build_caffe.sh: env UCUDNN_CAFFE_BUILD_ARGS.
"""

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO
SCRIPT = REPO / "scripts" / "build_caffe.sh"
PATCH_DIR = REPO / "caffe_patch"
CAFFE_ROOT = REPO / "third_party" / "caffe"

ORIG_TARBALL = "caffe_1.0.0+git20180821.99bd997.orig.tar.gz"
ORIG_SHA256 = "e0eb3f06794f7402c77b7dec8e8480273ee1a1bb192e9122b621a69d4147ad0c"


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _cached_tarball():
    """A previously downloaded, verified orig tarball, if any."""
    for cand in (CAFFE_ROOT / "downloads" / ORIG_TARBALL,
                 REPO / ".offline" / ORIG_TARBALL):
        if cand.is_file() and _sha256(cand) == ORIG_SHA256:
            return cand
    return None


def _run(args, **kw):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, **kw)


def _tree_digest(root):
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_patch_series_present():
    patches = sorted(PATCH_DIR.glob("[0-9][0-9][0-9][0-9]-*.patch"))
    assert patches, "no patches in caffe_patch/"
    assert patches[0].name == "0001-modernise-for-cuda13-cudnn9.patch"
    text = patches[0].read_text()
    assert "diff --git a/" in text and "+++ b/" in text, "not a -p1 git diff"


def test_series_applies_to_pinned_source(tmp_path):
    prefix = tmp_path / "caffe"
    args = ["--prefix", str(prefix), "--skip-build"]
    cached = _cached_tarball()
    if cached is not None:
        args += ["--source", str(cached)]
    res = _run(args, timeout=1800)
    pristine_stamp = prefix / "pristine" / ".ucudnn-source"
    if res.returncode != 0 and not pristine_stamp.exists():
        pytest.skip("could not obtain the pinned Caffe source "
                    "(no Debian mirror / GitHub access):\n" + res.stdout[-2000:])
    assert res.returncode == 0, "patch series failed to apply:\n" + res.stdout[-4000:]
    assert "differs from Caffe" not in res.stdout

    src = prefix / "src"
    assert (src / ".ucudnn-patches").is_file()
    # spot-check that the modernisation is really in the patched tree
    cudnn_hpp = (src / "include/caffe/util/cudnn.hpp").read_text()
    assert "cudnnGetConvolutionForwardAlgorithm_v7" in cudnn_hpp
    conv = (src / "src/caffe/layers/cudnn_conv_layer.cpp").read_text()
    assert "cudnn::getConvolutionForwardAlgorithm(" in conv
    assert "cmake_minimum_required(VERSION 3.10)" in (src / "CMakeLists.txt").read_text()
    assert "cudnn_version.h" in (src / "cmake/Cuda.cmake").read_text()
    # the pristine tree stays untouched
    assert "cudnnGetConvolutionForwardAlgorithm_v7" not in (
        prefix / "pristine/include/caffe/util/cudnn.hpp").read_text()

    # idempotent: a second run neither fails nor re-applies
    before = _tree_digest(src)
    res2 = _run(args, timeout=1800)
    assert res2.returncode == 0, res2.stdout[-4000:]
    assert "already applied" in res2.stdout
    assert _tree_digest(src) == before


def test_ucudnn_python_default_and_relative_paths(tmp_path):
    """build_caffe.sh embeds the active virtual environment's Python, else the checkout's
    .venv (README.md's quick start), else python3; --ucudnn-python takes a path relative to
    the caller's working directory, and a missing one is named by its absolute path before
    anything is fetched."""
    def said(args, cwd, env):
        res = subprocess.run(["bash", str(SCRIPT), "--prefix", str(tmp_path / "p"),
                              "--source", str(tmp_path / "none"), "--fetch-only", *args],
                             cwd=cwd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60)
        assert res.returncode != 0, res.stdout
        m = re.search(r"the Python with the ucudnn package: (\S+)", res.stdout)
        return m.group(1) if m else res.stdout

    plain = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    venv = tmp_path / "env"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert said([], tmp_path, {**plain, "VIRTUAL_ENV": str(venv)}) == f"{venv}/bin/python"
    quick_start = REPO / ".venv" / "bin" / "python"
    assert said([], tmp_path, plain) == (str(quick_start) if os.access(quick_start, os.X_OK)
                                         else "python3")
    assert said(["--ucudnn-python", "env/bin/python"], tmp_path, plain) == \
        f"{venv}/bin/python"
    missing = subprocess.run(["bash", str(SCRIPT), "--ucudnn-python", "nowhere/bin/python",
                              "--prefix", str(tmp_path / "q"), "--fetch-only"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=60)
    assert missing.returncode != 0
    assert f"no interpreter at {tmp_path}/nowhere/bin/python" in missing.stdout
    assert not (tmp_path / "q").exists()


def _patch(name_prefix):
    (p,) = PATCH_DIR.glob(f"{name_prefix}-*.patch")
    return p


def _apply(tree, names):
    for name in names:
        res = subprocess.run(["patch", "-p1", "--forward", "--batch", "--no-backup-if-mismatch",
                              "-i", str(_patch(name))], cwd=tree, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=300)
        assert res.returncode == 0, f"{name} after {names[:names.index(name)]}:\n{res.stdout}"
        assert "fuzz" not in res.stdout, res.stdout
    assert not list(tree.rglob("*.rej"))


@pytest.mark.parametrize("series", [("0004",), ("0005",), ("0006",), ("0001", "0002", "0007"),
                                    ("0001", "0009"), ("0001", "0009", "0002", "0003")],
                         ids=["0004", "0005", "0006", "0001+0002+0007", "0001+0009",
                              "0001+0009+0002+0003"])
def test_patches_apply_with_only_what_they_need(patched_caffe_source, tmp_path, series):
    """0004 (pycaffe with NumPy 2), 0005 (prototxt errors) and 0006 (caffe time's whole
    iterations) apply to the pristine tree alone; 0007 (shared activation gradients)
    needs μ-cuDNN's 0001 and 0002; 0009 (the BatchNorm engines) needs only 0001, and
    μ-cuDNN's 0002 and 0003 apply after it. Each applies after the patches before it too
    (the fixture applies the whole series in order)."""
    if shutil.which("patch") is None:
        pytest.skip("patch not installed")
    src = patched_caffe_source
    assert (src / "include/caffe/layers/cudnn_batch_norm_layer.hpp").is_file()
    assert "GetBatchNormLayer" in (src / "src/caffe/layer_factory.cpp").read_text()
    tree = tmp_path / "tree"
    shutil.copytree(src.parent / "pristine", tree, symlinks=True)
    _apply(tree, series)
    proto = (tree / "src/caffe/proto/caffe.proto").read_text()
    assert ("optional Engine engine = 4 [default = DEFAULT];" in proto) == ("0009" in series)
    assert ("message UcudnnParameter" in proto) == ("0002" in series)
    assert ("optional bool share_diffs = 10" in proto) == ("0007" in series)
    io_py = (tree / "python/caffe/io.py").read_text()
    assert ("tobytes()" in io_py) == ("0004" in series)
    if "0009" in series:
        for rel in ("src/caffe/layers/cudnn_batch_norm_layer.cpp",
                    "src/caffe/layers/cudnn_batch_norm_layer.cu",
                    "src/caffe/test/test_cudnn_batch_norm_layer.cpp"):
            assert (tree / rel).is_file(), rel
    io = (tree / "src/caffe/util/io.cpp").read_text()
    assert ("LayerNamingErrorCollector" in io) == ("0005" in series)
    tool = (tree / "tools/caffe.cpp").read_text()
    assert ("Note [Whole iterations]" in tool) == ("0006" in series)


#: What Caffe's lint checks (cmake/lint.cmake: SRC_FILE_EXTENSIONS).
LINT_SUFFIXES = (".h", ".hpp", ".hu", ".c", ".cpp", ".cu", ".cc", ".cuh")


def _touched(patch_path):
    """The files a patch creates or changes, by their path in the tree."""
    return sorted({m.group(1) for m in re.finditer(r"^\+\+\+ b/(\S+)$",
                                                   Path(patch_path).read_text(), re.M)})


def _python_with_six():
    """A Python that can run Caffe's scripts/cpp_lint.py (it imports six), or None."""
    for exe in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if exe and subprocess.run([exe, "-c", "import six"], capture_output=True).returncode == 0:
            return exe
    return None


def test_series_passes_caffe_lint(patched_caffe_source):
    """Caffe's own scripts/cpp_lint.py (its 80-column limit, include order, ...) passes on
    every C++ file of the patched tree that a patch of the series touches."""
    src = patched_caffe_source
    py = _python_with_six()
    if py is None:
        pytest.skip("Caffe's scripts/cpp_lint.py needs six: apt-get install python3-six "
                    "(or: bash scripts/caffe_deps.sh)")
    files = sorted({f for p in PATCH_DIR.glob("[0-9][0-9][0-9][0-9]-*.patch")
                    for f in _touched(p) if f.endswith(LINT_SUFFIXES)})
    assert "src/caffe/util/ucudnn.cpp" in files and "src/caffe/util/io.cpp" in files
    res = subprocess.run([py, "-W", "ignore", "scripts/cpp_lint.py", *files], cwd=src,
                         capture_output=True, text=True, timeout=600)
    findings = [l for l in res.stderr.splitlines()
                if not l.startswith(("Done processing", "Total errors"))]
    assert res.returncode == 0 and "Total errors found: 0" in res.stderr, "\n".join(findings)


def test_ucudnn_patch_is_small_in_caffe_s_files(patched_caffe_source):
    """0002 keeps the stock methods free of preprocessor branches: at most six `#if...UCUDNN`
    lines over the files it touches, header guards included; and its C++ reads no
    ucudnn_param field: the layer's and the net's settings go to the core as text (Note
    [ucudnn in Caffe]), which merges, checks and plans them."""
    src = patched_caffe_source
    files = _touched(_patch("0002"))
    ifs = [(f, l) for f in files for l in (src / f).read_text().splitlines()
           if re.search(r"#\s*if.*UCUDNN", l)]
    assert len(ifs) <= 6, ifs
    fields = ("policy", "optimizer", "workspace_limit", "total_workspace", "micro_batch_size",
              "math", "benchmark_repeats", "cache_path", "exclude_winograd")
    read = re.compile(r"ucudnn_param\(\)\s*\.\s*(" + "|".join(fields) + r")\b")
    cxx = [f for f in files if f.endswith(LINT_SUFFIXES)]
    reads = [(f, l.strip()) for f in cxx for l in (src / f).read_text().splitlines()
             if read.search(l)]
    assert not reads, reads


def test_readme_names_notes_where_they_are(patched_caffe_source):
    """Every `Note [title] in `path`` of caffe_patch/README.md is in that file (of the patched
    Caffe tree or of this repository): the Notes live once, in the code."""
    raw = (PATCH_DIR / "README.md").read_text()
    text = re.sub(r"\s+", " ", raw)
    note = r"Note \[[^\]]+\]"
    refs = re.findall(rf"((?:{note}(?:,| and)? )+)in `([^`]+)`", text)
    assert len(refs) >= 8, refs
    for notes, path in refs:
        where = patched_caffe_source / path
        if not where.exists():
            where = REPO / path
        assert where.is_file(), path
        body = re.sub(r"\s+", " ", where.read_text())
        for title in re.findall(r"Note \[([^\]]+)\]", notes):
            assert f"Note [{title}]" in body, (title, path)
    # no copies: a Note's own heading is not in the README
    assert not re.search(r"^#+ Note \[", raw, re.M)


def test_readme_and_patch_headers_tell_no_history():
    """The README and the patches' headers say what the code does, not how it came to be."""
    history = re.compile(r"\bissue \d+|\bused to\b|\bno longer\b|\bany more\b|"
                         r"\bas before\b|\bfirst version\b", re.I)
    texts = {"README.md": (PATCH_DIR / "README.md").read_text()}
    for p in PATCH_DIR.glob("[0-9][0-9][0-9][0-9]-*.patch"):
        texts[p.name] = p.read_text().split("\n---\n", 1)[0]
    found = [(name, m.group(0)) for name, t in texts.items() for m in history.finditer(t)]
    assert not found, found


def _cached_source_args():
    """--source for build_caffe.sh: the tarball an earlier fetch or an offline bundle left."""
    for cand in (CAFFE_ROOT / "downloads" / ORIG_TARBALL, REPO / ".offline" / ORIG_TARBALL):
        if cand.is_file():
            return ["--source", str(cand)]
    return []


def _object_rule(build, src_root, rel):
    """(make command, directory) that compiles source file `rel` alone in CMake's Makefiles:
    a .cpp through its directory's per-object rule, a .cu through FindCUDA's rule."""
    if rel.endswith(".cu"):
        target = re.compile(rf"^(\S*generated_{re.escape(Path(rel).name)}\.o): "
                            rf"{re.escape(str(src_root / rel))}$", re.M)
        for bm in sorted(build.glob("**/CMakeFiles/*/build.make")):
            m = target.search(bm.read_text())
            if m:
                return ["make", "-f", str(bm.relative_to(build)), m.group(1)], build
        return None
    d, obj = Path(rel).parent, Path(Path(rel).name)
    while True:
        mk = build / d / "Makefile"
        if mk.is_file() and re.search(rf"^{re.escape(str(obj))}\.o:", mk.read_text(), re.M):
            return ["make", f"{obj}.o"], build / d
        if d == Path("."):
            return None
        obj, d = Path(d.name) / obj, d.parent


@pytest.mark.caffe_build
def test_ucudnn_series_compiles():
    """μ-cuDNN's patches alone (build_caffe.sh --series ucudnn) configure, and every
    translation unit they touch compiles: the later features only add to μ-cuDNN's code
    (`scripts/caffe_series.py check` finds no rewritten line), so it is whole. The units only, by
    CMake's per-object rules, not a second full build; their own work root
    third_party/caffe-ucudnn, so a second run (and ccache) reuses the objects."""
    cuda_root = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if not (cuda_root / "bin" / "nvcc").exists():
        pytest.skip(f"no nvcc under {cuda_root}")
    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed (run scripts/caffe_deps.sh)")
    prefix = REPO / "third_party" / "caffe-ucudnn"
    args = shlex.split(os.environ.get("UCUDNN_CAFFE_BUILD_ARGS", ""))
    if "--source" not in args and "--offline" not in args:
        args += _cached_source_args()
    res = _run(["--series", "ucudnn", "--prefix", str(prefix), "--configure-only", *args],
               timeout=1800)
    assert res.returncode == 0, "build_caffe.sh --series ucudnn failed:\n" + res.stdout[-6000:]
    src, build = prefix / "src", prefix / "build"
    proto = (src / "src/caffe/proto/caffe.proto").read_text()
    assert "message UcudnnParameter" in proto
    assert "share_diffs" not in proto and "message FusionParameter" not in proto
    names = [l.split()[0] for l in (src / ".ucudnn-patches").read_text().splitlines()[1:]]
    assert [n[:4] for n in names] == ["0001", "0002", "0003", "0004"], names
    units = sorted({f for n in names for f in _touched(PATCH_DIR / n)
                    if f.endswith((".cpp", ".cu")) and not f.startswith("python/")})
    assert "src/caffe/util/ucudnn.cpp" in units and "src/caffe/layers/cudnn_conv_layer.cu" in units
    gen = subprocess.run(["cmake", "--build", str(build), "--target", "caffeproto"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=1800)
    assert gen.returncode == 0, gen.stdout[-4000:]
    src_root = Path(re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.+)$",
                              (build / "CMakeCache.txt").read_text(), re.M).group(1))
    failed = []
    for rel in units:
        rule = _object_rule(build, src_root, rel)
        assert rule is not None, f"no rule compiles {rel} in {build}"
        cmd, cwd = rule
        out = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=1800)
        if out.returncode != 0:
            failed.append(f"{rel}:\n{out.stdout[-3000:]}")
    assert not failed, "\n".join(failed)


@pytest.mark.caffe_build
def test_full_build(capsys, tmp_path):
    cuda_root = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if not (cuda_root / "bin" / "nvcc").exists():
        pytest.skip(f"no nvcc under {cuda_root}")
    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed (run scripts/caffe_deps.sh)")
    args = shlex.split(os.environ.get("UCUDNN_CAFFE_BUILD_ARGS", ""))
    # build_caffe.sh reuses third_party/caffe/{downloads,pristine}; fall back
    # to an offline bundle's tarball when nothing was fetched before
    offline_tarball = REPO / ".offline" / ORIG_TARBALL
    if (not (CAFFE_ROOT / "pristine" / ".ucudnn-source").exists()
            and not (CAFFE_ROOT / "downloads" / ORIG_TARBALL).exists()
            and offline_tarball.is_file()
            and "--source" not in args and "--offline" not in args):
        args += ["--source", str(offline_tarball)]
    # ~20-35 minutes on 2 cores: the build's own progress goes to a log whose path is said
    # first, and its "[m:ss] Building ..." lines are echoed, one a minute (pytest -s shows
    # every line)
    log_path = CAFFE_ROOT / "build-test.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\n[test_full_build] building Caffe (about 20-35 min on 2 cores); "
              f"full log: {log_path}", flush=True)
    lines = []
    with open(log_path, "w") as log, subprocess.Popen(
            ["bash", str(SCRIPT), *args], cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True) as proc:
        last = None
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
            minute = re.match(r"\[(\d+):\d\d\] ", line)
            if minute and minute.group(1) != last or line.startswith("[build_caffe]"):
                last = minute.group(1) if minute else last
                with capsys.disabled():
                    print(f"[test_full_build] {line.rstrip()[:120]}", flush=True)
    res = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines))
    assert res.returncode == 0, "build_caffe.sh failed:\n" + res.stdout[-6000:]

    build = CAFFE_ROOT / "build"
    tool = build / "tools" / "caffe"
    assert tool.is_file() and os.access(tool, os.X_OK), f"{tool} missing"
    libs = list((build / "lib").glob("libcaffe.so*"))
    assert libs, "libcaffe.so not built"
    testbin = build / "test" / "test.testbin"
    assert testbin.is_file(), f"{testbin} missing"
    assert f"caffe tool : {tool}" in res.stdout

    # the tool links and loads (no GPU needed for --version)
    ver = subprocess.run([str(tool), "--version"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=120)
    assert ver.returncode == 0, ver.stdout
    assert "1.0.0" in ver.stdout
    ldd = subprocess.run(["ldd", str(testbin)], stdout=subprocess.PIPE,
                         text=True, timeout=60)
    assert "not found" not in ldd.stdout, ldd.stdout

    # the small net of the CPU checks below (every layer on the CPU)
    small = Path(__file__).parent / "data" / "share_diffs_cpu.prototxt"

    # 0007: shared activation gradients change no loss and no parameter gradient (CPU mode)
    check = subprocess.run([str(build / "tools" / "net_share_diffs_check"), str(small)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           timeout=300, env={**os.environ, "GLOG_minloglevel": "2"})
    assert check.returncode == 0 and check.stdout.rstrip().endswith("IDENTICAL"), check.stdout
    rounds = [l for l in check.stdout.splitlines() if l.startswith("round ")]
    assert len(rounds) == 3 and all("difference 0," in l for l in rounds), check.stdout

    # 0010: the fusions change no blob, loss or parameter gradient (CPU mode),
    # also where the activation gradients share buffers (the Eltwise layer reads the folded
    # Split's top diffs, whose buffers its bottoms' diffs may take)
    shared = tmp_path / "share_diffs_on.prototxt"
    shared.write_text(small.read_text().replace('name: "share"\n',
                                                'name: "share"\nshare_diffs: true\n', 1))
    for path in (small, shared):
        fused = subprocess.run([str(build / "tools" / "net_fusion_check"), str(path)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               timeout=300, env={**os.environ, "GLOG_minloglevel": "2"})
        assert fused.returncode == 0 and fused.stdout.rstrip().endswith("IDENTICAL"), \
            fused.stdout
        assert fused.stdout.startswith("2 ReLU layer(s) fused into an Eltwise layer, 0 into a "
                                       "BatchNorm layer; 1 Split layer(s) summed by an Eltwise "
                                       "layer\n0 BatchNorm layer(s) applied by an Eltwise "
                                       "layer\n"), fused.stdout
        # the folded Split's bottom diff is not used: never more activation-gradient memory
        held = [re.search(r"activation gradients (\d+) and (\d+) bytes", l).groups()
                for l in fused.stdout.splitlines() if l.startswith("round ")]
        assert len(held) == 3 and all(int(f) <= int(p) for p, f in held), fused.stdout

    # 0010: Net::Init folds a FUSED BatchNorm + Scale into the Eltwise SUM + ReLU right after
    # them; the CPU passes are each layer's own, so the net with it gives the same blobs,
    # losses and gradients, also in a forward stopped at the Scale layer (the GPU passes are
    # checked on the GPU host: tests/gpu/test_caffe_gpu.py)
    bn_text = small.read_text().replace(
        'layer { name: "res" type: "Eltwise"',
        'layer { name: "bn2b" type: "BatchNorm" bottom: "conv2b" top: "conv2b" '
        'batch_norm_param { engine: FUSED } }\n'
        'layer { name: "scale2b" type: "Scale" bottom: "conv2b" top: "conv2b" '
        'scale_param { bias_term: true filler { type: "constant" value: 0.5 } } }\n'
        'layer { name: "res" type: "Eltwise"', 1)
    assert "bn2b" in bn_text
    bn_net = tmp_path / "bn_eltwise.prototxt"
    bn_net.write_text(bn_text)
    fused = subprocess.run([str(build / "tools" / "net_fusion_check"), str(bn_net),
                            "eltwise_relu", "batch_norm_eltwise"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           timeout=300, env={**os.environ, "GLOG_minloglevel": "2"})
    assert fused.returncode == 0 and fused.stdout.rstrip().endswith("IDENTICAL"), fused.stdout
    assert fused.stdout.startswith("2 ReLU layer(s) fused into an Eltwise layer, 0 into a "
                                   "BatchNorm layer; 0 Split layer(s) summed by an Eltwise "
                                   "layer\n1 BatchNorm layer(s) applied by an Eltwise layer "
                                   "(GPU passes only)\n"), fused.stdout
    assert "forward to scale2b: its tops' largest difference 0;" in fused.stdout, fused.stdout

    # 0011: where the net inserts layout conversions, and the conversion layer on the CPU
    # (with a gradient check); the NHWC layers' GPU gtests run on the GPU host
    layout = subprocess.run([str(testbin), "--gtest_filter=LayoutTransformTest*:"
                             "LayoutConversionLayerTest/0*:LayoutConversionLayerTest/1*"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=300, env={**os.environ, "GLOG_minloglevel": "2"})
    assert layout.returncode == 0, layout.stdout[-4000:]
    assert "[  PASSED  ] 5 tests." in layout.stdout, layout.stdout[-4000:]

    # 0006: caffe time's whole iterations (CPU mode), as ucudnn reproduce reads them
    from ucudnn.caffe.log import parse_caffe_time
    timed = subprocess.run([str(tool), "time", "-model", str(small), "-iterations", "3"],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300,
                           env={**os.environ, "GLOG_minloglevel": "0"})
    assert timed.returncode == 0, timed.stdout[-4000:]
    t = parse_caffe_time(timed.stdout)
    assert t.timing == "whole iterations" and len(t.whole_iteration_ms) == 3, timed.stdout[-4000:]
    assert all(ms > 0 for ms in t.whole_iteration_ms), t.whole_iteration_ms

    # 0011: pycaffe's blob layouts, with the Python pycaffe was built for (CPU mode; the
    # upstream-style test builds a net whose pooling runs NHWC and reads its blobs)
    pycaffe = CAFFE_ROOT / "src" / "python"
    if list((pycaffe / "caffe").glob("_caffe*.so")):
        cache = (build / "CMakeCache.txt").read_text()
        python = re.search(r"^PYTHON_EXECUTABLE:FILEPATH=(.+)$", cache, re.M).group(1)
        runtime = subprocess.run([python, "-c", "import skimage, google.protobuf"],
                                 capture_output=True, text=True)
        assert runtime.returncode == 0, (
            f"pycaffe's runtime is missing for {python} (bash scripts/caffe_deps.sh "
            f"--with-pycaffe-runtime): {runtime.stderr[-500:]}")
        blobs = subprocess.run([python, "-m", "unittest", "-v", "caffe.test.test_net_layout"],
                               cwd=pycaffe, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=300,
                               env={**os.environ, "GLOG_minloglevel": "2",
                                    "PYTHONPATH": str(pycaffe)})
        assert blobs.returncode == 0, blobs.stdout[-4000:]
        assert "Ran 2 tests" in blobs.stdout and blobs.stdout.rstrip().endswith("OK"), \
            blobs.stdout[-4000:]
