#!/usr/bin/env bash
# Gather everything an air-gapped GPU node (Ubuntu 24.04, glibc 2.39, CUDA 13,
# cuDNN 9, Boost 1.83 headers) needs to build Caffe with
#   scripts/build_caffe.sh --offline DIR
#
# Run on a connected machine with apt-get (Debian or Ubuntu, any suite: the
# package lists used here are private to this script; the machine's apt
# configuration is not changed).
#
# DIR receives:
#   caffe_1.0.0+git20180821.99bd997.orig.tar.gz  pristine Caffe (= BVLC 99bd997), sha256-verified
#   debs/*.deb       bookworm: glog 0.6, gflags 2.2, libunwind 1.6 (runtime + -dev)
#                    trixie:   Boost 1.83 thread/filesystem/system/atomic (+chrono,
#                              date-time, headers), runtime + -dev
#   boost-src/       only if trixie's Boost binaries need a newer glibc/libstdc++
#                    than the target has: Boost 1.83 source (built by
#                    build_caffe.sh --offline with b2)
#   boost-python-src/ Boost.Python's sources only (libs/python/src without numpy/, from
#                    trixie's boost1.83 orig tarball, ~0.3 MB): build_caffe.sh --offline
#                    compiles libboost_python3X for the node's Python (pycaffe) against
#                    the Boost 1.83 headers; SOURCE names the tarball and its sha256
#   PACKAGES.txt     package versions and the ELF symbol-version check results
#   MANIFEST         sha256 of every file above (sha256sum -c format)
set -euo pipefail

DEB_SRC_VERSION="1.0.0+git20180821.99bd997"
DEB_ORIG_TARBALL="caffe_${DEB_SRC_VERSION}.orig.tar.gz"
DEB_ORIG_SHA256="e0eb3f06794f7402c77b7dec8e8480273ee1a1bb192e9122b621a69d4147ad0c"

BOOKWORM_PKGS=(
  libgoogle-glog0v6 libgoogle-glog-dev
  libgflags2.2 libgflags-dev
  libunwind8 libunwind-dev
)
BOOST_PKGS=(
  libboost1.83-dev
  libboost-thread1.83.0 libboost-thread1.83-dev
  libboost-filesystem1.83.0 libboost-filesystem1.83-dev
  libboost-system1.83.0 libboost-system1.83-dev
  libboost-atomic1.83.0 libboost-atomic1.83-dev
  libboost-chrono1.83.0t64 libboost-chrono1.83-dev
  libboost-date-time1.83.0 libboost-date-time1.83-dev
)
# Target: Ubuntu 24.04 = glibc 2.39, libstdc++6 from GCC 14 (GLIBCXX_3.4.33, CXXABI_1.3.15)
MAX_GLIBC="2.39"
MAX_GLIBCXX="3.4.33"
MAX_CXXABI="1.3.15"
ARCH="amd64"
FORCE_BOOST_SOURCE=0
WITH_BOOST_PYTHON=1
MIRROR=""

usage() {
  cat <<EOF
Usage: scripts/gather_offline.sh [options] DIR

Collects the Caffe source tarball and the .deb packages (glog, gflags,
libunwind, Boost 1.83) that scripts/build_caffe.sh --offline DIR needs on an
air-gapped GPU node, and writes DIR/MANIFEST with their sha256.

Options:
  --mirror URL         Debian mirror (default: the one in this machine's apt
                       sources, else http://deb.debian.org/debian)
  --max-glibc V        newest GLIBC_ symbol version the target provides (default ${MAX_GLIBC})
  --max-glibcxx V      newest GLIBCXX_ version of the target's libstdc++ (default ${MAX_GLIBCXX})
  --max-cxxabi V       newest CXXABI_ version of the target's libstdc++ (default ${MAX_CXXABI})
  --boost-source       gather Boost 1.83 source instead of trixie binaries
  --no-boost-python    leave out Boost.Python's sources (boost-python-src/, ~0.3 MB;
                       without them build_caffe.sh --offline builds no pycaffe on a
                       node that lacks libboost_python3X)
  -h, --help           this help

Then: copy DIR to the GPU node and run  scripts/build_caffe.sh --offline DIR
EOF
}

log()  { printf '[gather_offline] %s\n' "$*" >&2; }
warn() { printf '[gather_offline] WARNING: %s\n' "$*" >&2; }
die()  { printf '[gather_offline] ERROR: %s\n' "$*" >&2; exit 1; }

OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mirror) MIRROR="${2:?}"; shift 2 ;;
    --max-glibc) MAX_GLIBC="${2:?}"; shift 2 ;;
    --max-glibcxx) MAX_GLIBCXX="${2:?}"; shift 2 ;;
    --max-cxxabi) MAX_CXXABI="${2:?}"; shift 2 ;;
    --boost-source) FORCE_BOOST_SOURCE=1; shift ;;
    --no-boost-python) WITH_BOOST_PYTHON=0; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) [[ -z "$OUT" ]] || die "only one DIR allowed"; OUT="$1"; shift ;;
  esac
done
[[ -n "$OUT" ]] || { usage >&2; exit 2; }
for tool in apt-get dpkg-deb objdump sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required (apt-get install apt dpkg binutils coreutils)"
done

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

sha256_of() { sha256sum "$1" | awk '{print $1}'; }

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"   # debian_mirror
[[ -n "$MIRROR" ]] || MIRROR="$(debian_mirror)"
log "Debian mirror: $MIRROR"

if [[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
  SIGNED="signed-by=/usr/share/keyrings/debian-archive-keyring.gpg"
else
  SIGNED="trusted=yes"
  warn "no Debian archive keyring: package lists are not signature-checked (sha256 is recorded in MANIFEST)"
fi

# apt-get with a private sources list, lists and cache for one suite.
# usage: apt_private SUITE TYPE(deb|deb-src) -- apt-get args...
apt_private() {
  local suite="$1" type="$2"; shift 3
  local d="$WORK/apt-$suite-$type"
  if [[ ! -d "$d" ]]; then
    mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/parts" "$d/prefs"
    echo "$type [${SIGNED}] ${MIRROR} ${suite} main" > "$d/sources.list"
    apt_private_opts "$d"
    log "apt-get update ($type $suite, private lists)"
    apt-get "${APT_OPTS[@]}" -q update >&2 || die "apt-get update for $suite failed"
  fi
  apt_private_opts "$d"
  apt-get "${APT_OPTS[@]}" "$@"
}
apt_private_opts() {
  local d="$1"
  APT_OPTS=(
    -o "Dir::Etc::SourceList=$d/sources.list"
    -o "Dir::Etc::SourceParts=$d/parts"
    -o "Dir::Etc::PreferencesParts=$d/prefs"
    -o "Dir::State::Lists=$d/lists"
    -o "Dir::Cache=$d/cache"
    -o "APT::Architecture=${ARCH}"
    -o "APT::Architectures=${ARCH}"
    -o "Debug::NoLocking=1"
    -o "Acquire::Retries=3"
  )
  [[ $(id -u) -eq 0 ]] && APT_OPTS+=(-o "APT::Sandbox::User=root")
  return 0
}

# ---------------------------------------------------------------------------
# 1. Caffe source (pristine upstream = Debian orig tarball)
get_caffe_source() {
  local dst="$OUT/$DEB_ORIG_TARBALL"
  if [[ -f "$dst" && "$(sha256_of "$dst")" == "$DEB_ORIG_SHA256" ]]; then
    log "$DEB_ORIG_TARBALL already present and verified"
    return
  fi
  local cached
  cached="$(cd "$(dirname "$0")/.." && pwd)/third_party/caffe/downloads/$DEB_ORIG_TARBALL"
  if [[ -f "$cached" && "$(sha256_of "$cached")" == "$DEB_ORIG_SHA256" ]]; then
    cp "$cached" "$dst"
  else
    mkdir -p "$WORK/src"
    (cd "$WORK/src" && apt_private bullseye deb-src -- -q source --download-only caffe >&2) ||
      die "apt-get source caffe (bullseye) failed"
    mv "$WORK/src/$DEB_ORIG_TARBALL" "$dst"
  fi
  local got
  got="$(sha256_of "$dst")"
  [[ "$got" == "$DEB_ORIG_SHA256" ]] || { rm -f "$dst"; die "sha256 mismatch for $DEB_ORIG_TARBALL: $got"; }
  log "verified $DEB_ORIG_TARBALL sha256=$got"
}

# ---------------------------------------------------------------------------
# 2. .deb packages
download_debs() {
  local suite="$1"; shift
  mkdir -p "$OUT/debs"
  (cd "$OUT/debs" && apt_private "$suite" deb -- -q download "$@" >&2) ||
    die "apt-get download from $suite failed for: $*"
}

# Newest version of symbol set PREFIX_ (e.g. GLIBC_) needed by a file.
max_symver() {
  objdump -T "$1" 2>/dev/null | grep -o "\b$2_[0-9][0-9.]*" | sed "s/^$2_//" | sort -uV | tail -1
}
version_le() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" == "$1" ]]; }

# Check every shared object in the given .debs; print a report line per
# library into PACKAGES.txt; return 1 if any needs more than the target has.
check_debs_abi() {
  local ok=0 deb d f g gx ca
  for deb in "$@"; do
    d="$WORK/x/$(basename "$deb")"
    mkdir -p "$d"
    dpkg-deb -x "$deb" "$d"
    while IFS= read -r -d '' f; do
      [[ -L "$f" ]] && continue
      g="$(max_symver "$f" GLIBC)"; gx="$(max_symver "$f" GLIBCXX)"; ca="$(max_symver "$f" CXXABI)"
      local verdict="ok"
      if [[ -n "$g" ]] && ! version_le "$g" "$MAX_GLIBC"; then verdict="TOO NEW"; fi
      if [[ -n "$gx" ]] && ! version_le "$gx" "$MAX_GLIBCXX"; then verdict="TOO NEW"; fi
      if [[ -n "$ca" ]] && ! version_le "$ca" "$MAX_CXXABI"; then verdict="TOO NEW"; fi
      printf '#   %-34s GLIBC_%-6s GLIBCXX_%-8s CXXABI_%-8s %s\n' \
        "$(basename "$f")" "${g:--}" "${gx:--}" "${ca:--}" "$verdict" >> "$WORK/abi.txt"
      [[ "$verdict" == "ok" ]] || ok=1
    done < <(find "$d" -type f -name '*.so*' -print0)
  done
  return $ok
}

# Download trixie's boost1.83 orig tarball (once per run) into $WORK/bsrc; sets BOOST_ORIG.
BOOST_ORIG=""
fetch_boost_orig() {
  if [[ -z "$BOOST_ORIG" ]]; then
    mkdir -p "$WORK/bsrc"
    (cd "$WORK/bsrc" && apt_private trixie deb-src -- -q source --download-only boost1.83 >&2) ||
      die "apt-get source boost1.83 (trixie) failed"
    BOOST_ORIG="$(find "$WORK/bsrc" -maxdepth 1 -name 'boost1.83_*.orig.tar.*' | head -1)"
    [[ -n "$BOOST_ORIG" ]] || die "no boost1.83 orig tarball downloaded"
    log "Boost 1.83 source: $(basename "$BOOST_ORIG") sha256 $(sha256_of "$BOOST_ORIG")"
  fi
}

get_boost_source() {
  log "gathering Boost 1.83 source (trixie boost1.83) for a b2 build on the target"
  fetch_boost_orig
  mkdir -p "$OUT/boost-src"
  cp "$BOOST_ORIG" "$OUT/boost-src/"
  log "Boost source: $OUT/boost-src/$(basename "$BOOST_ORIG")"
}

# Boost.Python's sources only (the whole Boost source is ~80 MB, too big to carry by
# default): libs/python/src/** without numpy/ (boost_numpy is not built: pycaffe calls
# NumPy's C API itself; Debian patches only numpy/ for NumPy 2), the library's
# CMakeLists.txt and Jamfile (the reference for the source list and defines), the licence.
# Every header it needs is in libboost1.83-dev (boost/python/**), which the node has and
# the bundle carries.
get_boost_python_source() {
  fetch_boost_orig
  local dst="$OUT/boost-python-src" top
  rm -rf "$dst" "$WORK/bpx"
  mkdir -p "$WORK/bpx" "$dst"
  top="$({ tar -tf "$BOOST_ORIG" || true; } | head -1)"; top="${top%%/*}"
  [[ -n "$top" ]] || die "cannot list $(basename "$BOOST_ORIG")"
  # (Debian's orig tarball is the modular layout: headers under libs/*/include)
  tar -xf "$BOOST_ORIG" -C "$WORK/bpx" "$top/LICENSE_1_0.txt" "$top/libs/config/include/boost/version.hpp" \
      "$top/libs/python/src" "$top/libs/python/CMakeLists.txt" "$top/libs/python/build/Jamfile" ||
    die "Boost.Python sources not found in $(basename "$BOOST_ORIG")"
  local r="$WORK/bpx/$top"
  rm -rf "$r/libs/python/src/numpy"
  find "$r/libs/python/src" -type f ! -name '*.cpp' -delete
  cp -r "$r/libs/python/src" "$dst/src"
  mkdir -p "$dst/build"
  cp "$r/libs/python/CMakeLists.txt" "$dst/"
  cp "$r/libs/python/build/Jamfile" "$dst/build/"
  cp "$r/LICENSE_1_0.txt" "$dst/"
  local ver
  ver="$(sed -n 's/^#define BOOST_VERSION \([0-9]*\).*/\1/p' "$r/libs/config/include/boost/version.hpp")"
  [[ -n "$ver" ]] || die "no BOOST_VERSION in $(basename "$BOOST_ORIG")"
  {
    echo "Boost.Python sources (libs/python/src without numpy/, CMakeLists.txt, build/Jamfile)"
    echo "from: $(basename "$BOOST_ORIG") sha256 $(sha256_of "$BOOST_ORIG") (Debian trixie boost1.83)"
    echo "boost_version: $ver"
    echo "licence: Boost Software License 1.0 (LICENSE_1_0.txt)"
  } > "$dst/SOURCE"
  local n
  n="$(find "$dst/src" -name '*.cpp' | wc -l)"
  [[ $n -ge 20 ]] || die "only $n Boost.Python sources found"
  log "Boost.Python sources: $n files in $dst ($(du -sh "$dst" | cut -f1))"
}

main() {
  get_caffe_source

  rm -rf "$OUT/debs" "$OUT/boost-src" "$OUT/boost-python-src"
  : > "$WORK/abi.txt"
  log "downloading bookworm packages: ${BOOKWORM_PKGS[*]}"
  download_debs bookworm "${BOOKWORM_PKGS[@]}"
  local bookworm_debs=("$OUT"/debs/*.deb)
  echo "# bookworm" >> "$WORK/abi.txt"
  check_debs_abi "${bookworm_debs[@]}" ||
    die "bookworm packages need a newer glibc/libstdc++ than the target ($MAX_GLIBC/$MAX_GLIBCXX): see above"

  local boost_mode="trixie .debs"
  if [[ $FORCE_BOOST_SOURCE -eq 1 ]]; then
    boost_mode="source (--boost-source)"
    get_boost_source
  else
    log "downloading trixie Boost 1.83 packages: ${BOOST_PKGS[*]}"
    mkdir -p "$WORK/boostdebs"
    (cd "$WORK/boostdebs" && apt_private trixie deb -- -q download "${BOOST_PKGS[@]}" >&2) ||
      die "apt-get download (trixie) failed"
    echo "# trixie (Boost 1.83)" >> "$WORK/abi.txt"
    if check_debs_abi "$WORK"/boostdebs/*.deb; then
      mv "$WORK"/boostdebs/*.deb "$OUT/debs/"
    else
      warn "trixie Boost 1.83 binaries need a newer glibc/libstdc++ than the target; using source instead"
      boost_mode="source (trixie binaries too new)"
      get_boost_source
    fi
  fi

  local bp_mode="not gathered (--no-boost-python)"
  if [[ $WITH_BOOST_PYTHON -eq 1 ]]; then
    get_boost_python_source
    bp_mode="sources in boost-python-src/ ($(sed -n 's/^from: //p' "$OUT/boost-python-src/SOURCE"))"
  fi

  {
    echo "# Offline bundle for scripts/build_caffe.sh --offline (made $(date -u +%Y-%m-%dT%H:%M:%SZ))"
    echo "# Caffe: $DEB_ORIG_TARBALL sha256 $DEB_ORIG_SHA256 (= BVLC caffe 99bd99795dcdf0b1d3086a8d67ab1782a8a08383)"
    echo "# Boost 1.83: $boost_mode"
    echo "# Boost.Python 1.83 (pycaffe): $bp_mode"
    echo "# Target limits: GLIBC <= $MAX_GLIBC, GLIBCXX <= $MAX_GLIBCXX, CXXABI <= $MAX_CXXABI"
    echo "# Packages:"
    local deb
    for deb in "$OUT"/debs/*.deb; do
      [[ -e "$deb" ]] || continue
      printf '#   %-32s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)"
    done
    echo "# Newest symbol versions needed per shared library:"
    cat "$WORK/abi.txt"
  } > "$OUT/PACKAGES.txt"

  (cd "$OUT" && find . -type f ! -name MANIFEST -printf '%P\n' | LC_ALL=C sort |
     xargs -d '\n' sha256sum > MANIFEST)
  (cd "$OUT" && sha256sum --quiet -c MANIFEST) || die "MANIFEST self-check failed"
  cat "$OUT/PACKAGES.txt" >&2
  log "done: $(wc -l < "$OUT/MANIFEST") files in $OUT ($(du -sh "$OUT" | cut -f1))"
  log "next: copy $OUT to the GPU node and run  scripts/build_caffe.sh --offline $OUT"
}

main
