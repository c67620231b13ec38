#!/usr/bin/env bash
# The bf16 policy's products under every oneDNN ISA cap this CPU can execute (issue 26.4). oneDNN picks its
# kernels by the CPU's instructions, capped by ONEDNN_MAX_CPU_ISA, and the CPU backend takes oneDNN's bf16
# matmul only where it runs on a bf16 unit (src/backends/cpu/onednn.c), else its own kernel: so the README's
# test command exercises one route, and a user's cap, or another machine, takes another. For each level oneDNN
# 2.x names, this runs the bf16 tests with ONEDNN_MAX_CPU_ISA set to it and reports the route the library took
# (test_onednn_gemm's line: oneDNN and its kernel, or why not). A level needing instructions this CPU lacks
# is skipped with the reason. Run after scripts/test.sh, in its build folder ($BPT_BUILD_DIR, default
# build-test; built here if absent). BPT_ONEDNN_ISA_TESTS: the ctest -R pattern. Without oneDNN (libdnnl.so.2)
# or off x86-64 it says so and exits 0. See docs/robustness.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -m)" != x86_64 ]; then
  echo "check-onednn-isa: skipped: oneDNN's ISA levels are x86-64's, this machine is $(uname -m)"
  exit 0
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libdnnl\.so\.2 '; then
  echo "check-onednn-isa: skipped: libdnnl.so.2 is not installed (Debian: libdnnl2; scripts/install-deps.sh)"
  exit 0
fi
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
unset DNNL_MAX_CPU_ISA BPT_BF16_GEMM
build=${BPT_BUILD_DIR:-build-test}
jobs=$(nproc 2>/dev/null || echo 2)
pattern=${BPT_ONEDNN_ISA_TESTS:-'^(test_onednn_gemm|test_bf16_unit|test_bf16_gemm|test_bf16_gemm_native|test_precision|test_precision_training|test_relu_bf16|test_storage_dtype|test_storage_widened)$'}
if [ ! -x "$build/tests/test_onednn_gemm" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON
  cmake --build "$build" -j "$jobs"
fi

flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
avx512="avx512f avx512bw avx512vl avx512dq"
declare -A needs=(
  [SSE41]="sse4_1" [AVX]="avx" [AVX2]="avx avx2 fma" [AVX2_VNNI]="avx avx2 fma avx_vnni"
  [AVX512_CORE]="$avx512" [AVX512_CORE_VNNI]="$avx512 avx512_vnni"
  [AVX512_CORE_BF16]="$avx512 avx512_vnni avx512_bf16" [AVX512_CORE_FP16]="$avx512 avx512_vnni avx512_bf16 avx512_fp16"
  [AVX512_CORE_AMX]="$avx512 avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8"
)
levels=${BPT_ONEDNN_ISA_LEVELS:-"SSE41 AVX AVX2 AVX2_VNNI AVX512_CORE AVX512_CORE_VNNI AVX512_CORE_BF16 AVX512_CORE_FP16 AVX512_CORE_AMX"}

echo "check-onednn-isa: under each ONEDNN_MAX_CPU_ISA: ctest -R '$pattern'"
ran=0 skipped=0 failed=0
for level in $levels; do
  missing=""
  for flag in ${needs[$level]:-}; do
    [[ "$flags" == *" $flag "* ]] || missing+=" $flag"
  done
  if [ -n "$missing" ]; then
    echo "check-onednn-isa: $level: skipped: it needs${missing}, which this CPU lacks"
    skipped=$((skipped + 1))
    continue
  fi
  # The route: "N products on oneDNN ... (kernel)", or the reason oneDNN's matmul is not used (the test then
  # exits 77, skipped).
  route=$(cd "$build" && ONEDNN_MAX_CPU_ISA=$level ./tests/test_onednn_gemm 2>&1 |
          sed -n 's/^.*products on \(.*\)$/oneDNN: \1/p; s/^skipped: oneDNN.s matmul is not used here: \(.*\)$/own kernel: \1/p' |
          head -n1 || true)
  echo "check-onednn-isa: $level: ${route:-route not reported}"
  if output=$(cd "$build" && ONEDNN_MAX_CPU_ISA=$level ctest --output-on-failure -j "$jobs" -R "$pattern" 2>&1); then
    grep -E "tests passed" <<<"$output" || true
    grep -E "\(Skipped\)" <<<"$output" | sed 's/^ */  skipped: /' || true
    ran=$((ran + 1))
  else
    echo "$output"
    echo "check-onednn-isa: $level: FAILED (above)"
    failed=$((failed + 1))
  fi
done
echo "check-onednn-isa: $ran levels tested, $skipped skipped, $failed failed"
[ "$failed" -eq 0 ]
