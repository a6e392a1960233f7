"""Build the Cython core ``ucudnn._core`` against CUDA and cuDNN 9.

Where cuDNN is looked for, in order:
  1. ``CUDNN_ROOT`` (or ``CUDNN_HOME``): ``include/`` and ``lib/`` or ``lib64/``
  2. ``CUDA_HOME`` / ``CUDA_PATH`` / ``/usr/local/cuda`` (cuDNN copied into the toolkit)
  3. the system: ``/usr/include[/x86_64-linux-gnu]``, ``/usr/lib/x86_64-linux-gnu`` (Ubuntu's
     packages keep cuDNN there)
  4. the ``nvidia-cudnn-cu13`` / ``-cu12`` wheel (``site-packages/nvidia/cudnn``)
The core links ``libcudnn.so.9`` by its versioned name (wheels ship no unversioned link) with
an rpath to its folder. Set ``UCUDNN_VERBOSE_BUILD=1`` to print what was found.
"""
import glob
import json
import os
import shutil
import site
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

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


def _find(header, libnames, roots):
    """(include_dir, lib_dir, lib_file) for the first root that has the header and a library."""
    for root in roots:
        incs, libs = _prefix_candidates(root)
        inc = next((d for d in incs if os.path.isfile(os.path.join(d, header))), None)
        if inc is None:
            continue
        for d in libs:
            for name in libnames:
                if os.path.exists(os.path.join(d, name)):
                    return inc, d, name
    return None


def locate():
    cuda = _cuda_root()
    cudnn_roots = [os.environ[v] for v in ("CUDNN_ROOT", "CUDNN_HOME") if os.environ.get(v)]
    # the system's cuDNN before a wheel's: Caffe links the system one, and one process can
    # hold only one libcudnn.so.9
    cudnn_roots += [cuda, "/usr/local/cuda", "/usr", "/usr/local"] + _wheel_roots("cudnn")
    cudnn = _find("cudnn.h", ("libcudnn.so.9", "libcudnn.so"), cudnn_roots)
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
        print(f"ucudnn build: cuDNN {cudnn}, CUDA runtime {cudart}", file=sys.stderr)
    return cudnn, cudart


BUILD_CONFIG = {}


def core_extension():
    (cudnn_inc, cudnn_lib, cudnn_file), (cuda_inc, cuda_lib, cuda_file) = locate()
    lib_dirs = list(dict.fromkeys([cudnn_lib, cuda_lib]))
    # what C/C++ consumers of the C API (Caffe, tests/cpp) compile and link against
    BUILD_CONFIG.update(include_dirs=list(dict.fromkeys([cudnn_inc, cuda_inc])),
                        library_dirs=lib_dirs,
                        libraries=[os.path.join(cudnn_lib, cudnn_file),
                                   os.path.join(cuda_lib, cuda_file)])
    return Extension(
        "ucudnn._core",
        sources=["cython/ucudnn/_core.pyx"],
        include_dirs=["cython", "cython/ucudnn", cudnn_inc, cuda_inc],
        library_dirs=lib_dirs,
        runtime_library_dirs=lib_dirs,
        extra_link_args=[f"-l:{cudnn_file}", f"-l:{cuda_file}"],
        extra_compile_args=["-O2", "-Wno-deprecated-declarations"],
    )


class BuildExt(build_ext):
    """Cythonize, build, and install the C API headers beside the module (ucudnn/include)."""

    def run(self):
        super().run()
        pkg_dirs = [os.path.join(self.build_lib, "ucudnn")]
        if self.inplace:
            pkg_dirs.append(os.path.join(HERE, "ucudnn"))
        for d in pkg_dirs:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "_build_config.json"), "w") as f:
                json.dump(BUILD_CONFIG, f, indent=1)
        dest = os.path.join(self.build_lib, "ucudnn", "include")
        os.makedirs(dest, exist_ok=True)
        for name in ("ucudnn.h", "ucudnn_types.h", "ucudnn/_core.h", "ucudnn/_core_api.h"):
            src = os.path.join(HERE, "cython", name)
            if not os.path.exists(src):
                sys.exit(f"ucudnn: expected generated header {src} after cythonize")
            shutil.copy(src, dest)
            if self.inplace:
                os.makedirs(os.path.join(HERE, "ucudnn", "include"), exist_ok=True)
                shutil.copy(src, os.path.join(HERE, "ucudnn", "include"))


def extensions():
    from Cython.Build import cythonize
    return cythonize(
        [core_extension()],
        include_path=["cython"],
        compiler_directives={"language_level": "3", "boundscheck": False,
                             "wraparound": False, "embedsignature": True},
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
