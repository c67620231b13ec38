#!/usr/bin/env bash
# Builds libbptrain, its tests and examples with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DBPT_SANITIZE=ON) and runs the CTest suite (all but the tests labelled "long": the five-epoch precision
# accuracy run, minutes even uninstrumented) plus short example runs under them (including a checkpoint
# stop/resume that must reproduce the uninterrupted run's weights bit for bit).
#   scripts/check-sanitizers.sh [build-dir]     (default: build-sanitize; CC=gcc or clang, default clang;
#                                                JOBS=N build and test jobs, default 2)
# Exits non-zero on any sanitizer report, test failure or build warning.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then bash scripts/install-deps.sh; fi
build=${1:-build-sanitize}
export CC=${CC:-clang}
# The C++ header test links the sanitized library: its compiler must bring the same sanitizer runtime.
case $CC in *clang*) export CXX=${CXX:-clang++} ;; *) export CXX=${CXX:-g++} ;; esac
jobs=${JOBS:-2}

# halt_on_error + abort make every report fatal; allocator_may_return_null lets the tests that ask for
# impossible sizes see a NULL (and check our BPT_ERR_OUT_OF_MEMORY path) instead of an ASan abort.
# intercept_tls_get_addr=0: the __tls_get_addr interceptor of GCC <= 13 / LLVM <= 16 runtimes (Debian 12
# has both) takes a malloc block that lands at offset 16 of a page for a pre-2.25 glibc TLS header and
# reads through it, so LeakSanitizer's tracer dies ("Tracer caught signal 11") after a passing test, now
# and then (seen in CI on test_onnx_export); see google/sanitizers#1353 and Mudlet PR 9930.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:intercept_tls_get_addr=0:allocator_may_return_null=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DBPT_SANITIZE=ON -DBPT_WITH_CUDA=OFF > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$jobs"
source scripts/forget_dead_omp_registrations.sh
forget_dead_omp_registrations
(cd "$build" && ctest --output-on-failure -j "$jobs" -LE long)
# The Python binding's lifetime test ran above with the ASan runtime preloaded into the interpreter
# (tests/checks.cmake); a build without Python would skip it silently, so insist on it here.
(cd "$build" && ctest -N -R '^check_python_lifetimes$' | grep -q 'Total Tests: 1') ||
  { echo "check-sanitizers: check_python_lifetimes is not registered (Python 3 not found?)" >&2; exit 1; }

# Short example runs on a slice of the real data (the examples are part of "no crashes" too), and a
# checkpoint stop/resume that must end with the same weights as the uninterrupted run.
slice=$build/fashion-mnist-slice
if scripts/make-data-slice.sh "$slice" 2048; then
  run() {
    local name=$1
    shift
    "$@" > "$build/$name.log" 2>&1 || { tail -40 "$build/$name.log"; echo "check-sanitizers: $name failed" >&2; exit 1; }
  }
  common=(--data "$slice" --epochs 2 --batch 64 --threads 2)
  run mnist_mlp "$build/mnist_mlp" "${common[@]}"
  echo "check-sanitizers: mnist_mlp: $(tail -1 "$build/mnist_mlp.log")"
  rm -f "$build"/*.ckpt
  run straight "$build/checkpoint_resume" --checkpoint "$build/straight.ckpt" "${common[@]}"
  run stopped "$build/checkpoint_resume" --checkpoint "$build/resumed.ckpt" "${common[@]}" --stop-after 45
  run resumed "$build/checkpoint_resume" --checkpoint "$build/resumed.ckpt" "${common[@]}" --resume
  straight=$(grep "parameter checksum" "$build/straight.log")
  resumed=$(grep "parameter checksum" "$build/resumed.log")
  echo "check-sanitizers: uninterrupted: $straight"
  echo "check-sanitizers: stop at 45 + resume: $resumed"
  [ "$straight" = "$resumed" ] || { echo "check-sanitizers: resumed run differs" >&2; exit 1; }
fi
echo "check-sanitizers: ASan + UBSan clean ($CC)"
