#!/usr/bin/env bash
# The CPU backend's AVX-512 loops on a CPU without AVX-512: builds the library with those loops compiled for
# AVX2 + FMA over plain-C intrinsics (cmake -DBPT_AVX512_EMULATION=ON, tests/support/avx512_emulation.h) in
# build-avx512-emulated/ and runs the whole test suite there. Every test that loops over the CPU's loop levels
# (test_backend_ops, test_cnn_kernels, test_fused_relu, test_activation_memory, test_bf16_gemm_native, ...)
# then runs the AVX-512 loops against the AVX2 and portable ones, the plain references and finite
# differences, and the examples train through them. Then the tests that reach those loops once more under
# ASan + UBSan (clang, build-avx512-emulated-sanitize/): the emulated masked loads and stores touch only their
# lanes, so a report is an access the real CPU would make too. (Tensors share the graph's arena, so ASan sees
# a vector read past a tensor only at the arena's end or in a buffer of its own: scratch, packed panels.) CPUs with AVX-512 run the
# real loops in the README's test command and check-sanitizers.sh instead, so this skips there; it also
# skips without AVX2 + FMA, which the emulation needs. Build folder: $BPT_BUILD_DIR (default
# build-avx512-emulated, and the same name + -sanitize); SANITIZE_CC/SANITIZE_CXX (default clang/clang++).
set -euo pipefail
cd "$(dirname "$0")/.."
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }
if has avx512f; then
  echo "check-avx512-emulated: skipped: this CPU has AVX-512F, so the test suite already runs the real AVX-512 loops"
  exit 0
fi
if ! has avx2 || ! has fma; then
  echo "check-avx512-emulated: skipped: the emulated AVX-512 loops are compiled for AVX2 + FMA, which this CPU lacks"
  exit 0
fi
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
build=${BPT_BUILD_DIR:-build-avx512-emulated}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON -DBPT_AVX512_EMULATION=ON -DBPT_WITH_CUDA=OFF
cmake --build "$build" -j "$jobs"
# The loop level every such test starts from, as the library reports it.
(cd "$build" && ./tests/test_backend_ops 2>&1 | grep -m1 'widest loops' || true)
# Not the network tests: check_pip_install builds its own library from PyPI's build backend, never the
# emulated loops, and scripts/test.sh has run it already.
(cd "$build" && ctest --output-on-failure -j "$jobs" -LE network)

# Optimised (Debug would take over 5 minutes per kernel test here); CMakeLists.txt turns off clang's
# "loop not vectorized" errors on the omp simd requests for sanitizer builds.
sanitize=${build}-sanitize
# intercept_tls_get_addr=0: LeakSanitizer's tracer crash on Debian 12's runtimes (check-sanitizers.sh).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:intercept_tls_get_addr=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
CC=${SANITIZE_CC:-clang} CXX=${SANITIZE_CXX:-clang++} cmake -S . -B "$sanitize" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBPT_SANITIZE=ON -DBPT_AVX512_EMULATION=ON -DBPT_WITH_CUDA=OFF \
  -DBPT_BUILD_EXAMPLES=OFF -DBPT_BUILD_BENCHMARKS=OFF
cmake --build "$sanitize" -j "$jobs"
source scripts/forget_dead_omp_registrations.sh
forget_dead_omp_registrations
(cd "$sanitize" && ctest --output-on-failure -j "$jobs" \
  -R '^(test_backend_ops|test_cnn_kernels|test_fused_relu|test_activation_memory|test_bf16_gemm|test_bf16_gemm_native|test_bf16_unit)$')
