#!/usr/bin/env bash
# The core library loads and trains without its loadable modules (issue 15): the built and the installed
# libbptrain.so.0 need none of CUDA, cuDNN, NCCL or MPI, nor OpenBLAS, which the CPU backend dlopens itself
# so that it can choose OpenBLAS's core first (issue 16); with the cuda, mpi and nccl modules deleted from
# an install prefix the MLP example still trains on the CPU, selecting "cuda" fails with a message naming
# the missing module file, and `import bptrain` works without the MPI module (and loads no MPI).
# Usage: check_modules.sh BUILD_DIR WORK_DIR   (exits 77 without Fashion-MNIST)
set -euo pipefail
build=$(cd "$1" && pwd)
work=$2
source_dir=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work" && mkdir -p "$work"
unset BPTRAIN_MODULE_PATH BPTRAIN_LIBRARY
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }
forbidden='cudart|cublas|cudnn|nccl|mpi|openblas'

needs_none() { # LIBRARY: its NEEDED entries name no CUDA, NCCL, MPI or OpenBLAS library
  local needed
  needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  echo "$1 needs: $(echo "$needed" | tr '\n' ' ')"
  if echo "$needed" | grep -Eq "$forbidden"; then fail "$1 links $(echo "$needed" | grep -E "$forbidden" | tr '\n' ' ')"; fi
}

step "the built core library"
needs_none "$build/libbptrain.so.0"
# The static library must not pull them in either: no undefined CUDA, NCCL, MPI or BLAS symbol in its objects.
undefined=' (cuda|cudnn|cublas|nccl|MPI_|PMPI_|cblas_|openblas_|blas_memory)'
if nm -u "$build/libbptrain.a" 2> /dev/null | grep -Eq "$undefined"; then
  fail "libbptrain.a refers to $(nm -u "$build/libbptrain.a" | grep -E "$undefined" | head -3 | tr '\n' ' ')"
fi

step "install into $work/prefix"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
libdir=$(dirname "$(ls "$prefix"/lib*/libbptrain.so.0 "$prefix"/lib/*/libbptrain.so.0 2> /dev/null | head -1)")
[ -f "$libdir/libbptrain.so.0" ] || fail "no libbptrain.so.0 installed under $prefix"
needs_none "$libdir/libbptrain.so.0"
modules=$(sed -n 's/^foreach(bptrain_module IN ITEMS \(.*\))$/\1/p' "$libdir/cmake/bptrain/bptrainConfig.cmake" | tr ';' ' ')
echo "modules in the CMake package: ${modules:-none}"
for name in $modules; do
  [ -f "$libdir/libbptrain-$name.so.0" ] || fail "module $name is in the package but libbptrain-$name.so.0 is not installed"
done
[ "$(pkg-config --variable=modules "$libdir/pkgconfig/bptrain.pc")" = "$modules" ] ||
  fail "bptrain.pc lists modules '$(pkg-config --variable=modules "$libdir/pkgconfig/bptrain.pc")', the package '$modules'"

step "delete the modules"
for name in cuda mpi nccl; do
  rm -vf "$libdir/libbptrain-$name.so.0"
done

# find_package still works without them, and lists none.
mkdir -p "$work/find"
printf 'cmake_minimum_required(VERSION 3.16)\nproject(find_bptrain NONE)\nfind_package(bptrain REQUIRED)\nmessage(STATUS "modules: [${bptrain_MODULES}]")\n' > "$work/find/CMakeLists.txt"
cmake -S "$work/find" -B "$work/find/build" -DCMAKE_PREFIX_PATH="$prefix" > "$work/find.log" 2>&1 ||
  { cat "$work/find.log"; fail "find_package(bptrain) fails once the modules are deleted"; }
grep -q 'modules: \[\]' "$work/find.log" || fail "bptrain_MODULES still lists deleted modules: $(grep 'modules:' "$work/find.log")"

data=${BPT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -x "$build/mnist_mlp" ] || ! bash "$source_dir/scripts/make-data-slice.sh" "$work/data" 512; then
  echo "skipped: needs build/mnist_mlp (BPT_BUILD_EXAMPLES) and Fashion-MNIST in $data"
  exit 77
fi
# The example's own RUNPATH names the build tree; LD_LIBRARY_PATH comes first, so the installed copy runs.
run_installed() { LD_LIBRARY_PATH="$libdir" "$@"; }
# Not `ldd | grep -q`: grep leaving early gets ldd a SIGPIPE, which pipefail turns into a failure now and then.
libraries=$(run_installed ldd "$build/mnist_mlp")
grep -q "$libdir/libbptrain.so.0" <<<"$libraries" || fail "mnist_mlp does not load $libdir/libbptrain.so.0"

step "mnist_mlp trains on the CPU without the modules"
run_installed "$build/mnist_mlp" --data "$work/data" --epochs 1 --backend cpu | tee "$work/cpu.txt"
grep -q 'final test accuracy' "$work/cpu.txt" || fail "mnist_mlp printed no final test accuracy"

step "mnist_mlp --backend cuda names the missing module"
status=0
run_installed "$build/mnist_mlp" --data "$work/data" --epochs 1 --backend cuda > "$work/cuda.txt" 2>&1 || status=$?
cat "$work/cuda.txt"
[ "$status" -ne 0 ] || fail "--backend cuda succeeded without the cuda module"
grep -q "libbptrain-cuda.so.0 not found" "$work/cuda.txt" || fail "the message does not name libbptrain-cuda.so.0"
grep -q "$libdir" "$work/cuda.txt" || fail "the message does not say it looked in $libdir"

if command -v python3 > /dev/null; then
  step "import bptrain without the MPI module"
  PYTHONPATH="$prefix/share/bptrain/python" PYTHONDONTWRITEBYTECODE=1 python3 - "$libdir" << 'PYTHON'
import ctypes, sys
import bptrain
lib = bptrain._native.lib
assert lib._name.startswith(sys.argv[1]), "loaded %s, not the installed library" % lib._name
maps = open("/proc/self/maps").read()
for name in ("libmpi", "libcudart", "libnccl", "libcudnn"):
    assert name not in maps, "import bptrain loaded " + name
print("backends:", bptrain.backends())
reason = ctypes.create_string_buffer(1024)
cuda = bptrain.backends().index("cuda")
status = lib.bpt_backend_available(cuda, reason, len(reason))
print("cuda available: status %d, %s" % (status, reason.value.decode()))
assert status == 7 and b"libbptrain-cuda.so.0 not found" in reason.value, "cuda reported available"
assert lib.bpt_backend_available(0, reason, len(reason)) == 0, "cpu not available: " + reason.value.decode()
bptrain.Context("cpu")
print("python OK: a cpu context without the modules")
PYTHON
fi
echo
echo "modules: the core loads, trains and reports missing modules without them"
