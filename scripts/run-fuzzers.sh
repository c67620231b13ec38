#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined) and runs each for a bounded time,
# starting from the committed seed corpora and regressions (fuzz/corpus/<target>, fuzz/regressions/<target>).
#   scripts/run-fuzzers.sh [seconds-per-target]     (default 60; build folder: $BUILD, default build-fuzz;
#                                                    JOBS=N build jobs, default 2)
# Targets: fuzz_idx, fuzz_checkpoint, fuzz_gzip and fuzz_shape (docs/robustness.md, "Fuzzing").
# A finding is written to fuzz/crashes/<target>-* (git-ignored) and fails the run: minimise it, fix the bug,
# and commit the input under fuzz/regressions/<target>/ so tests/test_fuzz_corpus.c replays it in every CTest run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then bash scripts/install-deps.sh; fi
seconds=${1:-60}
build=${BUILD:-build-fuzz}
jobs=${JOBS:-2}
command -v clang > /dev/null || { echo "run-fuzzers: clang is not installed (scripts/install-deps.sh)" >&2; exit 1; }

mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DBPT_BUILD_FUZZERS=ON \
  -DBPT_BUILD_TESTS=OFF -DBPT_BUILD_EXAMPLES=OFF -DBPT_WITH_CUDA=OFF -DBPT_WITH_MPI=OFF -DBPT_WITH_NCCL=OFF \
  > "$build/configure.log" || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$jobs" --target fuzz_idx fuzz_checkpoint fuzz_gzip fuzz_shape

# intercept_tls_get_addr=0: LeakSanitizer's tracer crash on Debian 12's runtimes (check-sanitizers.sh).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:intercept_tls_get_addr=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
export OMP_NUM_THREADS=1
mkdir -p fuzz/crashes
total_runs=0
for target in idx checkpoint gzip shape; do
  corpus=$build/corpus-$target # the growing working corpus stays out of the repository
  mkdir -p "$corpus"
  cp fuzz/corpus/$target/* "$corpus/"
  cp fuzz/regressions/$target/* "$corpus/" 2> /dev/null || true
  log=$build/fuzz_$target.log
  echo "run-fuzzers: fuzz_$target for ${seconds}s"
  # malloc_limit_mb: an input that makes the library allocate > 1 GiB is a finding (a hostile size field).
  if ! "$build/fuzz/fuzz_$target" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -max_len=8192 -print_final_stats=1 -artifact_prefix="fuzz/crashes/$target-" \
      > "$log" 2>&1; then
    tail -60 "$log"
    echo "run-fuzzers: fuzz_$target FOUND A PROBLEM; input saved under fuzz/crashes/" >&2
    exit 1
  fi
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  grep -E "^Done|stat::number_of_executed_units|stat::peak_rss_mb" "$log" | sed 's/^/  /'
  echo "  corpus: $(ls "$corpus" | wc -l) inputs, coverage: $(grep -o 'cov: [0-9]*' "$log" | tail -1)"
  total_runs=$((total_runs + ${runs:-0}))
done
echo "run-fuzzers: no findings, $total_runs executions in total"
