"""The C API from C++: a host program that embeds Python, as Caffe does.

Compiling and linking it needs only the toolkit (CI checks that); running it needs a GPU.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HOST_SRC = Path(__file__).parent / "cpp" / "embed_host.cpp"


def _config():
    from ucudnn import config     # the installed package, with its compiled core
    return config.cflags(), config.libs()


@pytest.fixture(scope="module")
def embed_host(tmp_path_factory):
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        pytest.skip("no C++ compiler")
    cflags, libs = _config()
    exe = tmp_path_factory.mktemp("embed") / "embed_host"
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", str(HOST_SRC), "-o", str(exe), *cflags, *libs,
           "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"compile failed:\n{' '.join(cmd)}\n{proc.stderr}"
    return exe


def test_embed_host_compiles_and_links(embed_host):
    assert embed_host.exists() and os.access(embed_host, os.X_OK)


@pytest.mark.gpu
def test_embed_host_runs_two_threads(embed_host, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    env = dict(os.environ)
    # the embedded interpreter must find the same ucudnn as this test process
    import ucudnn
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(ucudnn.__file__).parent.parent)] + [p for p in sys.path if p])
    proc = subprocess.run([str(embed_host), str(tmp_path / "cache.sqlite")], capture_output=True,
                          text=True, env=env, timeout=600)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 of 2 threads matched" in proc.stdout
    assert proc.stdout.count(": bad input rejected") == 2
    # ucudnn_plan_options.engines reaches the planner: graph engine configs, same results
    assert proc.stdout.count(": graph plan [") == 2
    assert "pad_h" in proc.stdout
    # repeated planning calls from threads Python did not create: one cuDNN handle per thread
    assert proc.stdout.count("planning calls, 1 cuDNN handle") == 2
    # ucudnn_kernel_run failures reach ucudnn_last_error() like planning failures
    assert proc.stdout.count("run error reported") == 2
    # one net per thread through ucudnn_net_plan: ILP and the shared arena, a grouped layer
    assert "net planned (ILP): 5 kernels" in proc.stdout
    assert "net planned (SHARED): 5 kernels" in proc.stdout
    assert proc.stdout.count("net bad input rejected") == 2


#: The C API (cython/ucudnn.h): one call plans a whole net, the rest are its sizes and kernels.
API = ("ucudnn_net_plan", "ucudnn_net_workspace_size", "ucudnn_net_arena_size",
       "ucudnn_net_predicted_ms", "ucudnn_net_destroy", "ucudnn_kernel_create",
       "ucudnn_kernel_replan", "ucudnn_kernel_run", "ucudnn_kernel_describe",
       "ucudnn_kernel_destroy", "ucudnn_kernel_workspace_size", "ucudnn_kernel_predicted_ms",
       "ucudnn_last_error")


def test_c_api_header_imports_capi():
    """ucudnn.h loads the C API from ucudnn._capi through the header Cython generates for it,
    and `ucudnn config --cflags` finds both headers."""
    from ucudnn import config
    inc = Path(config.get_include())
    header = (inc / "ucudnn.h").read_text()
    assert '#include "_capi_api.h"' in header and "import_ucudnn___capi()" in header
    api = (inc / "_capi_api.h").read_text()
    assert 'PyImport_ImportModule("ucudnn._capi")' in api
    for name in API:
        assert f'"{name}"' in api, name
    for gone in ("ucudnn_plan_network", "ucudnn_prefetch_net"):
        assert gone not in api, gone
    assert (inc / "_capi.h").exists()
    assert f"-I{inc}" in config.cflags()


def _c_api():
    """The C API's functions from ucudnn._capi's capsules (what ucudnn_import() loads)."""
    import ctypes
    from ucudnn import _capi
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

    def fn(name, restype, *argtypes):
        cap = _capi.__pyx_capi__[name]
        # CFUNCTYPE releases the GIL during the call, as a C++ host calls the C API
        return ctypes.CFUNCTYPE(restype, *argtypes)(get_ptr(cap, get_name(cap)))
    return fn


def test_c_api_functions_are_the_header_s():
    """ucudnn._capi exports exactly the functions cython/ucudnn.h documents."""
    from ucudnn import _capi
    assert set(_capi.__pyx_capi__) == set(API)


def test_c_api_rejects_bad_input_without_gpu():
    """The C API's own input checks run before any CUDA call: a status code and a message
    naming the field, no Python exception, no crash on NULL."""
    import ctypes
    from ucudnn.vocab import Status

    class ConvParams(ctypes.Structure):       # ucudnn_conv_params (ucudnn_types.h)
        _fields_ = [(f, ctypes.c_int) for f in (
            "op", "dtype", "math", "n", "c", "h", "w", "k", "r", "s", "pad_h", "pad_w",
            "stride_h", "stride_w", "dil_h", "dil_w", "groups")] + [
            ("x_strides", ctypes.c_int * 4), ("y_strides", ctypes.c_int * 4),
            ("name", ctypes.c_char_p), ("instances", ctypes.c_int), ("layout", ctypes.c_int)] + [
            (f, ctypes.c_int) for f in ("d", "t", "pad_d", "stride_d", "dil_d")]

    class PlanOptions(ctypes.Structure):      # ucudnn_plan_options
        _fields_ = [("policy", ctypes.c_int), ("optimizer", ctypes.c_int),
                    ("micro_batch_sizes", ctypes.POINTER(ctypes.c_int)),
                    ("n_micro_batch_sizes", ctypes.c_int), ("workspace_limit", ctypes.c_size_t),
                    ("repeats", ctypes.c_int), ("cache_path", ctypes.c_char_p),
                    ("exclude_winograd", ctypes.c_int), ("engines", ctypes.c_int)]

    fn = _c_api()
    create = fn("ucudnn_kernel_create", ctypes.c_int, ctypes.POINTER(ConvParams),
                ctypes.POINTER(PlanOptions), ctypes.POINTER(ctypes.c_void_p))
    run = fn("ucudnn_kernel_run", ctypes.c_int, *([ctypes.c_void_p] * 8), ctypes.c_size_t)
    replan = fn("ucudnn_kernel_replan", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    last_error = fn("ucudnn_last_error", ctypes.c_char_p)

    def params(**kw):
        p = ConvParams(op=0, dtype=0, math=3, n=8, c=16, h=14, w=14, k=16, r=3, s=3, pad_h=1,
                       pad_w=1, stride_h=1, stride_w=1, dil_h=1, dil_w=1, groups=1,
                       name=b"capi_conv", instances=0)
        for k, v in kw.items():
            setattr(p, k, v)
        return p

    opts = PlanOptions(policy=1, optimizer=0, workspace_limit=8 << 20, repeats=1)
    for kw, field in ((dict(op=7), "'op'"), (dict(dtype=42), "'dtype'"), (dict(math=9), "'math'"),
                      (dict(pad_h=-1), "pad_h"), (dict(groups=5), "groups"),
                      (dict(layout=2), "'layout'"), (dict(stride_d=2), "'stride_d'"),
                      (dict(d=4), "'t'"), (dict(d=4, t=3, stride_d=0), "'stride_d'"),
                      (dict(d=4, t=3, stride_d=1, dil_d=1,
                            x_strides=(ctypes.c_int * 4)(1, 1, 1, 1)), "'x_strides'")):
        out = ctypes.c_void_p(1)
        assert create(ctypes.byref(params(**kw)), ctypes.byref(opts), ctypes.byref(out)) == \
            Status.INVALID, kw
        assert out.value is None, kw          # *out is cleared on failure
        message = last_error().decode()
        assert "capi_conv" in message and field in message, message
    bad_engines = PlanOptions(policy=1, optimizer=0, workspace_limit=8 << 20, repeats=1,
                              engines=4)
    assert create(ctypes.byref(params()), ctypes.byref(bad_engines),
                  ctypes.byref(ctypes.c_void_p(1))) == Status.INVALID
    message = last_error().decode()
    assert "capi_conv" in message and "engines" in message and "UCUDNN_ENGINES_BOTH" in message, \
        message
    assert create(None, ctypes.byref(opts), None) == Status.INVALID
    assert b"NULL" in last_error()
    assert replan(None, 0) == Status.INVALID
    assert run(None, None, None, None, None, None, None, None, 0) == Status.INVALID
    assert b"ucudnn_kernel_run" in last_error()


def test_net_plan_rejects_bad_input_without_gpu():
    """ucudnn_net_plan checks the layers and both ucudnn_param texts before any CUDA call: a
    status code and a message naming the net, the layer and the field; *out stays NULL."""
    import ctypes
    from ucudnn.vocab import Status

    class OpPlan(ctypes.Structure):           # ucudnn_op_plan (ucudnn_types.h)
        _fields_ = [("kernel", ctypes.c_void_p), ("arena", ctypes.c_int),
                    ("offset", ctypes.c_size_t), ("stride", ctypes.c_size_t),
                    ("bytes", ctypes.c_size_t)]

    class NetLayer(ctypes.Structure):         # ucudnn_net_layer
        _fields_ = [("name", ctypes.c_char_p)] + [(f, ctypes.c_int) for f in (
            "dtype", "n", "c", "h", "w", "k", "r", "s", "pad_h", "pad_w", "stride_h",
            "stride_w", "dil_h", "dil_w", "groups", "backward_data")] + [
            ("ucudnn_param", ctypes.c_char_p), ("layout", ctypes.c_int)] + [
            (f, ctypes.c_int) for f in ("d", "t", "pad_d", "stride_d", "dil_d")] + [
            ("plan", OpPlan * 3)]

    fn = _c_api()
    plan = fn("ucudnn_net_plan", ctypes.c_int, ctypes.POINTER(NetLayer), ctypes.c_int,
              ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))
    last_error = fn("ucudnn_last_error", ctypes.c_char_p)

    def layer(**kw):
        l = NetLayer(name=b"conv2", dtype=0, n=8, c=16, h=14, w=14, k=32, r=3, s=3, pad_h=1,
                     pad_w=1, stride_h=1, stride_w=1, dil_h=1, dil_w=1, groups=2,
                     backward_data=1, ucudnn_param=None)
        for k, v in kw.items():
            setattr(l, k, v)
        return l

    cases = [([layer(name=None)], b"policy: ALL", "has no name"),
             ([layer(dtype=42)], b"policy: ALL", "'dtype'"),
             ([layer(groups=3)], b"policy: ALL", "groups"),
             ([layer(), layer()], b"policy: ALL", "given twice"),
             ([layer(ucudnn_param=b"policy: FOO")], None, "ucudnn_param"),
             ([layer(ucudnn_param=b"optimizer: SHARED")], b"optimizer: ILP", "optimizer"),
             ([layer()], b"workspace_limit: -1", "workspace_limit"),
             ([layer()], None, "no ucudnn_param"),
             ([layer(layout=2)], b"policy: ALL", "'layout'"),
             ([layer(dil_d=2)], b"policy: ALL", "'dil_d'"),
             ([layer(d=4, t=3, stride_d=1, dil_d=1, pad_d=-1)], b"policy: ALL", "'pad_d'"),
             ([layer(d=2, t=3, stride_d=1, dil_d=1)], b"policy: ALL", "along D"),
             ([layer(layout=1)], b"policy: ALL", "a grouped layer runs NCHW only"),
             ([layer(ucudnn_param=b"layout: NHWC")], b"policy: ALL",
              "'ucudnn_param.layout' is net-wide")]
    for layers, net_param, field in cases:
        arr = (NetLayer * len(layers))(*layers)
        out = ctypes.c_void_p(1)
        assert plan(arr, len(layers), b"bad_net", net_param, 0, ctypes.byref(out)) == \
            Status.INVALID, field
        assert out.value is None, field
        message = last_error().decode()
        assert field in message, (field, message)
        if field not in ("has no name", "'dtype'"):
            assert "conv2" in message, message
    assert plan(None, 0, b"bad_net", None, 0, ctypes.byref(ctypes.c_void_p())) == Status.INVALID
    assert b"bad arguments" in last_error()
