"""Fixtures shared by test files, and the test tiers.

Note [Test tiers]
    ``pytest`` (the README's command) runs the CPU tier: planners, cache, prototxt, CLI,
    reproduce in predict mode, the C API header compiling -- about a minute on 2 cores.
    ``pytest --caffe-build -m caffe_build`` builds BVLC Caffe with the patch series (about 35
    minutes on 2 cores; CI runs it explicitly); without ``--caffe-build`` those tests are
    skipped with that command as the reason, and with it a missing build dependency is named
    with the command that installs it. ``pytest -m gpu --require-gpu`` is the GPU tier of a GPU
    host: there a GPU test that skips (no GPU, no torch, no built Caffe) fails instead, as
    does a GPU module (``*_gpu.py``) skipped as a whole, so
    that a GPU run cannot pass by testing nothing; without ``--require-gpu`` skipped GPU tests
    are listed in a section of their own at the end.
"""
import functools
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

CAFFE_BUILD_TOOLS = {
    "cmake": "apt-get install cmake (or: bash .ci/caffe_deps.sh)",
    "protoc": "apt-get install protobuf-compiler (or: bash .ci/caffe_deps.sh)",
    "make": "apt-get install build-essential (or: bash .ci/caffe_deps.sh)",
}
CAFFE_BUILD_HEADERS = {
    "glog/logging.h": "libgoogle-glog-dev", "gflags/gflags.h": "libgflags-dev",
    "google/protobuf/message.h": "libprotobuf-dev", "boost/thread.hpp": "libboost-thread-dev",
    "cblas.h": "libopenblas-dev",
}


def pytest_addoption(parser):
    parser.addoption("--caffe-build", action="store_true",
                     help="run the tests marked caffe_build (builds BVLC Caffe, ~35 min)")
    parser.addoption("--require-gpu", action="store_true",
                     help="fail GPU tests that would be skipped (for GPU hosts)")


def _caffe_build_missing():
    """The first missing build dependency of Caffe and how to install it, or None."""
    for tool, how in CAFFE_BUILD_TOOLS.items():
        if shutil.which(tool) is None:
            return f"{tool} not found: {how}"
    roots = [Path("/usr/include"), Path("/usr/include/x86_64-linux-gnu"),
             Path("/usr/include/openblas"), Path("/usr/local/include")]
    for header, pkg in CAFFE_BUILD_HEADERS.items():
        if not any((r / header).exists() for r in roots):
            return f"{header} not found: apt-get install {pkg} (or: bash .ci/caffe_deps.sh)"
    return None


def pytest_collection_modifyitems(config, items):
    if config.getoption("--caffe-build"):
        missing = _caffe_build_missing()
        reason = f"Caffe build dependency missing: {missing}" if missing else None
    else:
        reason = ("builds BVLC Caffe (~35 min on 2 cores): bash .ci/caffe_deps.sh, then "
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
        item.config.stash.setdefault(_GPU_SKIPS, []).append((item.nodeid, reason))
        if item.config.getoption("--require-gpu"):
            rep.outcome = "failed"
            rep.longrepr = f"GPU test skipped under --require-gpu: {reason}"


_GPU_SKIPS = pytest.StashKey()


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
        if collector.config.getoption("--require-gpu"):
            rep.outcome = "failed"
            rep.longrepr = f"GPU module skipped under --require-gpu: {reason}"


def pytest_terminal_summary(terminalreporter, config):
    skips = config.stash.get(_GPU_SKIPS, [])
    if not skips or config.getoption("--require-gpu"):
        return
    reasons = {}
    for _, reason in skips:
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.section("GPU tier NOT run", sep="!", yellow=True, bold=True)
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{n} GPU test(s) skipped: {reason}")
    terminalreporter.write_line("on a GPU host: pip install '.[gpu]' and pytest -m gpu "
                                "--require-gpu")


REPO = Path(__file__).resolve().parents[1]
ORIG = "caffe_1.0.0+git20180821.99bd997.orig.tar.gz"


@pytest.fixture(scope="session")
def patched_caffe_source(tmp_path_factory):
    """Caffe's pinned source with caffe_patch/ applied (scripts/build_caffe.sh --skip-build),
    from an already verified tarball where there is one. Skips where the source cannot be had."""
    from ucudnn.caffe.protoc import find_protoc
    if find_protoc() is None:       # the tests compile its caffe.proto
        pytest.skip("no protobuf compiler: protoc (.ci/caffe_deps.sh installs "
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


# -- a GPU, or a stand-in for the GPU module (in-process: the real one needs a GPU) ---------

@functools.lru_cache(maxsize=None)
def _gpu_visible() -> bool:
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
    embedded interpreter this process's ``sys.path`` (the same ucudnn), a fresh benchmark cache
    unless ``$UCUDNN_CACHE`` names one, and glog on stderr. Skips without a build or a GPU."""
    exe = CAFFE_BUILD / "tools" / "caffe"
    if not exe.is_file():
        pytest.skip(f"no patched Caffe at {exe} (scripts/build_caffe.sh builds it)")
    if not gpu_visible:
        pytest.skip("no GPU visible")
    import ucudnn
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(ucudnn.__file__).parent.parent)]
                                        + [p for p in sys.path if p])
    env.setdefault("UCUDNN_CACHE", str(tmp_path_factory.mktemp("cache") / "bench.sqlite"))
    env["GLOG_logtostderr"] = "1"
    return {"bin": CAFFE_BUILD / "tools", "build": CAFFE_BUILD, "env": env}


@pytest.fixture
def no_gpu():
    """Skips where a GPU is visible: the test is about the behaviour without one."""
    if _gpu_visible():
        pytest.skip("a GPU is visible: this tests the behaviour without one")


class _FakeBench:
    """Stands in for ucudnn.bench: a 'GPU' whose fast algorithm needs 1 MiB per sample."""

    class NoGpuError(RuntimeError):
        pass

    def __init__(self):
        self.calls = []
        self.dtypes = []
        self.gpus = ["Fake GPU", "Fake GPU"]    # the visible devices' models
        self.call_devices = []                  # the current device of each benchmark call
        self._current = threading.local()

    TIME_ITERS = 5
    FIND_REPEATS = 1

    def device_info(self):
        return {"gpu": self.gpus[self.current_device()], "cudnn_version": 91400,
                "compute_capability": "9.0"}

    def current_device(self):
        return getattr(self._current, "device", 0)

    def set_device(self, device):
        """ucudnn.measure.bench.set_device: per thread, like CUDA's current device."""
        if not 0 <= device < len(self.gpus):
            raise RuntimeError(f"cudaSetDevice: invalid device ordinal {device}")
        self._current.device = device

    def core(self):
        """A core whose Kernel is the stand-in of tests/fake_kernel.py (what the runtime
        plans; its benchmarks come from :meth:`measure`)."""
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        try:
            from fake_kernel import FakeKernel
        finally:
            sys.path.pop(0)
        gpus = self.gpus
        return type("FakeCore", (), {"Kernel": FakeKernel,
                                     "device_count": staticmethod(lambda: len(gpus))})

    def measure(self, kern, sizes, *, repeats=3, cache_path=None, workspace_cap=None,
                progress=None, time_iters=5, cache=None):
        """ucudnn.measure.bench.measure: through the real cache, timed by
        :meth:`benchmark_kernel`."""
        from ucudnn.measure.cache import BenchCache
        key = self.cache_key(kern.shape, kern.op, kern.math, kern.dtype,
                             workspace_cap=workspace_cap)

        def fill(c):
            return c.fill(key, sizes, lambda missing: self.benchmark_kernel(
                kern.shape, kern.op, kern.n, missing, repeats=repeats, math=kern.math,
                dtype=kern.dtype, workspace_cap=workspace_cap, progress=progress), repeats)
        if cache is not None:
            return fill(cache)
        with BenchCache(cache_path) as c:
            return fill(c)

    def cache_key(self, shape, op, math="default", dtype="float32", *, workspace_cap=None,
                  time_iters=5):
        from ucudnn.measure.cache import DEFAULT_WORKSPACE_CAP, CacheKey
        return CacheKey(self.device_info()["gpu"], 91400, dtype, math, op, shape,
                        DEFAULT_WORKSPACE_CAP if workspace_cap is None else workspace_cap)

    def benchmark_kernel(self, shape, op, n, sizes, *, repeats=3, math="default",
                         dtype="float32", workspace_cap=None, progress=None, name=None,
                         time_iters=5):
        from ucudnn.plan.table import AlgoPerf
        self.calls.append((shape, op, n, list(sizes), repeats, math, workspace_cap))
        self.dtypes.append(dtype)
        self.call_devices.append(self.current_device())
        out = {}
        for b in sizes:
            out[b] = [AlgoPerf(0, 1.0 * b, 0), AlgoPerf(1, 0.2 * b + 0.05, b << 20)]
            if progress is not None:
                progress(b)
        return out


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    import ucudnn.measure
    fake = _FakeBench()
    monkeypatch.setitem(sys.modules, "ucudnn.measure.bench", fake)
    monkeypatch.setattr(ucudnn.measure, "bench", fake, raising=False)
    monkeypatch.setenv("UCUDNN_CACHE", str(tmp_path / "default.sqlite"))
    return fake


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
