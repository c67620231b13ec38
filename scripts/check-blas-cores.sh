#!/usr/bin/env bash
# The CPU backend's products under every OpenBLAS core this CPU can execute (issue 26.4). OpenBLAS (Debian's
# DYNAMIC_ARCH build) picks one core's kernels per CPU, so the README's test command exercises one of them;
# a user's OPENBLAS_CORETYPE, or another machine, runs another. For each x86-64 core name OpenBLAS knows,
# this runs the products' tests with OPENBLAS_CORETYPE set to it: first `test_blas_library --child
# user-core` (the user's core is respected, passes the start-up self-check, multiplies right, and the banner
# names it), then the tests below. A core whose kernels need instructions this CPU lacks is skipped with the
# reason (OpenBLAS does not check a forced core: its kernels would die on an illegal instruction); a name this
# OpenBLAS does not know, or that it runs as a core already tested (aliases such as Katmai, which 64-bit
# builds run as Prescott), is reported and not run twice (OPENBLAS_VERBOSE=2 makes OpenBLAS say both). Run after scripts/test.sh, in its build folder
# ($BPT_BUILD_DIR, default build-test; built here if absent). BPT_BLAS_CORE_TESTS: the ctest -R pattern.
# Off x86-64 it says so and exits 0. See docs/robustness.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -m)" != x86_64 ]; then
  echo "check-blas-cores: skipped: OPENBLAS_CORETYPE's cores are x86-64's, this machine is $(uname -m)"
  exit 0
fi
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
unset OPENBLAS_VERBOSE OPENBLAS_L2_SIZE
build=${BPT_BUILD_DIR:-build-test}
jobs=$(nproc 2>/dev/null || echo 2)
# The tests whose products go through cblas_sgemm: the loader, every op against its reference (linear,
# matmul, attention, im2col convolutions), gradients by finite differences, the bf16 policy's f32 side, and
# training end to end. test_cnn_kernels (libbptrain's own direct and Winograd convolutions, 15-100 s) is left
# to the README's run; add it here with BPT_BLAS_CORE_TESTS.
pattern=${BPT_BLAS_CORE_TESTS:-'^(test_blas_library|test_backend_ops|test_cpu_kernels|test_cnn_gradients|test_ops_gradients|test_bf16_gemm|test_precision|test_training)$'}
if [ ! -x "$build/tests/test_blas_library" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON
  cmake --build "$build" -j "$jobs"
fi

flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
# The flags each core's kernels need, from the instructions in Debian's libopenblas 0.3.21 (objdump of each
# core's *_<CORE> functions): the AMD family 15h cores use FMA4 (vfmaddps), Opteron and Opteron_SSE3 3DNow!
# (femms: SIGILL on a Zen 4), Opteron, Barcelona and Bobcat prefetchw; the others the SSE/AVX level their name
# says. SapphireRapids (0.3.22 and later) is given AVX512_FP16 and AMX for its bf16 kernels.
declare -A needs=(
  [Katmai]="pni" [Coppermine]="pni" [Northwood]="pni" [Prescott]="pni" [Banias]="pni" [Athlon]="pni"
  [Atom]="pni ssse3" [Core2]="pni ssse3" [Penryn]="pni ssse3 sse4_1" [Dunnington]="pni ssse3 sse4_1"
  [Nehalem]="pni ssse3 sse4_1 sse4_2" [Nano]="pni ssse3"
  [Opteron]="3dnow 3dnowprefetch" [Opteron_SSE3]="pni 3dnow 3dnowprefetch" [Barcelona]="pni 3dnowprefetch"
  [Bobcat]="pni ssse3 3dnowprefetch"
  [Sandybridge]="avx" [Bulldozer]="avx fma4" [Piledriver]="avx fma fma4" [Steamroller]="avx fma fma4"
  [Excavator]="avx avx2 fma fma4" [Haswell]="avx avx2 fma" [Zen]="avx avx2 fma"
  [SkylakeX]="avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl"
  [Cooperlake]="avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16"
  [SapphireRapids]="avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16 avx512_fp16 amx_bf16 amx_tile"
)
# OpenBLAS 0.3.21's x86-64 names (driver/others/dynamic.c's corename[]), then the later ones; BPT_BLAS_CORES
# replaces the list (a name without an entry above is run as one needing nothing).
cores=${BPT_BLAS_CORES:-"Katmai Coppermine Northwood Prescott Banias Atom Core2 Penryn Dunnington Nehalem Athlon Opteron
  Opteron_SSE3 Barcelona Nano Sandybridge Bobcat Bulldozer Piledriver Haswell Steamroller Excavator Zen SkylakeX
  Cooperlake SapphireRapids"}

echo "check-blas-cores: under each core: ctest -R '$pattern'"
declare -A tested=()
ran=0 skipped=0 failed=0
for core in $cores; do
  missing=""
  for flag in ${needs[$core]:-}; do
    [[ "$flags" == *" $flag "* ]] || missing+=" $flag"
  done
  if [ -n "$missing" ]; then
    echo "check-blas-cores: $core: skipped: its kernels need${missing}, which this CPU lacks"
    skipped=$((skipped + 1))
    continue
  fi
  probe=$(cd "$build" && OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=$core ./tests/test_blas_library --child user-core 2>&1) && status=0 || status=$?
  if [ "$status" -ne 0 ]; then
    echo "check-blas-cores: $core: FAILED: test_blas_library --child user-core exited $status (132: illegal instruction):"
    echo "$probe"
    failed=$((failed + 1))
    continue
  fi
  ran_as=$(sed -n 's/^core \([^;]*\);.*/\1/p' <<<"$probe" | head -n1)
  if grep -q "Core not found" <<<"$probe"; then
    echo "check-blas-cores: $core: skipped: this OpenBLAS does not know it (it would run $ran_as)"
    skipped=$((skipped + 1))
    continue
  fi
  if [ -n "${tested[$ran_as]:-}" ]; then
    echo "check-blas-cores: $core: runs as $ran_as, tested above"
    continue
  fi
  tested[$ran_as]=1
  echo "check-blas-cores: $core: runs as $ran_as"
  if output=$(cd "$build" && OPENBLAS_CORETYPE=$core ctest --output-on-failure -j "$jobs" -R "$pattern" 2>&1); then
    tail -n 3 <<<"$output"
    ran=$((ran + 1))
  else
    echo "$output"
    echo "check-blas-cores: $core: FAILED (above)"
    failed=$((failed + 1))
  fi
done
echo "check-blas-cores: $ran cores tested, $skipped skipped, $failed failed"
[ "$failed" -eq 0 ]
