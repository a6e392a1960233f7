"""The constants the core and the tables use agree with the cuDNN headers it was built with,
and the C API header agrees with the Python side."""
import re
from pathlib import Path

import pytest

from ucudnn import config
from ucudnn.vocab import (ALGO_NAMES, DTYPES, MATH_MODES, OPTIMIZER_CODES, POLICY_CODES,
                          NUMERICAL_NOTES, WINOGRAD_NOTES, Status)


def _header_text(name):
    for d in config.build_config()["include_dirs"]:
        p = Path(d) / name
        if p.exists():
            return p.read_text()
    pytest.fail(f"{name} not found in the core's include dirs {config.build_config()['include_dirs']}")


def _enum_values(text):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(\w+)\s*=\s*(\d+)\b", text)}


def test_dtype_and_math_enums_match_cudnn():
    values = _enum_values(_header_text("cudnn_graph.h"))
    for name, code in {"float32": "CUDNN_DATA_FLOAT", "float64": "CUDNN_DATA_DOUBLE",
                       "float16": "CUDNN_DATA_HALF", "bfloat16": "CUDNN_DATA_BFLOAT16"}.items():
        assert DTYPES[name][0] == values[code], name
    for name, code in {"default": "CUDNN_DEFAULT_MATH", "tensor_op": "CUDNN_TENSOR_OP_MATH",
                       "tensor_op_allow_conversion": "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION",
                       "fma": "CUDNN_FMA_MATH"}.items():
        assert MATH_MODES[name] == values[code], name
    assert values["CUDNN_STATUS_SUCCESS"] == 0
    assert [values[f"CUDNN_NUMERICAL_NOTE_{n}"] for n in NUMERICAL_NOTES] == list(
        range(len(NUMERICAL_NOTES)))
    winograd = sum(1 << values[f"CUDNN_NUMERICAL_NOTE_{n}"] for n in (
        "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13"))
    assert WINOGRAD_NOTES == winograd


def test_algorithm_counts_match_tables():
    """The shipped tables only name algorithms that exist in this cuDNN."""
    from importlib import resources
    from ucudnn.plan.table import read_table
    values = _enum_values(_header_text("cudnn_ops.h"))
    counts = {"fwd": values["CUDNN_CONVOLUTION_FWD_ALGO_COUNT"],
              "bwd_data": values["CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT"],
              "bwd_filter": values["CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT"]}
    assert counts == {"fwd": 8, "bwd_data": 6, "bwd_filter": 7}
    prefix = {"fwd": "CUDNN_CONVOLUTION_FWD_ALGO_", "bwd_data": "CUDNN_CONVOLUTION_BWD_DATA_",
              "bwd_filter": "CUDNN_CONVOLUTION_BWD_FILTER_"}
    for op, names in ALGO_NAMES.items():
        assert len(names) == counts[op], op
        for i, name in enumerate(names):
            full = prefix[op] + (name if name.startswith("ALGO_") else
                                 ("ALGO_" if op != "fwd" else "") + name)
            assert values[full] == i, full
    for net in ("alexnet", "resnet18"):
        with resources.as_file(resources.files("ucudnn") / "data" / "h200" / f"{net}_bench.csv") as p:
            for row in read_table(p):
                assert 0 <= row.algo < counts[row.op], row


def test_c_api_enums_match_python():
    text = (Path(config.get_include()) / "ucudnn_types.h").read_text()
    values = _enum_values(text)
    assert {v: k for k, v in POLICY_CODES.items()} == {
        "undivided": values["UCUDNN_UNDIVIDED"], "powerOfTwo": values["UCUDNN_POWER_OF_TWO"],
        "all": values["UCUDNN_ALL"]}
    assert OPTIMIZER_CODES == {values["UCUDNN_DP"]: "dp", values["UCUDNN_ILP"]: "ilp",
                               values["UCUDNN_SHARED"]: "shared"}
    assert {s.name: int(s) for s in Status} == {
        n: values["UCUDNN_" + ("OK" if n == "OK" else "ERR_" + n)] for n in Status.__members__}
    assert (values["UCUDNN_FWD"], values["UCUDNN_BWD_DATA"], values["UCUDNN_BWD_FILTER"]) == (0, 1, 2)


def test_core_imports_without_gpu():
    """Building and importing need no GPU; only GPU calls fail, with a clear error."""
    from ucudnn import _core
    from ucudnn.measure import bench
    assert _core.cudnn_version() >= 90000
    if _core.device_count() == 0:
        with pytest.raises(bench.NoGpuError, match="no CUDA device"):
            bench.device_info()


def test_the_fake_core_mirrors_the_core_s_constants():
    """The CPU tests' fake core (tests/support/fake_core.py) gives what scripts read of the
    core's module, with the core's values."""
    from fake_core import FakeCore
    from ucudnn import _core
    assert FakeCore.GRAPH_CONFIGS_DEFAULT == _core.GRAPH_CONFIGS_DEFAULT


# the compiled modules of the core, one per responsibility (setup.py's CORE_MODULES less the
# C API), in the order ucudnn._core's docstring lists them
CORE_PARTS = ("_device", "_timing", "_legacy", "_graph", "_check", "_bench", "_kernel", "_run")


def test_core_imports_only_the_vocabulary(tmp_path):
    """Imports run one way: ucudnn._core needs only its compiled parts and ucudnn.vocab; the C
    API (ucudnn._capi) sits on top of the runtime. (Run outside the checkout: the installed
    package.)"""
    import subprocess
    import sys
    code = ("import sys, ucudnn._core as c, ucudnn.vocab as v; "
            "print(sorted(m for m in sys.modules if m.startswith('ucudnn'))); "
            "print(c.OPS is v.OPS, hasattr(c, '_DTYPES'), hasattr(c, '_MATH')); "
            "import ucudnn._capi; print('ucudnn.measure.runtime' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    lines = out.stdout.splitlines()
    assert lines[0] == str(sorted(["ucudnn", "ucudnn._core", "ucudnn.vocab"]
                                  + [f"ucudnn.{m}" for m in CORE_PARTS]))
    assert lines[1:] == ["True False False", "True"]


@pytest.mark.parametrize("part", CORE_PARTS + ("_capi",))
def test_each_core_module_imports_first(tmp_path, part):
    """The core's modules cimport one another in a circle (Kernel's methods call the modules
    that take a Kernel): each imports in a fresh interpreter before any other, since only
    ucudnn._device and ucudnn._timing, outside the circle, are imported at Python level."""
    import subprocess
    import sys
    subprocess.run([sys.executable, "-c", f"import ucudnn.{part}"], check=True, cwd=tmp_path)


def test_setup_builds_every_core_module():
    """setup.py builds each .pyx of cython/ucudnn/ and nothing else, and every .pyx beside
    ucudnn._core and ucudnn._capi has its .pxd of declarations."""
    import importlib.util
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("_ucudnn_setup", root / "setup.py")
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)
    sources = sorted(p.stem for p in (root / "cython" / "ucudnn").glob("*.pyx"))
    assert sorted(setup_py.CORE_MODULES) == sources
    assert sorted(CORE_PARTS + ("_capi", "_core")) == sources
    for part in CORE_PARTS:
        assert (root / "cython" / "ucudnn" / f"{part}.pxd").is_file(), part


def test_c_api_maps_errors_to_status_codes():
    """Note [C API errors]: the status comes from ucudnn's error classes, never UCUDNN_OK, and
    the message is recorded even when composing it fails."""
    from ucudnn import _capi, _core
    from ucudnn.vocab import InputError, PlanError, UcudnnError

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no message")

    class UnprintableOwn(InputError):
        def __str__(self):
            raise RuntimeError("no message")

    class BadStatus(UcudnnError):
        status = Status.OK          # never returned as success

    cases = [
        (InputError("layer 'c1': field 'pad_h': must be >= 0"), Status.INVALID,
         "layer 'c1': field 'pad_h': must be >= 0"),
        (PlanError("layer 'c1': no plan"), Status.PLAN, "layer 'c1': no plan"),
        (_core.CudnnError("cudnnFoo: CUDNN_STATUS_BAD_PARAM", 3), Status.CUDNN, "cudnnFoo"),
        (_core.CudaError("cudaMalloc: out of memory", 2), Status.CUDA, "cudaMalloc"),
        (ValueError("internal"), Status.PYTHON, "ValueError: internal"),
        (TypeError("internal"), Status.PYTHON, "TypeError: internal"),
        (KeyError("k"), Status.PYTHON, "KeyError: 'k'"),
        (Unprintable(), Status.PYTHON, "could not be composed"),
        (UnprintableOwn(), Status.INVALID, "could not be composed"),
        (BadStatus("odd"), Status.PYTHON, "odd"),
    ]
    for exc, status, text in cases:
        got, message = _capi._report(exc)
        assert got == status, (exc, got)
        assert text in message, (exc, message)
    assert issubclass(_core.CudnnError, UcudnnError) and _core.CudnnError.status == Status.CUDNN
    assert issubclass(_core.CudaError, UcudnnError) and _core.CudaError.status == Status.CUDA


def test_kernel_validation_names_the_field():
    """Kernel's argument checks run before any CUDA call and raise InputError naming the field."""
    from ucudnn import _core
    from ucudnn.plan.conv import ConvShape
    from ucudnn.vocab import InputError
    shape = ConvShape(3, 8, 8, 4, 3, 3)
    for kwargs, field in ((dict(op="conv"), "op"), (dict(dtype="int8"), "dtype"),
                          (dict(math="tf32"), "math"), (dict(n=0), "n"),
                          (dict(instances=0), "instances")):
        args = dict(op="fwd", n=4, dtype="float32", math="default", name="c1", instances=1)
        args.update(kwargs)
        with pytest.raises(InputError, match=rf"layer 'c1': field '{field}'"):
            _core.Kernel(shape, args["op"], args["n"], args["dtype"], args["math"], args["name"],
                         args["instances"])


def test_thread_handle_stats_without_gpu():
    """Note [Thread handles]: the per-thread handle table is created on first use only."""
    from ucudnn import _core
    stats = _core.thread_handle_stats()
    assert set(stats) == {"on_thread", "created_on_thread", "created", "destroyed"}
    if _core.device_count() == 0:
        assert stats["on_thread"] == stats["created_on_thread"] == 0


def test_one_benchmark_lock_per_device():
    from ucudnn import _core
    assert _core._device_lock(0) is _core._device_lock(0)
    assert _core._device_lock(1) is not _core._device_lock(0)


def test_graph_results_are_compared_in_each_dtype():
    """Note [Graph results checked]: the host comparison reads float32, float64, float16 and
    bfloat16 (the high half of a float32) as the GPU wrote them, and a NaN fails."""
    np = pytest.importorskip("numpy")
    from ucudnn import _core
    ref = np.array([1.0, -2.0, 0.5, 4.0, 6.1e-05, -3.0e-07])
    got = ref * (1 + 1e-3)
    for dtype, np_type in (("float32", np.float32), ("float64", np.float64),
                           ("float16", np.float16)):
        err = _core.relative_error(got.astype(np_type).tobytes(),
                                   ref.astype(np_type).tobytes(), dtype)
        assert err == pytest.approx(np.abs(got.astype(np_type).astype(np.float64)
                                           - ref.astype(np_type)).max() / 4.0, rel=1e-6)
        assert 0 < err < 2e-3, dtype
    bf = lambda a: (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    assert _core.relative_error(bf(ref * 1.02), bf(ref), "bfloat16") == pytest.approx(
        0.02, abs=0.01)
    nan = ref.copy()
    nan[2] = np.nan
    assert _core.relative_error(nan.tobytes(), ref.tobytes(), "float64") == float("inf")
    half_nan = np.full(3, 0xFFFF, np.uint16).tobytes()    # what the check's fill leaves
    assert _core.relative_error(half_nan, bytes(6), "float16") == float("inf")
    # a half-precision result against a float32 reference (Note [Graph results checked])
    half = np.array([1.0, 2.0, 3.0], np.float16)
    exact = np.array([1.0, 2.0, 3.001], np.float32)
    assert _core.relative_error(half.tobytes(), exact.tobytes(), "float16", "float32") == \
        pytest.approx(0.001 / 3.001, rel=1e-4)
    with pytest.raises(_core.InputError, match="relative_error"):
        _core.relative_error(b"1234", b"12", "float32")
    with pytest.raises(_core.InputError, match="relative_error"):
        _core.relative_error(half.tobytes(), half.tobytes(), "float16", "float32")
    assert _core.check_tolerance("float32", "fma") < _core.check_tolerance("float32", "default")


def test_benchmark_data_is_random_in_every_dtype():
    """The benchmark's buffers (DeviceBuffer.fill_random, Kernel.benchmark) hold ordinary
    random numbers in [-1, 1) in each dtype, not a constant: float16 and bfloat16 round the
    float32 values toward zero."""
    np = pytest.importorskip("numpy")
    from ucudnn import _core
    n = 4096
    f32 = np.frombuffer(_core.random_values(n, 4, 7), np.float32)
    f64 = np.frombuffer(_core.random_values(n, 8, 7), np.float64)
    assert np.array_equal(f32.astype(np.float64), f64)
    assert -1.0 <= f32.min() < -0.9 and 0.9 < f32.max() < 1.0
    assert len(np.unique(f32)) > n * 0.99
    half = np.frombuffer(_core.random_values(n, 2, 7), np.float16).astype(np.float64)
    bf = (np.frombuffer(_core.random_values(n, 2, 7, True), np.uint16).astype(np.uint32)
          << 16).view(np.float32).astype(np.float64)
    for got, ulp in ((half, 2.0 ** -10), (bf, 2.0 ** -7)):
        assert np.all(np.isfinite(got)) and np.all(np.abs(got) <= np.abs(f32))
        normal = np.abs(f32) >= 2.0 ** -14
        assert np.all(np.abs(f32 - got)[normal] <= ulp * np.abs(f32)[normal])
        assert len(np.unique(got)) > 1000
    assert _core.random_values(4, 2, 3) != _core.random_values(4, 2, 4)
    with pytest.raises(_core.InputError, match="elem_size"):
        _core.random_values(4, 3)
