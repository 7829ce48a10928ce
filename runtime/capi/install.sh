#!/usr/bin/env bash
# Build libalignmalloc and install it with its headers, a pkg-config file and a CMake package:
#
#   bash runtime/capi/install.sh --prefix /usr/local          # builds with cargo, then installs
#   bash runtime/capi/install.sh --prefix DIR --prebuilt target/release   # no build: install these
#
# The installed libraries carry their symbols but no debug info (the shared one is about 2 MB
# instead of 23); --keep-debug-info installs them as built, line tables included, for debuggers
# and backtraces with file and line.
#
# Afterwards (PREFIX/lib/pkgconfig on PKG_CONFIG_PATH for a prefix pkg-config does not search):
#   nvcc app.cu $(pkg-config --cflags --libs alignmalloc)
#   find_package(alignmalloc) ... target_link_libraries(app alignmalloc::alignmalloc)
# and at run time the library must be found: PREFIX/lib on LD_LIBRARY_PATH, or run ldconfig.
set -euo pipefail

usage() {
  echo "usage: $0 --prefix DIR [--prebuilt DIR_WITH_libalignmalloc.so_AND_.a] [--keep-debug-info]" >&2
  exit 2
}

prefix=""
prebuilt=""
keep_debug_info=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || usage; prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    --prebuilt) [ $# -ge 2 ] || usage; prebuilt="$2"; shift 2 ;;
    --prebuilt=*) prebuilt="${1#--prebuilt=}"; shift ;;
    --keep-debug-info) keep_debug_info=1; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[ -n "$prefix" ] || { echo "--prefix is required" >&2; usage; }

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if [ -z "$prebuilt" ]; then
  command -v cargo >/dev/null || {
    echo "cargo is not installed: install Rust (rustup), or pass --prebuilt with built libraries" >&2
    exit 1
  }
  (cd "$repo" && cargo build --release -p alignmalloc-capi)
  # Where cargo built it: CARGO_TARGET_DIR or a cargo config may move the target folder, and a
  # stale target/ beside the sources must not be installed instead.
  target_dir="$(cd "$repo" && cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
  [ -n "$target_dir" ] || { echo "cargo metadata did not name the target folder" >&2; exit 1; }
  prebuilt="$target_dir/release"
fi
for lib in libalignmalloc.so libalignmalloc.a; do
  [ -f "$prebuilt/$lib" ] || { echo "$prebuilt/$lib is missing" >&2; exit 1; }
done

mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
libdir="$prefix/lib"
includedir="$prefix/include"
install -d "$libdir/pkgconfig" "$libdir/cmake/alignmalloc" "$includedir/alignmalloc/detail"
install -m 0755 "$prebuilt/libalignmalloc.so" "$libdir/"
install -m 0644 "$prebuilt/libalignmalloc.a" "$libdir/"
if [ "$keep_debug_info" = 0 ]; then
  command -v strip >/dev/null || {
    echo "strip (binutils) is not installed: install it, or pass --keep-debug-info" >&2
    exit 1
  }
  strip --strip-debug "$libdir/libalignmalloc.so" "$libdir/libalignmalloc.a"
fi
install -m 0644 "$here/include/alignmalloc.h" "$includedir/"
# The same device headers NVRTC compiles (device/include).
install -m 0644 "$repo/device/include/alignmalloc/alignmalloc.cuh" "$includedir/alignmalloc/"
install -m 0644 "$repo"/device/include/alignmalloc/detail/* "$includedir/alignmalloc/detail/"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n 1)"
# What a static link of the Rust library needs besides it.
static_deps="-lpthread -ldl -lm -lrt"

cat >"$libdir/pkgconfig/alignmalloc.pc" <<EOF
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: alignmalloc
Description: Dynamic memory allocator for CUDA Unified Memory (C ABI and device header)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lalignmalloc
Libs.private: $static_deps
EOF

cat >"$libdir/cmake/alignmalloc/alignmallocConfig.cmake" <<'EOF'
# alignmalloc's CMake package: find_package(alignmalloc) gives
#   alignmalloc::alignmalloc         the shared library, its headers (C and CUDA C++)
#   alignmalloc::alignmalloc_static  the static library and what it needs from the system
get_filename_component(_alignmalloc_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET alignmalloc::alignmalloc)
  add_library(alignmalloc::alignmalloc SHARED IMPORTED)
  set_target_properties(alignmalloc::alignmalloc PROPERTIES
    IMPORTED_LOCATION "${_alignmalloc_prefix}/lib/libalignmalloc.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_alignmalloc_prefix}/include")
  add_library(alignmalloc::alignmalloc_static STATIC IMPORTED)
  set_target_properties(alignmalloc::alignmalloc_static PROPERTIES
    IMPORTED_LOCATION "${_alignmalloc_prefix}/lib/libalignmalloc.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_alignmalloc_prefix}/include"
    INTERFACE_LINK_LIBRARIES "pthread;dl;m;rt")
endif()
set(alignmalloc_INCLUDE_DIRS "${_alignmalloc_prefix}/include")
set(alignmalloc_LIBRARIES alignmalloc::alignmalloc)
unset(_alignmalloc_prefix)
EOF

cat >"$libdir/cmake/alignmalloc/alignmallocConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF

echo "installed alignmalloc $version into $prefix"
echo "  pkg-config: PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs alignmalloc"
echo "  CMake:      -DCMAKE_PREFIX_PATH=$prefix, then find_package(alignmalloc)"
echo "  run time:   LD_LIBRARY_PATH=$libdir (or add $libdir to the loader's configuration)"
