#!/usr/bin/env bash
# Fetch, patch and build BVLC Caffe (pinned commit) for ucudnn on CUDA 13 / cuDNN 9.
#
# Pipeline:  fetch pristine source -> verify -> copy + apply caffe_patch/*.patch
#            -> cmake configure -> build (libcaffe, caffe tool, pycaffe, test.testbin,
#               the check tools)
#
# Everything goes under third_party/caffe/ (git-ignored) unless --prefix is given:
#   PREFIX/downloads/   source tarball (Debian orig tarball) / apt work files
#   PREFIX/pristine/    unmodified upstream tree (never edited)
#   PREFIX/src/         patched copy of pristine/ (recreated when the series changes)
#   PREFIX/build/       CMake build tree (--build-dir to override)
#   PREFIX/deps/        (--offline only) .deb packages extracted into a local prefix, and
#                       libboost_python3X built from the bundle's Boost.Python sources
#
# scripts/caffe_sources.sh (sourced) obtains the source and sets up the offline bundle.
# Run `scripts/build_caffe.sh --help` for the options.
set -euo pipefail

# ----------------------------------------------------------------------------
# Pinned upstream source
CAFFE_COMMIT="99bd99795dcdf0b1d3086a8d67ab1782a8a08383"
CAFFE_GIT_URL="https://github.com/BVLC/caffe.git"
DEB_SRC_PKG="caffe"
DEB_SRC_VERSION="1.0.0+git20180821.99bd997"
DEB_SRC_SUITE="bullseye"
DEB_ORIG_TARBALL="caffe_${DEB_SRC_VERSION}.orig.tar.gz"
DEB_ORIG_SHA256="e0eb3f06794f7402c77b7dec8e8480273ee1a1bb192e9122b621a69d4147ad0c"
DEB_POOL_PATH="pool/main/c/caffe/${DEB_ORIG_TARBALL}"
# sha256 of files of the pristine tree at CAFFE_COMMIT (to sanity-check --source)
KNOWN_FILES=(
  "CMakeLists.txt 10fa22045bfd35d09854b50c40871d60cc48bd0579648bb0993be9c278452d9c"
  "src/caffe/layers/cudnn_conv_layer.cpp a82071c3151058a923cce1315ff9216b1a384d4e7b7b64b3fb3fcdfffd7b8ae9"
)

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
PATCH_DIR="${REPO_ROOT}/caffe_patch"

# ----------------------------------------------------------------------------
# Defaults
PREFIX="${REPO_ROOT}/third_party/caffe"
BUILD_DIR=""
SOURCE=""
FETCH="auto"
OFFLINE_DIR=""
CUDA_ARCH="90"
CUDA_PTX=""
JOBS="$(nproc 2>/dev/null || echo 2)"
WITH_PYTHON=1
WITH_UCUDNN=1
NCCL_MODE=auto
UCUDNN_PY=""
SERIES=all
# caffe_patch/'s patches of μ-cuDNN itself (--series ucudnn), by name without their number
UCUDNN_PATCHES=(modernise-for-cuda13-cudnn9 ucudnn-micro-batched-convolutions
                ucudnn-tests-and-compare-tool pycaffe-numpy2-python312)
WITH_LMDB=OFF
WITH_LEVELDB=OFF
WITH_OPENCV=OFF
HDF5_MODE="auto"
SKIP_BUILD=0
FETCH_ONLY=0
CONFIGURE_ONLY=0
BUILD_TESTS=1
CUDA_ROOT="${CUDA_HOME:-/usr/local/cuda}"
PYTHON_EXE=""
BOOST_PYTHON_SRC=""
EXTRA_CMAKE_ARGS=()

usage() {
  cat <<EOF
Usage: scripts/build_caffe.sh [options]

Fetches BVLC Caffe at commit ${CAFFE_COMMIT:0:12}, applies caffe_patch/*.patch
and builds it with CMake (cuDNN on, CUDA 13).

Source (default: --fetch auto = Debian source package, then git):
  --source PATH|TARBALL  use an existing Caffe tree (directory) or tarball
  --fetch MODE           auto | debian | git
                           debian: apt-get source ${DEB_SRC_PKG} (${DEB_SRC_VERSION})
                                   (${DEB_SRC_SUITE}, temporary deb-src list; orig tarball
                                   sha256-verified; pristine upstream tree is used)
                           git:    git clone ${CAFFE_GIT_URL} @ ${CAFFE_COMMIT:0:12}
  --offline DIR          build from a folder made by scripts/gather_offline.sh
                         (no network: source tarball + glog/gflags/libunwind/boost
                         .debs extracted into PREFIX/deps). pycaffe: when the
                         bundle has no libboost_python3X for the chosen Python, it
                         is compiled from DIR/boost-python-src (Boost.Python 1.83
                         sources) against the bundle's Boost 1.83 headers and that
                         Python's headers into PREFIX/deps (--jobs in parallel:
                         27 s on 2 cores) and given to CMake

Series:
  --series ucudnn|all    the patches of μ-cuDNN alone (${UCUDNN_PATCHES[*]})
                         or the whole series (default: all)

Locations:
  --prefix DIR           work root (default: third_party/caffe)
  --build-dir DIR        CMake build directory (default: PREFIX/build)

Build:
  --cuda-arch "LIST"     real GPU archs, e.g. "90" or "80 90" (default: 90; nvcc 13 needs >= 75)
  --cuda-ptx "LIST"      PTX archs to embed (default: highest of --cuda-arch)
  --jobs N               parallel build jobs (default: nproc = ${JOBS})
  --no-python            do not build pycaffe / the Python layer
  --boost-python-src DIR Boost.Python sources to compile libboost_python3X from
                         with --offline (default: the bundle's boost-python-src/)
  --ucudnn-python EXE    Python with the ucudnn package installed, relative to the
                         working directory or absolute (default: \$VIRTUAL_ENV/bin/python
                         when a virtual environment is active, else the checkout's
                         .venv/bin/python when there is one, else python3); Caffe embeds
                         it to plan micro-batches (caffe_patch/0002)
  --no-ucudnn            build without ucudnn (stock cuDNN convolutions)
  --no-nccl              build without NCCL (default: with it where nccl.h and libnccl are
                         found: multi-GPU training, caffe train -gpu 0,1)
  --python EXE           python3 interpreter for pycaffe (default: auto-detect one
                         with a matching Boost.Python, preferring /usr/bin/python3)
  --hdf5 auto|on|off     HDF5 layers/snapshots (default auto: on if hdf5 headers found)
  --with-lmdb | --with-leveldb | --with-opencv   enable optional deps (default OFF)
  --no-tests             do not build the gtest binary test.testbin
  --cuda-root DIR        CUDA toolkit (default: \$CUDA_HOME or /usr/local/cuda)
  --cmake-arg ARG        extra CMake argument (repeatable)
  --fetch-only           only fetch and verify (prints the pristine tree)
  --skip-build           only fetch, verify and patch (prints the patched tree)
  --configure-only       fetch, patch and run CMake, but do not build
  -h, --help             this help

Examples:
  scripts/build_caffe.sh
  scripts/build_caffe.sh --cuda-arch "80 90" --jobs 16
  scripts/gather_offline.sh .offline     # on a connected machine
  scripts/build_caffe.sh --offline .offline   # on the air-gapped GPU node
EOF
}

log()  { printf '[build_caffe] %s\n' "$*" >&2; }
warn() { printf '[build_caffe] WARNING: %s\n' "$*" >&2; }
die()  { printf '[build_caffe] ERROR: %s\n' "$*" >&2; exit 1; }

need_arg() { [[ $# -ge 2 && -n "$2" ]] || die "option $1 needs an argument"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --source)     need_arg "$@"; SOURCE="$2"; shift 2 ;;
    --fetch)      need_arg "$@"; FETCH="$2"; shift 2 ;;
    --offline)    need_arg "$@"; OFFLINE_DIR="$2"; shift 2 ;;
    --prefix)     need_arg "$@"; PREFIX="$2"; shift 2 ;;
    --build-dir)  need_arg "$@"; BUILD_DIR="$2"; shift 2 ;;
    --cuda-arch)  need_arg "$@"; CUDA_ARCH="$2"; shift 2 ;;
    --cuda-ptx)   need_arg "$@"; CUDA_PTX="$2"; shift 2 ;;
    --jobs|-j)    need_arg "$@"; JOBS="$2"; shift 2 ;;
    --no-python)  WITH_PYTHON=0; shift ;;
    --boost-python-src) need_arg "$@"; BOOST_PYTHON_SRC="$2"; shift 2 ;;
    --ucudnn-python) need_arg "$@"; UCUDNN_PY="$2"; shift 2 ;;
    --series)     need_arg "$@"; SERIES="$2"; shift 2 ;;
    --no-ucudnn)  WITH_UCUDNN=0; shift ;;
    --no-nccl)    NCCL_MODE=off; shift ;;
    --python)     need_arg "$@"; PYTHON_EXE="$2"; shift 2 ;;
    --hdf5)       need_arg "$@"; HDF5_MODE="$2"; shift 2 ;;
    --with-lmdb)  WITH_LMDB=ON; shift ;;
    --with-leveldb) WITH_LEVELDB=ON; shift ;;
    --with-opencv) WITH_OPENCV=ON; shift ;;
    --no-tests)   BUILD_TESTS=0; shift ;;
    --cuda-root)  need_arg "$@"; CUDA_ROOT="$2"; shift 2 ;;
    --cmake-arg)  need_arg "$@"; EXTRA_CMAKE_ARGS+=("$2"); shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --fetch-only) FETCH_ONLY=1; shift ;;
    --configure-only) CONFIGURE_ONLY=1; shift ;;
    -h|--help)    usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done

case "$FETCH" in auto|debian|git) ;; *) die "--fetch must be auto, debian or git" ;; esac
case "$HDF5_MODE" in auto|on|off) ;; *) die "--hdf5 must be auto, on or off" ;; esac
case "$SERIES" in ucudnn|all) ;; *) die "--series must be ucudnn or all" ;; esac
# The Python with ucudnn: the active virtual environment's, else the quick start's .venv
# (README.md), else python3. A path is made absolute here, against the caller's working
# directory (detect_ucudnn runs it from /).
if [[ -z "$UCUDNN_PY" ]]; then
  if [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
    UCUDNN_PY="$VIRTUAL_ENV/bin/python"
  elif [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then
    UCUDNN_PY="$REPO_ROOT/.venv/bin/python"
  else
    UCUDNN_PY="python3"
  fi
fi
if [[ "$UCUDNN_PY" == */* && "$UCUDNN_PY" != /* ]]; then
  # not through readlink: a virtual environment's python is a link out of it
  if py_dir="$(cd "$(dirname "$UCUDNN_PY")" 2>/dev/null && pwd)"; then
    UCUDNN_PY="$py_dir/$(basename "$UCUDNN_PY")"
  else
    UCUDNN_PY="$PWD/$UCUDNN_PY"
  fi
fi
if [[ $WITH_UCUDNN -eq 1 && "$UCUDNN_PY" == /* && ! -x "$UCUDNN_PY" ]]; then
  die "--ucudnn-python: no interpreter at $UCUDNN_PY (README.md's quick start makes .venv/bin/python in the checkout)"
fi
[[ "$JOBS" =~ ^[0-9]+$ && "$JOBS" -ge 1 ]] || die "--jobs must be a positive integer"
if [[ -n "$BOOST_PYTHON_SRC" ]]; then
  [[ -n "$OFFLINE_DIR" ]] || die "--boost-python-src is used with --offline (the bundle's Boost headers)"
  [[ -f "$BOOST_PYTHON_SRC/SOURCE" ]] ||
    die "--boost-python-src $BOOST_PYTHON_SRC: no SOURCE file (made by scripts/gather_offline.sh)"
  BOOST_PYTHON_SRC="$(cd "$BOOST_PYTHON_SRC" && pwd)"
fi
for a in $CUDA_ARCH $CUDA_PTX; do
  [[ "$a" =~ ^[0-9]+$ ]] || die "bad CUDA architecture '$a' (use e.g. 90, not sm_90)"
  (( a >= 75 )) || die "CUDA architecture $a is not supported by nvcc 13 (need >= 75)"
done
[[ -n "$CUDA_ARCH" ]] || die "--cuda-arch must not be empty"
if [[ -z "$CUDA_PTX" ]]; then
  # shellcheck disable=SC2086  # word splitting of the arch list is intended
  CUDA_PTX="$(printf '%s\n' $CUDA_ARCH | sort -n | tail -1)"
fi

abspath() { mkdir -p "$1" && (cd "$1" && pwd); }
PREFIX="$(abspath "$PREFIX")"
[[ -n "$BUILD_DIR" ]] || BUILD_DIR="${PREFIX}/build"
DOWNLOADS="${PREFIX}/downloads"
PRISTINE="${PREFIX}/pristine"
SRC="${PREFIX}/src"
DEPS="${PREFIX}/deps"
STAMP_NAME=".ucudnn-source"
PATCH_STAMP_NAME=".ucudnn-patches"

sha256_of() { sha256sum "$1" | awk '{print $1}'; }

# obtain_source, setup_offline, build_boost_python
source "${SCRIPT_DIR}/caffe_sources.sh"

# ----------------------------------------------------------------------------
# Patching: $SRC is a copy of $PRISTINE with caffe_patch/*.patch applied, in
# order. A stamp records the source identity and the patch checksums, so a
# re-run with unchanged inputs does nothing, and any change starts again from
# a fresh copy of the pristine tree (no double application).
patch_series() {
  local p name n=0
  for p in "$PATCH_DIR"/[0-9][0-9][0-9][0-9]-*.patch; do
    [[ -e "$p" ]] || continue
    if [[ "$SERIES" == ucudnn ]]; then
      name="$(basename "$p" .patch)"
      [[ " ${UCUDNN_PATCHES[*]} " == *" ${name#[0-9][0-9][0-9][0-9]-} "* ]] || continue
      n=$((n + 1))
    fi
    echo "$p"
  done
  if [[ "$SERIES" == ucudnn && $n -ne ${#UCUDNN_PATCHES[@]} ]]; then
    die "--series ucudnn: $n of the ${#UCUDNN_PATCHES[@]} patches ${UCUDNN_PATCHES[*]} in $PATCH_DIR"
  fi
}

apply_one() {
  local tree="$1" p="$2"
  if command -v patch >/dev/null 2>&1; then
    patch -d "$tree" -p1 --forward --batch --dry-run --quiet -i "$p" >/dev/null ||
      { patch -d "$tree" -p1 --forward --batch --dry-run -i "$p" >&2 || true; return 1; }
    patch -d "$tree" -p1 --forward --batch --quiet --no-backup-if-mismatch -i "$p" >&2
  else
    # keep git from discovering an enclosing repository (paths would be wrong)
    GIT_CEILING_DIRECTORIES="$(dirname "$tree")" git -C "$tree" apply --check -p1 "$p" &&
      GIT_CEILING_DIRECTORIES="$(dirname "$tree")" git -C "$tree" apply -p1 "$p"
  fi
}

apply_patches() {
  local patches=() p want=""
  local listed
  listed="$(patch_series)" || exit 1
  while IFS= read -r p; do patches+=("$p"); done <<<"$listed"
  [[ ${#patches[@]} -gt 0 ]] || die "no patches found in $PATCH_DIR"
  want="source=$(cat "$PRISTINE/$STAMP_NAME")"$'\n'
  for p in "${patches[@]}"; do
    want+="$(basename "$p") $(sha256_of "$p")"$'\n'
  done
  if [[ -f "$SRC/$PATCH_STAMP_NAME" && "$(cat "$SRC/$PATCH_STAMP_NAME")"$'\n' == "$want" ]]; then
    log "patch series already applied in $SRC (unchanged)"
    return
  fi
  log "creating patched tree $SRC from $PRISTINE"
  local tmp="${SRC}.tmp"
  rm -rf "$tmp"
  cp -a "$PRISTINE" "$tmp"
  rm -f "$tmp/$STAMP_NAME"
  for p in "${patches[@]}"; do
    log "applying $(basename "$p")"
    apply_one "$tmp" "$p" || { rm -rf "$tmp"; die "patch $(basename "$p") does not apply to $PRISTINE"; }
  done
  printf '%s' "$want" > "$tmp/$PATCH_STAMP_NAME"
  if [[ -d "$SRC" ]]; then
    # Keep mtimes of files whose content did not change so that an existing
    # build tree only recompiles what the patches touched.
    rsync_like_update "$tmp" "$SRC"
    rm -rf "$tmp"
  else
    mv "$tmp" "$SRC"
  fi
  log "patched tree ready: $SRC"
}

# Make $2 identical to $1, touching only files whose content differs.
# What pycaffe's build writes into the source tree (python/CMakeLists.txt: the link to
# _caffe.so and the generated caffe_pb2.py, made when pycaffe links) stays: the build does
# not make them again while pycaffe is up to date.
rsync_like_update() {
  local from="$1" to="$2" f
  (cd "$to" && find . -type f -not -path './python/caffe/proto/*' -print0) |
    while IFS= read -r -d '' f; do
      [[ -e "$from/$f" ]] || rm -f "$to/$f"
    done
  (cd "$from" && find . -type f -print0) | while IFS= read -r -d '' f; do
    if [[ ! -f "$to/$f" ]] || ! cmp -s "$from/$f" "$to/$f"; then
      mkdir -p "$(dirname "$to/$f")"
      cp -p "$from/$f" "$to/$f"
      touch "$to/$f"
    fi
  done
}

# ----------------------------------------------------------------------------
# Python / Boost.Python detection: pycaffe needs libboost_python3X matching
# the interpreter's major.minor. With --offline it comes from the bundle: compiled
# from its Boost.Python sources (build_boost_python) for the chosen Python.
BOOST_PYTHON_LIB=""   # set when the library is ours (offline): CMake gets it as a hint
detect_python() {
  [[ $WITH_PYTHON -eq 1 ]] || { log "pycaffe: disabled (--no-python)"; return; }
  local candidates=() c ver tag libdirs=() bp_src=""
  if [[ -n "$PYTHON_EXE" ]]; then
    candidates=("$PYTHON_EXE")
  else
    candidates=(/usr/bin/python3 "$(command -v python3 || true)")
  fi
  libdirs=(/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib)
  if [[ -n "$OFFLINE_DIR" ]]; then
    # offline: Boost comes from the bundle, so Boost.Python must come from it too
    libdirs=("$DEPS/usr/lib/x86_64-linux-gnu")
    bp_src="${BOOST_PYTHON_SRC:-$OFFLINE_DIR/boost-python-src}"
    if [[ -f "$bp_src/SOURCE" ]]; then
      bp_src="$(cd "$bp_src" && pwd)"
    else
      log "pycaffe: no Boost.Python sources in $bp_src (gather_offline.sh without --no-boost-python makes them)"
      bp_src=""
    fi
  fi
  for c in "${candidates[@]}"; do
    [[ -n "$c" && -x "$c" ]] || continue
    ver="$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || continue
    tag="${ver/./}"
    if ! "$c" -c 'import numpy' >/dev/null 2>&1; then
      log "pycaffe: $c ($ver) has no numpy"
      continue
    fi
    if ! "$c" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
      log "pycaffe: $c ($ver) has no Python.h (python3-dev missing)"
      continue
    fi
    if [[ -n "$bp_src" ]]; then
      # idempotent: reuses an earlier build for the same Python, headers and sources
      if build_boost_python "$c" "$bp_src"; then
        PYTHON_EXE="$c"
        log "pycaffe: ON ($c, Python $ver, $BOOST_PYTHON_LIB built from $bp_src)"
        return
      fi
      continue
    fi
    local d
    for d in "${libdirs[@]}"; do
      if compgen -G "$d/libboost_python${tag}.so" >/dev/null; then
        PYTHON_EXE="$c"
        [[ -n "$OFFLINE_DIR" ]] && BOOST_PYTHON_LIB="$d/libboost_python${tag}.so"
        log "pycaffe: ON ($c, Python $ver, $d/libboost_python${tag}.so)"
        return
      fi
    done
    log "pycaffe: no libboost_python${tag}.so for $c (Python $ver)"
  done
  WITH_PYTHON=0
  log "pycaffe: OFF -- no python3 with numpy, Python.h and matching Boost.Python"
  if [[ -n "$OFFLINE_DIR" ]]; then
    log "         (offline: python3-dev and numpy for the node's python3; Boost.Python's sources"
    log "          come from scripts/gather_offline.sh, boost-python-src/)"
  else
    log "         (Debian/Ubuntu: apt-get install python3-dev python3-numpy libboost-python-dev)"
  fi
}

# Note [Shared libstdc++]
# Every C++ library that pycaffe loads must use the process's one libstdc++.so.6. A
# toolchain with libstdc++.so.6 but without the libstdc++.so development link (the GPU
# node's image) makes `g++ -shared ... -lstdc++` silently take libstdc++.a: libcaffe.so,
# _caffe.so and libboost_python each get a private, exported copy whose iostreams were
# never initialised, and glog's first LOG from Python segfaults (google::LogMessage::Init ->
# std::ostream::_M_insert). The `caffe` tool survives because the executable's copy serves
# everyone. So where the link is missing, we make one in a folder of our own and put that
# folder first on every link line (-L): -lstdc++ then finds the shared library.
# Prints that folder (nothing when the toolchain finds libstdc++.so itself).
shared_libstdcxx_dir() {
  local cxx="${CXX:-g++}" so6 dir="$PREFIX/stdcxx-link"
  [[ "$("$cxx" -print-file-name=libstdc++.so)" == /* ]] && return 0
  so6="$("$cxx" -print-file-name=libstdc++.so.6)"
  if [[ "$so6" != /* || ! -e "$so6" ]]; then
    log "$cxx finds neither libstdc++.so nor libstdc++.so.6"
    return 1
  fi
  mkdir -p "$dir"
  ln -sfn "$(readlink -f "$so6")" "$dir/libstdc++.so"
  log "$cxx has no libstdc++.so link: linking the shared $so6 through $dir (Note [Shared libstdc++])"
  echo "$dir"
}

detect_hdf5() {
  case "$HDF5_MODE" in
    on)  USE_HDF5=ON ;;
    off) USE_HDF5=OFF ;;
    auto)
      if compgen -G "/usr/include/hdf5/serial/hdf5_hl.h" >/dev/null ||
         compgen -G "/usr/include/hdf5_hl.h" >/dev/null ||
         compgen -G "/usr/local/include/hdf5_hl.h" >/dev/null; then
        USE_HDF5=ON
      else
        USE_HDF5=OFF
        log "HDF5: headers not found, building with USE_HDF5=OFF (apt-get install libhdf5-dev to enable)"
      fi ;;
  esac
  log "HDF5: USE_HDF5=$USE_HDF5"
}

# NCCL (multi-GPU training): Caffe's FindNCCL looks in /usr, /usr/local and $NCCL_DIR.
NCCL_ARGS=(-DUSE_NCCL=OFF)
detect_nccl() {
  [[ "$NCCL_MODE" == off ]] && { log "NCCL: disabled (--no-nccl)"; return; }
  local d lib
  for d in "${NCCL_DIR:-}" "$CUDA_ROOT" /usr /usr/local; do
    [[ -n "$d" && -f "$d/include/nccl.h" ]] || continue
    for lib in "$d"/lib64/libnccl.so "$d"/lib/libnccl.so "$d"/lib/x86_64-linux-gnu/libnccl.so \
               /usr/lib/x86_64-linux-gnu/libnccl.so; do
      [[ -e "$lib" ]] || continue
      # given to Caffe's FindNCCL as its cache variables: no search of its own
      NCCL_ARGS=(-DUSE_NCCL=ON -DNCCL_INCLUDE_DIR="$d/include" -DNCCL_LIBRARIES="$lib")
      log "NCCL: $d/include, $lib (multi-GPU training on)"
      return
    done
  done
  log "NCCL: not found (multi-GPU training off; install libnccl-dev or set NCCL_DIR)"
}

# ----------------------------------------------------------------------------
# ucudnn (caffe_patch/0002): Caffe embeds the Python that has the ucudnn package and
# links its C API; the flags come from that package (ucudnn.config).
UCUDNN_ARGS=()
UCUDNN_CUDNN_INCLUDE=""
UCUDNN_CUDNN_LIBRARY=""
detect_ucudnn() {
  if ! grep -q "UcudnnParameter" "$SRC/src/caffe/proto/caffe.proto"; then
    log "ucudnn: not in the patch series; stock cuDNN convolutions"
    return
  fi
  if [[ $WITH_UCUDNN -eq 0 ]]; then
    log "ucudnn: disabled (--no-ucudnn)"
    UCUDNN_ARGS=(-DUSE_UCUDNN=OFF)
    return
  fi
  local py
  py="$(command -v "$UCUDNN_PY" 2>/dev/null)" ||
    die "ucudnn: no Python '$UCUDNN_PY' (--ucudnn-python EXE: the Python with the ucudnn package; README.md's quick start makes .venv/bin/python)"
  # from / so that a source checkout in the working directory does not shadow the package;
  # prints the cuDNN the core was built with (empty for a core built before it was recorded)
  local cudnn err
  err="$(mktemp)"
  cudnn="$(cd / && "$py" -c "from ucudnn import config; config.cflags(); config.libs(); c = config.build_config(); print(c.get('cudnn_include', ''), c.get('cudnn_library', ''), c.get('cudnn_version', ''))" 2>"$err")" || {
    tail -n 3 "$err" >&2; rm -f "$err"
    die "ucudnn: $py cannot import the ucudnn package with its compiled core. Install it into that Python ($py -m pip install '$REPO_ROOT'; README.md's quick start: python3 -m venv .venv && .venv/bin/pip install '.[test]' in the checkout), or pass --ucudnn-python EXE for a Python that has it, or --no-ucudnn"
  }
  rm -f "$err"
  log "ucudnn: enabled, embedding $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
  if [[ $WITH_PYTHON -eq 1 && "$(readlink -f "$PYTHON_EXE")" != "$(readlink -f "$py")" ]]; then
    warn "pycaffe is built for $PYTHON_EXE but ucudnn for $py: 'import caffe' with ucudnn layers needs one Python for both (pass --python $py where Boost.Python exists for it)"
  fi
  UCUDNN_ARGS=(-DUSE_UCUDNN=ON "-DUCUDNN_PYTHON=$py")
  # Caffe's cuDNN layers and the core in one process share one libcudnn.so.9: build Caffe
  # against the headers and library the core was built with (Note [Which cuDNN] in setup.py)
  read -r UCUDNN_CUDNN_INCLUDE UCUDNN_CUDNN_LIBRARY cudnn <<<"$cudnn" || true
  if [[ -n "$UCUDNN_CUDNN_INCLUDE" ]]; then
    log "cuDNN: $cudnn from the core's build ($UCUDNN_CUDNN_LIBRARY)"
  else
    warn "cuDNN: the core's build does not record its cuDNN (built by an older ucudnn); Caffe's CMake looks for one itself, which may not be the core's"
  fi
}

# Minutes:seconds since BUILD_T0.
elapsed() { local s=$((SECONDS - BUILD_T0)); printf '%d:%02d' $((s / 60)) $((s % 60)); }

# Build one CMake target, its progress on stderr. make's "[ NN%]" is each target's own
# share of its dependencies' steps, and the targets built one after another restart it
# (96 % of one, then 88 % of the next): the lines get the time since the build began
# instead.
build_target() {
  local line
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "$1" 2>&1 | while IFS= read -r line; do
    if [[ "$line" =~ ^\[\ *[0-9]+%\]\ (.*)$ ]]; then
      printf '[%s] %s\n' "$(elapsed)" "${BASH_REMATCH[1]}"
    else
      printf '%s\n' "$line"
    fi
  done >&2
  return "${PIPESTATUS[0]}"
}

configure_and_build() {
  local nvcc="${CUDA_ROOT}/bin/nvcc"
  [[ -x "$nvcc" ]] || die "nvcc not found at $nvcc (use --cuda-root)"
  command -v cmake >/dev/null 2>&1 || die "cmake not found (run scripts/caffe_deps.sh)"
  log "CUDA: $("$nvcc" --version | grep -o 'release [0-9.]*')  arch: sm_{${CUDA_ARCH// /,}} ptx: ${CUDA_PTX}"
  detect_hdf5
  detect_nccl
  detect_python

  local args=(
    -DCMAKE_BUILD_TYPE=Release
    -DCPU_ONLY=OFF
    -DUSE_CUDNN=ON
    "${NCCL_ARGS[@]}"
    -DBLAS=Open
    -DUSE_LMDB="$WITH_LMDB"
    -DUSE_LEVELDB="$WITH_LEVELDB"
    -DUSE_OPENCV="$WITH_OPENCV"
    -DUSE_HDF5="$USE_HDF5"
    -DBUILD_docs=OFF
    -DBUILD_matlab=OFF
    -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_ROOT"
    -DCUDA_ARCH_NAME=Manual
    "-DCUDA_ARCH_BIN=${CUDA_ARCH}"
    "-DCUDA_ARCH_PTX=${CUDA_PTX}"
  )
  detect_ucudnn
  if [[ -n "$UCUDNN_CUDNN_INCLUDE" ]]; then
    args+=(-DCUDNN_INCLUDE="$UCUDNN_CUDNN_INCLUDE" -DCUDNN_LIBRARY="$UCUDNN_CUDNN_LIBRARY")
  elif [[ -f "${CUDA_ROOT}/include/cudnn.h" ]]; then
    args+=(-DCUDNN_INCLUDE="${CUDA_ROOT}/include")
  fi
  if [[ $WITH_PYTHON -eq 1 ]]; then
    args+=(-DBUILD_python=ON -DBUILD_python_layer=ON -Dpython_version=3
           -DPYTHON_EXECUTABLE="$PYTHON_EXE")
    local inc lib
    inc="$("$PYTHON_EXE" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    lib="$("$PYTHON_EXE" -c 'import sysconfig, os; print(os.path.join(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")))')"
    args+=(-DPYTHON_INCLUDE_DIR="$inc")
    [[ -f "$lib" ]] && args+=(-DPYTHON_LIBRARY="$lib")
    if [[ -n "$BOOST_PYTHON_LIB" ]]; then
      # Caffe's Dependencies.cmake asks FindBoost (module mode offline) for the components
      # python-py<X.Y.Z digits>, python-py<XY>, python-py3, then python; none of them is
      # searched under the name libboost_python3XX, so the library is given as the cache
      # variable of the component that matches first (python-pyXY) and of the last
      # fallback (python). Boost's CMake package (config mode, --boost-source bundles)
      # finds it through the boost_python config written next to it.
      local pytag
      pytag="$("$PYTHON_EXE" -c 'import sys; print("%d%d" % sys.version_info[:2])')"
      args+=("-DBoost_PYTHON-PY${pytag}_LIBRARY_RELEASE=$BOOST_PYTHON_LIB"
             "-DBoost_PYTHON_LIBRARY_RELEASE=$BOOST_PYTHON_LIB")
    fi
  else
    args+=(-DBUILD_python=OFF -DBUILD_python_layer=OFF)
  fi
  if command -v ccache >/dev/null 2>&1; then
    # paths below the work root hashed as relative ones: a second checkout reuses the cache
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$PREFIX" && pwd)}"
    log "ccache: $(command -v ccache) (base dir $CCACHE_BASEDIR)"
    args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  else
    log "ccache: not found (rebuilds will be slower)"
  fi
  local ldflags="" stdcxx_dir
  stdcxx_dir="$(shared_libstdcxx_dir)" || die "no shared libstdc++ for ${CXX:-g++} (see above)"
  [[ -n "$stdcxx_dir" ]] && ldflags="-L$stdcxx_dir"
  if [[ -n "$OFFLINE_DIR" ]]; then
    local libdir="$DEPS/usr/lib/x86_64-linux-gnu"
    # RPATH (not RUNPATH) so glog finds the bundled libgflags/libunwind too
    ldflags+="${ldflags:+ }-Wl,--disable-new-dtags -Wl,-rpath,$libdir"
    args+=(
      -DCMAKE_PREFIX_PATH="$DEPS/usr"
      -DGLOG_ROOT_DIR="$DEPS/usr"
      -DGFLAGS_ROOT_DIR="$DEPS/usr"
      -DBOOST_INCLUDEDIR="$DEPS/usr/include"
      -DBOOST_LIBRARYDIR="$libdir"
    )
    local boost_cfg
    boost_cfg="$(find "$libdir/cmake" -maxdepth 1 -name 'Boost-*' -type d 2>/dev/null | head -1)"
    if [[ -f "$DEPS/.boost-from-source" && -n "$boost_cfg" ]]; then
      # Boost's own CMake package (Boost.System is header-only, no library)
      args+=(-DBoost_DIR="$boost_cfg" -DBoost_NO_SYSTEM_PATHS=ON)
    else
      # the .debs' CMake configs need more Boost packages than we carry
      args+=(-DBoost_NO_BOOST_CMAKE=ON)
    fi
  fi
  if [[ -n "$ldflags" ]]; then
    args+=("-DCMAKE_EXE_LINKER_FLAGS=$ldflags" "-DCMAKE_SHARED_LINKER_FLAGS=$ldflags"
           "-DCMAKE_MODULE_LINKER_FLAGS=$ldflags")
  fi
  args+=("${UCUDNN_ARGS[@]}")
  args+=("${EXTRA_CMAKE_ARGS[@]}")

  mkdir -p "$BUILD_DIR"
  log "configuring in $BUILD_DIR"
  cmake -S "$SRC" -B "$BUILD_DIR" "${args[@]}" >&2 || die "CMake configure failed"
  if [[ $CONFIGURE_ONLY -eq 1 ]]; then
    log "--configure-only: configured $BUILD_DIR"
    return 0
  fi

  local targets=(caffe caffe.bin) t
  # the series' check tools, where the series has them: tools/net_share_diffs_check and
  # tools/net_fusion_check (shared activation gradients, the fusions, against the net
  # without, in CPU mode or on a GPU); with ucudnn, tools/ucudnn_compare (results with
  # ucudnn_param against stock or another setting) and tools/net_layout_check (a net's
  # NHWC run against its NCHW run)
  for t in net_share_diffs_check net_fusion_check; do
    [[ -f "$SRC/tools/$t.cpp" ]] && targets+=("$t")
  done
  if [[ $WITH_UCUDNN -eq 1 ]]; then
    for t in ucudnn_compare net_layout_check; do
      [[ -f "$SRC/tools/$t.cpp" ]] && targets+=("$t")
    done
  fi
  [[ $WITH_PYTHON -eq 1 ]] && targets+=(pycaffe)
  [[ $BUILD_TESTS -eq 1 ]] && targets+=(test.testbin)
  log "building ${targets[*]} with -j${JOBS}: about 20-35 min on 2 cores from scratch, 10 with a warm ccache; [m:ss] is the time since the build began"
  BUILD_T0=$SECONDS
  # one target at a time: parallel top-level goals of CMake's Makefiles race
  # (two sub-makes rebuild/link the same files)
  for t in "${targets[@]}"; do
    build_target "$t" || die "building target $t failed (see output above)"
  done
  log "build finished in $(elapsed)"

  local tool="$BUILD_DIR/tools/caffe"
  [[ -x "$tool" ]] || die "caffe tool not found at $tool"
  local lib
  lib="$(ls "$BUILD_DIR"/lib/libcaffe.so* 2>/dev/null | head -1)" || true
  [[ -n "$lib" ]] || die "libcaffe not found in $BUILD_DIR/lib"
  echo
  echo "Caffe build complete"
  echo "  caffe tool : $tool"
  echo "  libcaffe   : $lib"
  [[ $BUILD_TESTS -eq 1 ]] && echo "  tests      : $BUILD_DIR/test/test.testbin"
  [[ $WITH_UCUDNN -eq 1 ]] && echo "  compare    : $BUILD_DIR/tools/ucudnn_compare"
  if [[ $WITH_PYTHON -eq 1 ]]; then
    echo "  pycaffe    : $SRC/python (PYTHONPATH=$SRC/python $PYTHON_EXE -c 'import caffe')"
    # every library pycaffe loads must share the process's libstdc++ (Note [Shared libstdc++])
    local so
    for so in "$lib" "$SRC"/python/caffe/_caffe*.so; do
      [[ -e "$so" ]] || continue
      ldd "$so" 2>/dev/null | grep -q 'libstdc++\.so' ||
        warn "$so does not load the shared libstdc++ (static copy?): pycaffe may crash"
    done
  else
    echo "  pycaffe    : not built"
  fi
  if [[ -n "$OFFLINE_DIR" ]]; then
    echo "  runtime    : export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:\${LD_LIBRARY_PATH:-}"
  fi
}

# ----------------------------------------------------------------------------
main() {
  mkdir -p "$PREFIX"
  log "work root: $PREFIX"
  [[ $WITH_UCUDNN -eq 1 ]] && log "ucudnn: the Python with the ucudnn package: $UCUDNN_PY (--ucudnn-python)"
  [[ -n "$OFFLINE_DIR" ]] && setup_offline
  obtain_source
  if [[ $FETCH_ONLY -eq 1 ]]; then
    echo "$PRISTINE"
    return 0
  fi
  apply_patches
  if [[ $SKIP_BUILD -eq 1 ]]; then
    log "--skip-build: stopping after patching"
    echo "$SRC"
    return 0
  fi
  configure_and_build
}

main
