"""Build the Cython core against CUDA and cuDNN 9: its modules by responsibility (CORE_MODULES,
re-exported by ``ucudnn._core``: kernels, the hot path) and ``ucudnn._capi`` (the C API for C++
hosts; its generated ``_capi_api.h`` is what ``ucudnn.h`` includes).

Which cuDNN (a folder with ``cudnn.h`` and the library): ``CUDNN_ROOT`` (or ``CUDNN_HOME``,
``include/`` and ``lib/`` or ``lib64/``) where set; otherwise the newest of
  1. ``CUDA_HOME`` / ``CUDA_PATH`` / ``/usr/local/cuda`` (cuDNN copied into the toolkit)
  2. the system: ``/usr/include[/x86_64-linux-gnu]``, ``/usr/lib/x86_64-linux-gnu`` (Ubuntu's
     packages keep cuDNN there)
  3. the ``nvidia-cudnn-cu13`` / ``-cu12`` wheel (``site-packages/nvidia/cudnn``)
the first of them on a tie (Note [Which cuDNN]). The core links ``libcudnn.so.9`` by its
versioned name (wheels ship no unversioned link) with an rpath to its folder. Set
``UCUDNN_VERBOSE_BUILD=1`` to print what was found.

Note [Which cuDNN]
    One process holds one ``libcudnn.so.9``: the first one loaded serves every library that
    links the name. So ``_build_config.json`` records the cuDNN the core was built with (its
    headers, library and version), and ``scripts/build_caffe.sh`` builds Caffe's own cuDNN
    layers against the same. PyTorch brings its own cuDNN as the nvidia-cudnn wheel, often
    newer than the system's: on the H200 node 9.19 beside the system's 9.14. The build takes
    the newest it finds, since the graph API's engines improve with each release, and a
    process that imports PyTorch then loads one cuDNN, not two. On the H200 the core's GPU
    tests and Caffe's pass on 9.19, Caffe's weight gradients compared within 1e-4 (Note
    [pycaffe comparisons] in tests/gpu/test_pycaffe_gpu.py; results/h200/cudnn919/).
    ``CUDNN_ROOT`` names one and overrides the choice.
"""
import glob
import json
import os
import re
import shutil
import site
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ARCH_DIRS = ("x86_64-linux-gnu", "aarch64-linux-gnu")


def _cuda_root():
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return "/usr/local/cuda"


def _wheel_roots(package):
    roots = []
    for sp in site.getsitepackages() + [site.getusersitepackages(), sysconfig.get_path("purelib")]:
        d = os.path.join(sp, "nvidia", package)
        if os.path.isdir(d) and d not in roots:
            roots.append(d)
    return roots


def _prefix_candidates(root):
    inc = [os.path.join(root, "include")] + [os.path.join(root, "include", a) for a in ARCH_DIRS]
    inc += glob.glob(os.path.join(root, "targets", "*", "include"))
    lib = [os.path.join(root, d) for d in ("lib64", "lib")]
    lib += [os.path.join(root, "lib", a) for a in ARCH_DIRS]
    lib += glob.glob(os.path.join(root, "targets", "*", "lib"))
    return inc, lib


def _find_all(header, libnames, roots):
    """(include_dir, lib_dir, lib_file) for every root that has the header and a library, in
    the order of ``roots``."""
    found = []
    for root in roots:
        incs, libs = _prefix_candidates(root)
        inc = next((d for d in incs if os.path.isfile(os.path.join(d, header))), None)
        if inc is None:
            continue
        hit = next(((inc, d, name) for d in libs for name in libnames
                    if os.path.exists(os.path.join(d, name))), None)
        if hit and hit not in found:
            found.append(hit)
    return found


def _find(header, libnames, roots):
    """The first of :func:`_find_all`, or None."""
    found = _find_all(header, libnames, roots)
    return found[0] if found else None


def cudnn_version(include_dir):
    """(major, minor, patch) from ``cudnn_version.h`` (cuDNN >= 7.1) or ``cudnn.h``; (0, 0, 0)
    where neither names it."""
    for name in ("cudnn_version.h", "cudnn.h"):
        path = os.path.join(include_dir, name)
        if os.path.isfile(path):
            with open(path, errors="replace") as f:
                text = f.read()
            parts = [re.search(rf"#define\s+CUDNN_{k}\s+(\d+)", text)
                     for k in ("MAJOR", "MINOR", "PATCHLEVEL")]
            if all(parts):
                return tuple(int(m.group(1)) for m in parts)
    return (0, 0, 0)


def choose_cudnn(found, named=()):
    """Note [Which cuDNN]: the first of ``named`` (what ``CUDNN_ROOT`` points at), else the
    newest of ``found`` by :func:`cudnn_version`, the first on a tie; None where both are
    empty."""
    if named:
        return named[0]
    return max(found, key=lambda f: cudnn_version(f[0]), default=None)


def locate():
    cuda = _cuda_root()
    libs = ("libcudnn.so.9", "libcudnn.so")
    named = _find_all("cudnn.h", libs, [os.environ[v] for v in ("CUDNN_ROOT", "CUDNN_HOME")
                                        if os.environ.get(v)])
    found = named + [f for f in _find_all("cudnn.h", libs, [cuda, "/usr/local/cuda", "/usr",
                                                            "/usr/local"] + _wheel_roots("cudnn"))
                     if f not in named]
    cudnn = choose_cudnn(found, named)
    if cudnn is None:
        sys.exit("ucudnn: cuDNN 9 not found (cudnn.h and libcudnn.so.9). Set CUDNN_ROOT to the "
                 "folder holding include/ and lib/, or install nvidia-cudnn-cu13.")
    cudart_roots = [cuda, "/usr/local/cuda"] + _wheel_roots("cuda_runtime") + ["/usr"]
    cudart = _find("cuda_runtime_api.h", ("libcudart.so", "libcudart.so.13", "libcudart.so.12"),
                   cudart_roots)
    if cudart is None:
        sys.exit("ucudnn: the CUDA runtime (cuda_runtime_api.h, libcudart) was not found. "
                 "Set CUDA_HOME to the CUDA toolkit.")
    if os.environ.get("UCUDNN_VERBOSE_BUILD"):
        for f in found:
            print(f"ucudnn build: found cuDNN {'.'.join(map(str, cudnn_version(f[0])))} {f}",
                  file=sys.stderr)
        print(f"ucudnn build: cuDNN {cudnn}, CUDA runtime {cudart}", file=sys.stderr)
    return cudnn, cudart


BUILD_CONFIG = {}

# The core's extension modules, one per cython/ucudnn/<name>.pyx: a .pxd/.pyx pair per
# responsibility (the module docstring of _core.pyx lists them), the facade ucudnn._core, and
# the C API ucudnn._capi.
CORE_MODULES = ("_device", "_timing", "_legacy", "_graph", "_check", "_bench", "_kernel", "_run",
                "_core", "_capi")


def core_extensions():
    """The modules of CORE_MODULES, all against the same cuDNN and CUDA runtime."""
    (cudnn_inc, cudnn_lib, cudnn_file), (cuda_inc, cuda_lib, cuda_file) = locate()
    lib_dirs = list(dict.fromkeys([cudnn_lib, cuda_lib]))
    # what C/C++ consumers of the C API (Caffe, tests/cpp) compile and link against
    BUILD_CONFIG.update(include_dirs=list(dict.fromkeys([cudnn_inc, cuda_inc])),
                        library_dirs=lib_dirs,
                        libraries=[os.path.join(cudnn_lib, cudnn_file),
                                   os.path.join(cuda_lib, cuda_file)],
                        # the cuDNN that Caffe builds against too (Note [Which cuDNN])
                        cudnn_include=cudnn_inc,
                        cudnn_library=os.path.join(cudnn_lib, cudnn_file),
                        cudnn_version=".".join(map(str, cudnn_version(cudnn_inc))))
    return [Extension(
        f"ucudnn.{name}",
        sources=[f"cython/ucudnn/{name}.pyx"],
        include_dirs=["cython", "cython/ucudnn", cudnn_inc, cuda_inc],
        library_dirs=lib_dirs,
        runtime_library_dirs=lib_dirs,
        extra_link_args=[f"-l:{cudnn_file}", f"-l:{cuda_file}"],
        extra_compile_args=["-O2", "-Wno-deprecated-declarations"],
    ) for name in CORE_MODULES]


# The C API's headers, installed in ucudnn/include (`ucudnn config --cflags`): the hand-written
# two and the two Cython generates for ucudnn._capi's `cdef public api` functions.
C_API_HEADERS = ("ucudnn.h", "ucudnn_types.h", "ucudnn/_capi.h", "ucudnn/_capi_api.h")
# generated by builds from before the C API moved to ucudnn._capi; removed where found
STALE_HEADERS = ("_core.h", "_core_api.h")


class BuildExt(build_ext):
    """Cythonize, build, and install the C API headers beside the module (ucudnn/include). The
    core's modules compile in parallel, one per CPU, unless ``--parallel`` says otherwise."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self):
        super().run()
        pkg_dirs = [os.path.join(self.build_lib, "ucudnn")]
        if self.inplace:
            pkg_dirs.append(os.path.join(HERE, "ucudnn"))
        for d in pkg_dirs:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "_build_config.json"), "w") as f:
                json.dump(BUILD_CONFIG, f, indent=1)
        dests = [os.path.join(d, "include") for d in pkg_dirs]
        for dest in dests:
            os.makedirs(dest, exist_ok=True)
            for name in STALE_HEADERS:
                if os.path.exists(os.path.join(dest, name)):
                    os.remove(os.path.join(dest, name))
        for name in C_API_HEADERS:
            src = os.path.join(HERE, "cython", name)
            if not os.path.exists(src):
                sys.exit(f"ucudnn: expected generated header {src} after cythonize")
            for dest in dests:
                shutil.copy(src, dest)


def extensions():
    from Cython.Build import cythonize
    return cythonize(
        core_extensions(),
        include_path=["cython"],
        compiler_directives={"language_level": "3", "boundscheck": False,
                             "wraparound": False, "embedsignature": True},
    ) + native_extensions()


# The native eager path of ucudnn.torch (Note [Native calls] in ucudnn/torch/eager.py):
# ucudnn/torch/native.cpp, compiled against the PyTorch importable while this builds (``pip
# install --no-build-isolation .`` beside torch). $UCUDNN_TORCH_NATIVE: "auto" (default) builds
# it where torch imports and goes on without it where it does not, or where it fails to
# compile; "1" demands it; "0" skips it. Without it eager calls run in Python.
NATIVE_ENV = "UCUDNN_TORCH_NATIVE"


def native_extensions():
    choice = os.environ.get(NATIVE_ENV, "auto").strip().lower()
    if choice in ("0", "off", "no", "false"):
        return []
    try:
        import torch
        from torch.utils.cpp_extension import include_paths, library_paths
    except ImportError as e:
        if choice == "1":
            sys.exit(f"ucudnn: ${NATIVE_ENV}=1, but torch does not import here: {e}")
        print("ucudnn build: torch does not import here; ucudnn.torch._native is not built "
              "(eager calls of ucudnn.torch run in Python)", file=sys.stderr)
        return []
    torch_lib = library_paths()
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return [Extension(
        "ucudnn.torch._native",
        sources=["ucudnn/torch/native.cpp"],
        language="c++",
        include_dirs=["cython", "cython/ucudnn", *include_paths(),
                      *BUILD_CONFIG["include_dirs"]],
        library_dirs=torch_lib,
        runtime_library_dirs=torch_lib,
        libraries=["c10", "torch", "torch_cpu", "torch_python", "c10_cuda", "torch_cuda"],
        extra_compile_args=["-O2", "-g0", "-std=c++20", "-Wno-deprecated-declarations",
                            "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_native",
                            f"-D_GLIBCXX_USE_CXX11_ABI={abi}"],
        optional=choice != "1",
    )]



def caffe_descriptor_set():
    """ucudnn/caffe/caffe_net.proto compiled into a FileDescriptorSet by
    ucudnn/caffe/protoc.py (loaded by path: ucudnn is not importable while it builds), as
    (bytes, the digest text of the .proto, the digest file's suffix); Note [Where the Caffe
    classes come from] in ucudnn/caffe/proto.py says why."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "_ucudnn_protoc", os.path.join(HERE, "ucudnn", "caffe", "protoc.py"))
    protoc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(protoc)
    proto = os.path.join(HERE, "ucudnn", "caffe", "caffe_net.proto")
    try:
        return protoc.descriptor_set(proto), protoc.digest_text(proto), protoc.DIGEST_SUFFIX
    except protoc.ProtocError as e:
        sys.exit(f"ucudnn: {e}")


class BuildPy(build_py):
    """Also write caffe_net.desc (a build output, not in git) into the package, and into
    the source tree for an editable install; and copy the nets of ``prototxt/`` into the
    package (``ucudnn/nets``: Note [Checkout and installed package] in ucudnn/paths.py; an
    editable install reads ``prototxt/`` itself)."""

    def run(self):
        super().run()
        data, digest, suffix = caffe_descriptor_set()
        dirs = [os.path.join(self.build_lib, "ucudnn", "caffe")]
        if getattr(self, "editable_mode", False):
            dirs.append(os.path.join(HERE, "ucudnn", "caffe"))
        for d in dirs:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "caffe_net.desc"), "wb") as f:
                f.write(data)
            with open(os.path.join(d, "caffe_net.desc" + suffix), "w") as f:
                f.write(digest + "\n")
        nets = os.path.join(self.build_lib, "ucudnn", "nets")
        os.makedirs(nets, exist_ok=True)
        for src in sorted(glob.glob(os.path.join(HERE, "prototxt", "*.prototxt"))):
            shutil.copy(src, nets)


if __name__ == "__main__":         # setuptools runs this file as __main__; tests import it
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
