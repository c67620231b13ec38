#!/usr/bin/env bash
# Installs a built libbptrain into a temporary prefix, then builds and runs a separate consumer project
# against it twice: through find_package(bptrain) and through pkg-config, each with the shared and the
# static library. Usage: check_downstream.sh BUILD_DIR [WORK_DIR]
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=${2:-$(mktemp -d)}
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix
cc=${CC:-cc}

step() { printf '\n== %s\n' "$*"; }

step "install into $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
test -f "$prefix/include/bptrain.h"
soname=$(readelf -d "$prefix"/lib*/libbptrain.so | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
echo "SONAME $soname"
[[ $soname == libbptrain.so.[0-9]* ]] || { echo "unexpected SONAME '$soname'" >&2; exit 1; }

step "find_package(bptrain)"
cmake -S "$here" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$work/cmake.log"
cmake --build "$work/cmake-build" > "$work/cmake-build.log"
"$work/cmake-build/consumer_shared"
"$work/cmake-build/consumer_static"
if command -v "${CXX:-c++}" > /dev/null; then
  test -f "$prefix/include/bptrain.hpp"
  "$work/cmake-build/consumer_cxx"
fi
if readelf -d "$work/cmake-build/consumer_static" | grep -q 'NEEDED.*libbptrain'; then
  echo "consumer_static depends on the shared libbptrain" >&2
  exit 1
fi

step "pkg-config bptrain"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/${BPT_INSTALL_LIBDIR:-lib}/pkgconfig"
pkg-config --modversion bptrain
grep -qx 'License: MIT' "$prefix"/lib*/pkgconfig/bptrain.pc || { echo "bptrain.pc states no License: MIT" >&2; exit 1; }
# Dependencies stay private: a dynamic link needs -lbptrain alone; --static adds them.
libs=$(pkg-config --libs bptrain)
echo "pkg-config --libs: $libs"
[[ $(echo "$libs" | tr ' ' '\n' | grep -c '^-l') -eq 1 ]] || { echo "private dependencies leak into Libs" >&2; exit 1; }
echo "pkg-config --static --libs: $(pkg-config --static --libs bptrain)"
# CUDA, NCCL and MPI belong to the loadable modules alone: a static link never needs them.
if pkg-config --static --libs bptrain | grep -Eq 'cudart|cudnn|cublas|nccl|mpi'; then
  echo "pkg-config --static lists a module's dependency" >&2
  exit 1
fi
echo "modules: $(pkg-config --variable=modules bptrain) in $(pkg-config --variable=moduledir bptrain)"
flags=(-std=c11 -Wall -Wextra -pedantic -Werror)
# shellcheck disable=SC2046 # pkg-config output is meant to be split into words
"$cc" "${flags[@]}" "$here/consumer.c" $(pkg-config --cflags --libs bptrain) -Wl,-rpath,"$prefix/lib" \
  -o "$work/pkg_shared"
"$work/pkg_shared"
static_libs=$(pkg-config --static --libs bptrain | sed 's/-lbptrain\b/-l:libbptrain.a/')
# shellcheck disable=SC2046,SC2086
"$cc" "${flags[@]}" "$here/consumer.c" $(pkg-config --cflags bptrain) $static_libs -o "$work/pkg_static"
"$work/pkg_static"
if command -v python3 > /dev/null; then
  step "installed Python module"
  env -u BPTRAIN_LIBRARY PYTHONPATH="$prefix/share/bptrain/python" PYTHONDONTWRITEBYTECODE=1 python3 -c \
    'import bptrain; print("bptrain", bptrain.version(), "ABI", bptrain.abi_version(), "from", bptrain._native.lib._name)'
fi
echo
echo "downstream: all four consumers built and ran"
