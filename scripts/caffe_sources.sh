# What scripts/build_caffe.sh obtains besides the series (sourced by it, not run): the
# pinned Caffe source (the Debian orig tarball, a git clone, or a given tree or tarball,
# each verified) and, with --offline, the bundle of scripts/gather_offline.sh (its .debs
# extracted, Boost and Boost.Python compiled from its sources). The functions use
# build_caffe.sh's settings (PREFIX, PRISTINE, DEPS, the pinned commit and tarball, ...).

# ----------------------------------------------------------------------------
# Source acquisition. Each fetcher leaves an unmodified tree in $PRISTINE and
# writes a one-line identity into $PRISTINE/$STAMP_NAME.

# Extract a tarball (with or without a top-level directory) into $PRISTINE.
extract_tarball() {
  local tarball="$1" id="$2" tmp
  tmp="$(mktemp -d "${PREFIX}/.extract.XXXXXX")"
  log "extracting $(basename "$tarball")"
  tar -xf "$tarball" -C "$tmp"
  local root="$tmp"
  if [[ ! -f "$tmp/CMakeLists.txt" ]]; then
    local entries=("$tmp"/*)
    if [[ ${#entries[@]} -eq 1 && -f "${entries[0]}/CMakeLists.txt" ]]; then
      root="${entries[0]}"
    else
      rm -rf "$tmp"
      die "$tarball does not look like a Caffe source tarball (no CMakeLists.txt)"
    fi
  fi
  rm -rf "$PRISTINE"
  mv "$root" "$PRISTINE"
  rm -rf "$tmp"
  echo "$id" > "$PRISTINE/$STAMP_NAME"
}

check_known_files() {
  local tree="$1" ok=1 entry f h
  for f in include/caffe/caffe.hpp src/caffe/layers/cudnn_conv_layer.cpp cmake/Cuda.cmake; do
    [[ -f "$tree/$f" ]] || die "$tree is not a Caffe source tree (missing $f)"
  done
  for entry in "${KNOWN_FILES[@]}"; do
    f="${entry%% *}"; h="${entry##* }"
    if [[ "$(sha256_of "$tree/$f")" != "$h" ]]; then
      ok=0
      warn "$f differs from Caffe ${CAFFE_COMMIT:0:12}; the patch series may not apply"
    fi
  done
  [[ $ok -eq 1 ]] && log "known files match Caffe ${CAFFE_COMMIT:0:12}"
  return 0
}

# debian_mirror
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fetch_debian() {
  local tarball="${DOWNLOADS}/${DEB_ORIG_TARBALL}"
  mkdir -p "$DOWNLOADS"
  if [[ -f "$tarball" && "$(sha256_of "$tarball")" == "$DEB_ORIG_SHA256" ]]; then
    log "using cached $tarball"
  else
    rm -f "$tarball"
    local mirror apt_dir signed
    mirror="$(debian_mirror)"
    apt_dir="${DOWNLOADS}/apt"
    rm -rf "$apt_dir"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts" "$apt_dir/get"
    if [[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
      signed="signed-by=/usr/share/keyrings/debian-archive-keyring.gpg"
    else
      # no Debian keyring (e.g. on Ubuntu): the orig tarball is verified by sha256 below
      signed="trusted=yes"
      warn "no Debian archive keyring; relying on the sha256 check of the orig tarball"
    fi
    echo "deb-src [${signed}] ${mirror} ${DEB_SRC_SUITE} main" > "$apt_dir/sources.list"
    log "deb-src entry (private, machine apt config untouched): $(cat "$apt_dir/sources.list")"
    local apt_opts=(
      -o "Dir::Etc::SourceList=${apt_dir}/sources.list"
      -o "Dir::Etc::SourceParts=${apt_dir}/parts"
      -o "Dir::State::Lists=${apt_dir}/lists"
      -o "Dir::Cache=${apt_dir}/cache"
      -o "Debug::NoLocking=1"
      -o "Acquire::Retries=3"
    )
    [[ $(id -u) -eq 0 ]] && apt_opts+=(-o "APT::Sandbox::User=root")
    if command -v apt-get >/dev/null 2>&1 &&
       apt-get "${apt_opts[@]}" -q update >&2 &&
       (cd "$apt_dir/get" && apt-get "${apt_opts[@]}" -q source --download-only "${DEB_SRC_PKG}" >&2) &&
       [[ -f "$apt_dir/get/${DEB_ORIG_TARBALL}" ]]; then
      mv "$apt_dir/get/${DEB_ORIG_TARBALL}" "$tarball"
    else
      warn "apt-get source failed; trying ${mirror}/${DEB_POOL_PATH} directly"
      if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 3 -o "$tarball" "${mirror}/${DEB_POOL_PATH}" || { rm -f "$tarball"; return 1; }
      elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$tarball" "${mirror}/${DEB_POOL_PATH}" || { rm -f "$tarball"; return 1; }
      else
        return 1
      fi
    fi
    rm -rf "$apt_dir"
  fi
  local got
  got="$(sha256_of "$tarball")"
  if [[ "$got" != "$DEB_ORIG_SHA256" ]]; then
    rm -f "$tarball"
    die "sha256 mismatch for ${DEB_ORIG_TARBALL}: got $got, expected $DEB_ORIG_SHA256"
  fi
  log "verified ${DEB_ORIG_TARBALL} sha256=$got (= Caffe ${CAFFE_COMMIT})"
  extract_tarball "$tarball" "debian:${DEB_ORIG_SHA256}"
}

fetch_git() {
  command -v git >/dev/null 2>&1 || { warn "git not found"; return 1; }
  local tmp="${PREFIX}/.git-clone"
  rm -rf "$tmp"
  log "git clone ${CAFFE_GIT_URL} (commit ${CAFFE_COMMIT})"
  GIT_TERMINAL_PROMPT=0 timeout 600 git clone --quiet "$CAFFE_GIT_URL" "$tmp" >&2 || { rm -rf "$tmp"; return 1; }
  git -C "$tmp" -c advice.detachedHead=false checkout --quiet "$CAFFE_COMMIT" >&2 || { rm -rf "$tmp"; return 1; }
  local head
  head="$(git -C "$tmp" rev-parse HEAD)"
  if [[ "$head" != "$CAFFE_COMMIT" ]]; then
    rm -rf "$tmp"
    die "git checkout gave $head, expected $CAFFE_COMMIT"
  fi
  log "verified git HEAD = $head"
  rm -rf "$PRISTINE"
  mv "$tmp" "$PRISTINE"
  echo "git:${CAFFE_COMMIT}" > "$PRISTINE/$STAMP_NAME"
}

fetch_user_source() {
  local src="$1"
  [[ -e "$src" ]] || die "--source $src does not exist"
  if [[ -d "$src" ]]; then
    src="$(cd "$src" && pwd)"
    local id="dir:${src}"
    if [[ -d "$src/.git" ]] && command -v git >/dev/null 2>&1; then
      local head
      head="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)"
      log "source $src is a git checkout at $head"
      [[ "$head" == "$CAFFE_COMMIT" ]] || warn "expected commit $CAFFE_COMMIT"
      id="dir:${src}@${head}"
    fi
    check_known_files "$src"
    if [[ -f "$PRISTINE/$STAMP_NAME" && "$(cat "$PRISTINE/$STAMP_NAME")" == "$id" ]]; then
      log "pristine copy of $src already present"
      return 0
    fi
    log "copying $src to $PRISTINE"
    rm -rf "$PRISTINE"
    mkdir -p "$PRISTINE"
    (cd "$src" && tar --exclude=.git -cf - .) | (cd "$PRISTINE" && tar -xf -)
    echo "$id" > "$PRISTINE/$STAMP_NAME"
  else
    local sum
    sum="$(sha256_of "$src")"
    log "source tarball $src sha256=$sum"
    if [[ "$sum" == "$DEB_ORIG_SHA256" ]]; then
      log "matches Debian ${DEB_ORIG_TARBALL} (= Caffe ${CAFFE_COMMIT})"
    else
      warn "not the known Debian orig tarball (${DEB_ORIG_SHA256}); checking file contents"
    fi
    if [[ -f "$PRISTINE/$STAMP_NAME" && "$(cat "$PRISTINE/$STAMP_NAME")" == "tarball:${sum}" ]]; then
      log "pristine tree from this tarball already present"
    else
      extract_tarball "$src" "tarball:${sum}"
    fi
    check_known_files "$PRISTINE"
  fi
}

obtain_source() {
  if [[ -n "$SOURCE" ]]; then
    fetch_user_source "$SOURCE"
    return
  fi
  # A pristine tree from an earlier verified fetch is reused.
  if [[ -f "$PRISTINE/$STAMP_NAME" ]]; then
    local id
    id="$(cat "$PRISTINE/$STAMP_NAME")"
    if [[ "$id" == "debian:${DEB_ORIG_SHA256}" || "$id" == "git:${CAFFE_COMMIT}" ]]; then
      log "reusing verified pristine tree ($id)"
      return
    fi
  fi
  case "$FETCH" in
    debian) fetch_debian || die "could not get the Debian source package" ;;
    git)    fetch_git || die "git clone of ${CAFFE_GIT_URL} failed" ;;
    auto)
      fetch_debian || { warn "Debian source package unavailable; trying git"; fetch_git; } ||
        die "could not obtain Caffe source (try --source PATH|TARBALL or --offline DIR)" ;;
  esac
}

# ----------------------------------------------------------------------------
# Offline bundle (from scripts/gather_offline.sh)
setup_offline() {
  local dir
  dir="$(cd "$OFFLINE_DIR" 2>/dev/null && pwd)" || die "--offline: no such directory $OFFLINE_DIR"
  [[ -f "$dir/MANIFEST" ]] || die "$dir/MANIFEST missing (was it made by scripts/gather_offline.sh?)"
  log "verifying $dir/MANIFEST"
  (cd "$dir" && sha256sum --quiet -c MANIFEST) >&2 || die "offline bundle is corrupt (sha256 mismatch)"
  [[ -f "$dir/${DEB_ORIG_TARBALL}" ]] || die "$dir/${DEB_ORIG_TARBALL} missing"
  [[ -n "$SOURCE" ]] || SOURCE="$dir/${DEB_ORIG_TARBALL}"

  local stamp="$DEPS/.ucudnn-manifest" want
  want="$(sha256_of "$dir/MANIFEST")"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "offline dependencies already extracted in $DEPS"
  else
    rm -rf "$DEPS"
    mkdir -p "$DEPS"
    local deb n=0
    for deb in "$dir"/debs/*.deb; do
      [[ -e "$deb" ]] || continue
      if command -v dpkg-deb >/dev/null 2>&1; then
        dpkg-deb -x "$deb" "$DEPS"
      else
        local t
        t="$(mktemp -d)"
        (cd "$t" && ar x "$deb" && tar -xf data.tar.* -C "$DEPS")
        rm -rf "$t"
      fi
      n=$((n + 1))
    done
    log "extracted $n .deb packages into $DEPS"
    if compgen -G "$dir/boost-src/*.tar.*" >/dev/null; then
      build_boost_from_source "$dir"
    fi
    echo "$want" > "$stamp"
  fi
}

# Fallback used when gather_offline.sh could not find glibc-compatible Boost
# 1.83 binaries: build thread/filesystem/system/atomic (+chrono, date_time)
# from source into $DEPS/usr, with Boost's CMake build (Boost >= 1.82), or b2.
build_boost_from_source() {
  local dir="$1" tarball work root
  tarball="$(find "$dir/boost-src" -maxdepth 1 -name '*.tar.*' | head -1)"
  work="${PREFIX}/boost-build"
  rm -rf "$work"
  mkdir -p "$work"
  tar -xf "$tarball" -C "$work"
  root="$(dirname "$(find "$work" -maxdepth 2 -name bootstrap.sh | head -1)")"
  [[ -f "$root/bootstrap.sh" ]] || die "no Boost source tree in $tarball"
  local libdir="$DEPS/usr/lib/x86_64-linux-gnu"
  if [[ -f "$root/CMakeLists.txt" ]] && command -v cmake >/dev/null 2>&1; then
    log "building Boost thread/filesystem/system/atomic from $(basename "$tarball") (CMake)"
    cmake -S "$root" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DBUILD_TESTING=OFF "-DBOOST_INCLUDE_LIBRARIES=thread;filesystem;system;atomic;chrono;date_time" \
      -DCMAKE_INSTALL_PREFIX="$DEPS/usr" -DCMAKE_INSTALL_LIBDIR=lib/x86_64-linux-gnu >&2 &&
      cmake --build "$work/build" -j "$JOBS" >&2 &&
      cmake --install "$work/build" >&2 || die "Boost build failed"
  else
    # Debian's orig tarball lacks the generated jamgram.cpp: b2 needs bison
    if [[ ! -f "$root/tools/build/src/engine/jamgram.cpp" ]] && ! command -v bison >/dev/null 2>&1; then
      die "building b2 from this Boost source needs bison (or use cmake)"
    fi
    log "building Boost thread/filesystem/system/atomic from $(basename "$tarball") (b2)"
    (cd "$root" &&
     ./bootstrap.sh --with-libraries=thread,filesystem,system,atomic,chrono,date_time >&2 &&
     ./b2 -j"$JOBS" --prefix="$DEPS/usr" --libdir="$libdir" \
          variant=release link=shared threading=multi runtime-link=shared install >&2) ||
      die "Boost build failed"
  fi
  touch "$DEPS/.boost-from-source"
  rm -rf "$work"
}

# ----------------------------------------------------------------------------
# Boost.Python for pycaffe, compiled from the offline bundle's sources

# A CMake package boost_python-VER (as Boost's own installs have) for the library built
# above, so that Boost's CMake package (BoostConfig.cmake, used with --boost-source
# bundles) finds the component python: one imported target Boost::python.
write_boost_python_config() {
  local libdir="$1" soname="$2" bver="$3" d
  d="$libdir/cmake/boost_python-$bver"
  mkdir -p "$d"
  cat > "$d/boost_python-config.cmake" <<EOF
# Written by scripts/build_caffe.sh: Boost.Python $bver compiled from the offline bundle.
if(TARGET Boost::python)
  return()
endif()
add_library(Boost::python SHARED IMPORTED)
set_target_properties(Boost::python PROPERTIES
  IMPORTED_LOCATION "$libdir/$soname"
  IMPORTED_SONAME "$soname"
  INTERFACE_COMPILE_DEFINITIONS "BOOST_PYTHON_NO_LIB;BOOST_PYTHON_DYN_LINK")
if(TARGET Boost::headers)
  set_property(TARGET Boost::python APPEND PROPERTY INTERFACE_LINK_LIBRARIES Boost::headers)
endif()
EOF
  cat > "$d/boost_python-config-version.cmake" <<EOF
set(PACKAGE_VERSION "$bver")
if(NOT PACKAGE_FIND_VERSION OR PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  set(PACKAGE_VERSION_EXACT TRUE)
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
EOF
}

# BOOST_VERSION (e.g. 108300) of the Boost headers in include dir $1, empty if none.
boost_header_version() {
  [[ -f "$1/boost/version.hpp" ]] || return 0
  sed -n 's/^#define BOOST_VERSION \([0-9]*\).*/\1/p' "$1/boost/version.hpp" | head -1
}

# Compile Boost.Python (libboost_python3X) for Python $1 from the sources in $2
# (gather_offline.sh's boost-python-src/: libs/python/src of the Boost 1.83 source,
# SOURCE records its version) into $DEPS/usr/lib/x86_64-linux-gnu, as Boost's own
# builds name it: libboost_python312.so.1.83.0 (its SONAME) + libboost_python312.so.
# Headers: the Boost headers Caffe is compiled with ($DEPS/usr/include, from the
# bundle's libboost1.83-dev), else the system's, of the same BOOST_VERSION as the
# sources. Flags as Boost's b2/CMake builds: BOOST_PYTHON_SOURCE + DYN_LINK, hidden
# visibility with the library's exports, not linked to libpython (the interpreter or
# libcaffe provides it). boost_numpy is not built: pycaffe uses NumPy's C API itself.
# Sets BOOST_PYTHON_LIB; returns 1 (pycaffe off) when no matching headers exist.
build_boost_python() {
  local py="$1" src="$2" ver tag want hv binc="" inc pyinc
  ver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  tag="${ver/./}"
  want="$(sed -n 's/^boost_version: *//p' "$src/SOURCE")"
  [[ "$want" =~ ^[0-9]+$ ]] || die "$src/SOURCE names no boost_version"
  for inc in "$DEPS/usr/include" /usr/include; do
    [[ -f "$inc/boost/python.hpp" ]] || continue
    hv="$(boost_header_version "$inc")"
    if [[ "$hv" == "$want" ]]; then binc="$inc"; break; fi
    log "Boost.Python: $inc has Boost $hv headers, the sources are $want; not used"
  done
  if [[ -z "$binc" ]]; then
    log "Boost.Python: no Boost headers (with boost/python.hpp) of version $want; cannot build libboost_python$tag"
    return 1
  fi
  pyinc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  local bver="$((want / 100000)).$((want / 100 % 1000)).$((want % 100))"
  local libdir="$DEPS/usr/lib/x86_64-linux-gnu"
  local soname="libboost_python${tag}.so.${bver}"
  local cxx="${CXX:-g++}"
  local flags=(-std=c++17 -O2 -DNDEBUG -fPIC -pthread -Wno-deprecated-declarations
               -fvisibility=hidden -fvisibility-inlines-hidden
               -DBOOST_PYTHON_SOURCE -DBOOST_PYTHON_DYN_LINK -DBOOST_PYTHON_NO_LIB -DBOOST_ALL_NO_LIB
               -I"$binc" -I"$pyinc")
  local stamp="$libdir/.boost_python${tag}.stamp" id
  id="python=$(readlink -f "$py") $("$py" -c 'import sys; print(sys.version.split()[0])')"$'\n'
  id+="source=$(sha256_of "$src/SOURCE") $(cd "$src" && find src -name '*.cpp' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"$'\n'
  id+="cxx=$("$cxx" -dumpfullversion 2>/dev/null || "$cxx" -dumpversion) ${flags[*]} shared-libstdc++"
  if [[ -f "$stamp" && -f "$libdir/$soname" && "$(cat "$stamp")" == "$id" ]]; then
    BOOST_PYTHON_LIB="$libdir/libboost_python${tag}.so"
    log "Boost.Python: $libdir/$soname already built (unchanged)"
    return 0
  fi
  local srcs=() f
  while IFS= read -r f; do srcs+=("$f"); done < <(find "$src/src" -name '*.cpp' | LC_ALL=C sort)
  [[ ${#srcs[@]} -ge 20 ]] || die "Boost.Python: only ${#srcs[@]} sources in $src/src"
  # objects are named by basename (compiled in one folder): must be unique
  [[ -z "$(printf '%s\n' "${srcs[@]##*/}" | sort | uniq -d)" ]] || die "Boost.Python: duplicate source names in $src/src"
  local obj="$PREFIX/boost-python-build/py$tag" t0=$SECONDS
  rm -rf "$obj"
  mkdir -p "$obj" "$libdir"
  log "Boost.Python $bver: compiling ${#srcs[@]} sources for Python $ver (headers $binc, $pyinc) with -j$JOBS"
  (cd "$obj" && printf '%s\0' "${srcs[@]}" | xargs -0 -n 1 -P "$JOBS" "$cxx" "${flags[@]}" -c) >&2 ||
    die "Boost.Python: compiling failed (see above; --no-python builds Caffe without pycaffe)"
  rm -f "$libdir/$soname" "$libdir/libboost_python${tag}.so" "$stamp"
  # Link the SHARED libstdc++ by path (Note [Shared libstdc++]).
  local stdcxx
  stdcxx="$("$cxx" -print-file-name=libstdc++.so.6)"
  if [[ "$stdcxx" != /* || ! -e "$stdcxx" ]]; then
    log "Boost.Python: $cxx finds no shared libstdc++.so.6; pycaffe not built"
    return 1
  fi
  "$cxx" -shared -pthread -Wl,-soname,"$soname" -o "$libdir/$soname" "$obj"/*.o "$stdcxx" >&2 ||
    die "Boost.Python: linking $soname failed"
  if ! ldd "$libdir/$soname" | grep -q 'libstdc++\.so'; then
    rm -f "$libdir/$soname"
    log "Boost.Python: $soname does not load the shared libstdc++ (a static copy would break pycaffe); pycaffe not built"
    return 1
  fi
  ln -s "$soname" "$libdir/libboost_python${tag}.so"
  # every symbol resolves inside this Python (the interpreter provides libpython's)
  "$py" -c 'import ctypes, os, sys; ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)' "$libdir/$soname" ||
    die "Boost.Python: $libdir/$soname does not load into $py"
  write_boost_python_config "$libdir" "$soname" "$bver"
  printf '%s' "$id" > "$stamp"
  rm -rf "$obj"
  BOOST_PYTHON_LIB="$libdir/libboost_python${tag}.so"
  log "Boost.Python: built $libdir/$soname in $((SECONDS - t0)) s"
}
