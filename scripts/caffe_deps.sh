#!/usr/bin/env bash
# Install the Debian/Ubuntu packages needed to build BVLC Caffe (patched by
# caffe_patch/) with scripts/build_caffe.sh. Idempotent: packages already
# installed are skipped; apt-get is only invoked when something is missing.
#
# Usage: scripts/caffe_deps.sh [--with-optional] [--with-pycaffe-runtime]
#   --with-optional         also install LMDB/LevelDB/OpenCV dev packages (only
#                           for build_caffe.sh --with-lmdb/--with-leveldb/--with-opencv)
#   --with-pycaffe-runtime  also install what `import caffe` needs at run time
#                           (python3-skimage pulls ~180 packages)
set -euo pipefail

PKGS=(
  build-essential
  cmake
  git
  ca-certificates
  patch
  xz-utils
  binutils
  ccache
  pkg-config
  libgoogle-glog-dev
  libgflags-dev
  libprotobuf-dev
  protobuf-compiler
  libhdf5-dev
  libopenblas-dev
  libboost-system-dev
  libboost-thread-dev
  libboost-filesystem-dev
  libboost-python-dev
  python3-dev
  python3-numpy
  python3-six   # Caffe's scripts/cpp_lint.py (tests/caffe_patch/test_series.py runs it)
)
OPTIONAL_PKGS=(
  liblmdb-dev
  libleveldb-dev
  libsnappy-dev
  libopencv-dev
)

PYCAFFE_RUNTIME_PKGS=(
  python3-skimage
  python3-protobuf
)

for arg in "$@"; do
  case "$arg" in
    --with-optional) PKGS+=("${OPTIONAL_PKGS[@]}") ;;
    --with-pycaffe-runtime) PKGS+=("${PYCAFFE_RUNTIME_PKGS[@]}") ;;
    *) echo "usage: $0 [--with-optional] [--with-pycaffe-runtime]" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "caffe_deps: all ${#PKGS[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  SUDO="sudo"
fi
echo "caffe_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
echo "caffe_deps: done"
