#!/usr/bin/env bash
# Builds libbptrain, its tests and examples with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DBPT_SANITIZE=ON) and runs the whole CTest suite plus a short example run under them.
#   scripts/check-sanitizers.sh [build-dir]     (default: build-sanitize; CC=gcc or clang, default clang)
# Exits non-zero on any sanitizer report, test failure or build warning.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-sanitize}
export CC=${CC:-clang}
jobs=${JOBS:-2}

# halt_on_error + abort make every report fatal; allocator_may_return_null lets the tests that ask for
# impossible sizes see a NULL (and check our BPT_ERR_OUT_OF_MEMORY path) instead of an ASan abort.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DBPT_SANITIZE=ON -DBPT_WITH_CUDA=OFF > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$jobs"
(cd "$build" && ctest --output-on-failure -j "$jobs")

# A short example run on real data when it is installed (the examples are part of "no crashes" too).
data=/usr/share/datasets/fashion-mnist
if [ -x "$build/mnist_mlp" ] && [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  echo "check-sanitizers: mnist_mlp, 1 epoch"
  "$build/mnist_mlp" --epochs 1 --batch 256 --threads 2 > "$build/mnist_mlp.log" 2>&1 ||
    { tail -40 "$build/mnist_mlp.log"; exit 1; }
  tail -1 "$build/mnist_mlp.log"
fi
echo "check-sanitizers: ASan + UBSan clean ($CC)"
