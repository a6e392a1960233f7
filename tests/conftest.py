"""Fixtures shared by test files, and the test tiers.

Note [Test tiers]
    ``pytest`` (the README's command) runs the CPU tier: planners, cache, prototxt, CLI,
    reproduce in predict mode, the C API header compiling -- about 80 s on a 2-core machine.
    Where a GPU would measure, the ``fake_core`` fixture stands in for the compiled core
    (tests/support/fake_core.py) and the production code runs unchanged over it.
    ``pytest --caffe-build -m caffe_build`` builds BVLC Caffe with the patch series (about 36
    minutes on 2 cores; CI runs it explicitly); without ``--caffe-build`` those tests are
    skipped with that command as the reason, and with it a missing build dependency is named
    with the command that installs it. ``pytest -m gpu --require-gpu`` is the GPU tier of a GPU
    host: there a GPU test that skips (no GPU, no torch, no built Caffe) fails instead, as
    does a GPU module (``*_gpu.py``) skipped as a whole, so that a GPU run cannot pass by
    testing nothing; without ``--require-gpu`` skipped GPU tests are listed in a section of
    their own at the end. A test that needs several GPUs (``@pytest.mark.gpus(2)``) skips with
    "needs 2 GPUs (found N)" where fewer are visible; ``--require-gpu`` lists it as needing
    more hardware and does not fail it; ``--require-gpus N`` makes every GPU test needing up
    to N GPUs count (it fails if it skips).
"""
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import child_env
import fake_core as fake_core_module

CAFFE_BUILD_TOOLS = {
    "cmake": "apt-get install cmake (or: bash scripts/caffe_deps.sh)",
    "protoc": "apt-get install protobuf-compiler (or: bash scripts/caffe_deps.sh)",
    "make": "apt-get install build-essential (or: bash scripts/caffe_deps.sh)",
}
CAFFE_BUILD_HEADERS = {
    "glog/logging.h": "libgoogle-glog-dev", "gflags/gflags.h": "libgflags-dev",
    "google/protobuf/message.h": "libprotobuf-dev", "boost/thread.hpp": "libboost-thread-dev",
    "cblas.h": "libopenblas-dev",
}


def pytest_addoption(parser):
    parser.addoption("--caffe-build", action="store_true",
                     help="run the tests marked caffe_build (builds BVLC Caffe, ~36 min)")
    parser.addoption("--require-gpu", action="store_true",
                     help="fail GPU tests that would be skipped (for GPU hosts); tests "
                     "needing more GPUs than --require-gpus are listed, not failed")
    parser.addoption("--require-gpus", type=int, default=0, metavar="N",
                     help="fail GPU tests needing up to N GPUs that would be skipped "
                     "(implies --require-gpu)")


def _caffe_build_missing():
    """The first missing build dependency of Caffe and how to install it, or None."""
    for tool, how in CAFFE_BUILD_TOOLS.items():
        if shutil.which(tool) is None:
            return f"{tool} not found: {how}"
    roots = [Path("/usr/include"), Path("/usr/include/x86_64-linux-gnu"),
             Path("/usr/include/openblas"), Path("/usr/local/include")]
    for header, pkg in CAFFE_BUILD_HEADERS.items():
        if not any((r / header).exists() for r in roots):
            return f"{header} not found: apt-get install {pkg} (or: bash scripts/caffe_deps.sh)"
    return None


def _required_gpus(config) -> int:
    """How many GPUs the run requires: GPU tests needing up to that many must not skip."""
    return max(config.getoption("--require-gpus"), 1 if config.getoption("--require-gpu")
               else 0)


def _gpus_needed(item) -> int:
    marker = item.get_closest_marker("gpus")
    return int(marker.args[0]) if marker is not None else 1


@functools.lru_cache(maxsize=None)
def _device_count() -> int:
    """Visible CUDA devices, as the compiled core counts them (0 without it)."""
    try:
        from ucudnn import _core
        return int(_core.device_count())
    except Exception:      # noqa: BLE001 - ImportError, a broken driver, ...
        return 0


def pytest_collection_modifyitems(config, items):
    for item in items:
        need = _gpus_needed(item)
        if need > 1 and _device_count() < need:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPUs (found "
                                                    f"{_device_count()})"))
    if config.getoption("--caffe-build"):
        missing = _caffe_build_missing()
        reason = f"Caffe build dependency missing: {missing}" if missing else None
    else:
        reason = ("builds BVLC Caffe (about 36 min on 2 cores): bash scripts/caffe_deps.sh "
                  "--with-pycaffe-runtime, then "
                  "pytest --caffe-build -m caffe_build")
    if reason:
        for item in items:
            if "caffe_build" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and "gpu" in item.keywords:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        need, required = _gpus_needed(item), _required_gpus(item.config)
        if need > 1 and need > required:
            item.config.stash.setdefault(_MORE_HARDWARE, []).append((item.nodeid, reason))
            return
        item.config.stash.setdefault(_GPU_SKIPS, []).append((item.nodeid, reason))
        if required >= need:
            rep.outcome = "failed"
            rep.longrepr = (f"GPU test skipped under --require-gpu"
                            f"{f's {required}' if need > 1 else ''}: {reason}")


_GPU_SKIPS = pytest.StashKey()
_MORE_HARDWARE = pytest.StashKey()


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A GPU module (``*_gpu.py``) that skips as a whole (no torch, no GPU) counts like its
    skipped tests: listed in the GPU section, or a failure under ``--require-gpu``."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and isinstance(collector, pytest.Module) and collector.path.stem.endswith(
            "_gpu"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        collector.config.stash.setdefault(_GPU_SKIPS, []).append((collector.nodeid, reason))
        if _required_gpus(collector.config):
            rep.outcome = "failed"
            rep.longrepr = f"GPU module skipped under --require-gpu: {reason}"


def _by_reason(skips):
    reasons = {}
    for _, reason in skips:
        reasons[reason] = reasons.get(reason, 0) + 1
    return sorted(reasons.items(), key=lambda kv: -kv[1])


def pytest_terminal_summary(terminalreporter, config):
    skips = config.stash.get(_GPU_SKIPS, [])
    if skips and not _required_gpus(config):
        terminalreporter.section("GPU tier NOT run", sep="!", yellow=True, bold=True)
        for reason, n in _by_reason(skips):
            terminalreporter.write_line(f"{n} GPU test(s) skipped: {reason}")
        terminalreporter.write_line("on a GPU host: pip install '.[gpu]' and pytest -m gpu "
                                    "--require-gpu")
    more = config.stash.get(_MORE_HARDWARE, [])
    if more:
        terminalreporter.section("GPU tests needing more hardware (not run)", sep="!",
                                 yellow=True, bold=True)
        for nodeid, reason in more:
            terminalreporter.write_line(f"{nodeid}: {reason}")
        terminalreporter.write_line("on a host with that many GPUs: pytest -m gpu "
                                    "--require-gpus N")


REPO = Path(__file__).resolve().parents[1]
ORIG = "caffe_1.0.0+git20180821.99bd997.orig.tar.gz"


@pytest.fixture(scope="session")
def patched_caffe_source(tmp_path_factory):
    """Caffe's pinned source with caffe_patch/ applied (scripts/build_caffe.sh --skip-build),
    from an already verified tarball where there is one. Skips where the source cannot be had."""
    from ucudnn.caffe.protoc import find_protoc
    if find_protoc() is None:       # the tests compile its caffe.proto
        pytest.skip("no protobuf compiler: protoc (scripts/caffe_deps.sh installs "
                    "protobuf-compiler) or pip install grpcio-tools")
    prefix = tmp_path_factory.mktemp("caffe")
    args = ["bash", str(REPO / "scripts" / "build_caffe.sh"), "--prefix", str(prefix),
            "--skip-build"]
    for cand in (REPO / "third_party" / "caffe" / "downloads" / ORIG, REPO / ".offline" / ORIG):
        if cand.is_file():
            args += ["--source", str(cand)]
            break
    res = subprocess.run(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=1800)
    if res.returncode != 0 and not (prefix / "pristine" / ".ucudnn-source").exists():
        pytest.skip("could not obtain the pinned Caffe source:\n" + res.stdout[-2000:])
    assert res.returncode == 0, res.stdout[-4000:]
    return prefix / "src"


@pytest.fixture(scope="session")
def patched_caffe_proto(patched_caffe_source):
    """Caffe's caffe.proto with caffe_patch/ applied (all of Caffe's fields, the data layers'
    parameters included): a path for ``--caffe-proto`` / ``$UCUDNN_CAFFE_PROTO``."""
    return patched_caffe_source / "src" / "caffe" / "proto" / "caffe.proto"


# -- a GPU, or a stand-in for the GPU module (in-process: the real one needs a GPU) ---------

@functools.lru_cache(maxsize=None)
def _gpu_visible() -> bool:
    assert not fake_core_module.installed(), "the GPU probe must see the compiled core"
    try:
        from ucudnn.measure.bench import device_info
        device_info()
    except Exception:      # noqa: BLE001 - ImportError, NoGpuError, ...
        return False
    return True


@pytest.fixture(scope="session")
def gpu_visible() -> bool:
    """Whether the compiled core sees a usable GPU."""
    return _gpu_visible()


#: The build of scripts/build_caffe.sh the Caffe GPU tests run (or $UCUDNN_CAFFE_BUILD).
CAFFE_BUILD = Path(os.environ.get("UCUDNN_CAFFE_BUILD",
                                  Path(__file__).resolve().parents[1] / "third_party" / "caffe"
                                  / "build"))


@pytest.fixture(scope="session")
def caffe_tools(tmp_path_factory, gpu_visible):
    """The patched Caffe's tools on a GPU: ``{"bin", "build", "env"}``, ``env`` giving Caffe's
    embedded interpreter the same ucudnn and this environment's packages
    (support/child_env.py), a fresh benchmark cache unless ``$UCUDNN_CACHE`` names one, and
    glog on stderr. Skips without a build or a GPU."""
    exe = CAFFE_BUILD / "tools" / "caffe"
    if not exe.is_file():
        pytest.skip(f"no patched Caffe at {exe} (scripts/build_caffe.sh builds it)")
    if not gpu_visible:
        pytest.skip("no GPU visible")
    env = dict(os.environ)
    env["PYTHONPATH"] = child_env.python_path()
    env.setdefault("UCUDNN_CACHE", str(tmp_path_factory.mktemp("cache") / "bench.sqlite"))
    env["GLOG_logtostderr"] = "1"
    return {"bin": CAFFE_BUILD / "tools", "build": CAFFE_BUILD, "env": env}


@pytest.fixture
def no_gpu():
    """Skips where a GPU is visible: the test is about the behaviour without one."""
    if _gpu_visible():
        pytest.skip("a GPU is visible: this tests the behaviour without one")


@pytest.fixture
def fake_core(monkeypatch, tmp_path):
    """A stand-in for the compiled core (tests/support/fake_core.py): one 'Fake GPU' of the
    two-algorithm model, production code unchanged over it; the default benchmark cache is
    the test's own. Set ``gpus`` or ``model`` before the first device call."""
    core = fake_core_module.install(monkeypatch, fake_core_module.FakeCore())
    monkeypatch.setenv("UCUDNN_CACHE", str(tmp_path / "default.sqlite"))
    yield core
    fake_core_module.forget()


@pytest.fixture
def records_file(tmp_path, monkeypatch):
    """The plan records ($UCUDNN_RECORDS) of this test: a file in its folder."""
    from ucudnn.measure.records import ENV
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv(ENV, str(path))
    return path


@pytest.fixture(autouse=True, scope="session")
def _benchmark_cache_of_the_session(tmp_path_factory):
    """No test reads or writes the user's benchmark cache (~/.cache/ucudnn): unless
    ``$UCUDNN_CACHE`` names one, the session gets its own."""
    if "UCUDNN_CACHE" in os.environ:
        yield
        return
    os.environ["UCUDNN_CACHE"] = str(tmp_path_factory.mktemp("ucudnn-cache") / "bench.sqlite")
    try:
        yield
    finally:
        os.environ.pop("UCUDNN_CACHE", None)
