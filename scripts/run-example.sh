#!/usr/bin/env bash
# The README's main command: installs what is missing (as root), builds in Release and trains the MLP
# on Fashion-MNIST. Extra arguments go to the example (e.g. --epochs 1, --threads 1, --data DIR); the example
# uses every core unless told otherwise. It builds the whole tree (library, examples, tests) in build/, so
# the README's later commands (cmake --install build, ctest in build/) work in the same folder.
# OpenMP threads spin only briefly before they sleep (GOMP_SPINCOUNT=1000) unless the caller chose a waiting
# policy: libgomp's default spinning (300,000 rounds) is many times slower on cores that other work shares;
# 1,000 rounds was as fast as that default on idle cores and as fast as passive waiting on shared ones, where
# passive costs 3-5% on idle cores (bench/shared_cores.sh, docs/benchmarks.md). libgomp reads these
# variables once, when it loads, so the example cannot set them itself. `run-example.sh --print-env` prints the OpenMP
# waiting variables the example would get, and stops there.
set -euo pipefail
cd "$(dirname "$0")/.."

# GOMP_SPINCOUNT (libgomp) and KMP_BLOCKTIME (LLVM's libomp, a clang build) choose the waiting as well; an
# empty value is no choice (libgomp ignores it with a warning).
if [ -z "${OMP_WAIT_POLICY:-}${GOMP_SPINCOUNT:-}${KMP_BLOCKTIME:-}" ]; then export GOMP_SPINCOUNT=1000; fi
if [ "${1:-}" = --print-env ]; then
  env | grep -E '^(OMP_WAIT_POLICY|GOMP_SPINCOUNT|KMP_BLOCKTIME)=' | sort || true
  exit 0
fi

# BPT_RUN_EXAMPLE_SKIP_DEPS=1 skips the Debian packages (tests/check_run_example_quiet.sh, which runs it with
# a stand-in cmake, sets it: the test must not install anything).
# The minimal set: what building and running the examples needs, not the developers' tools (issue 29).
if [ "$(id -u)" -eq 0 ] && [ -z "${BPT_RUN_EXAMPLE_SKIP_DEPS:-}" ]; then bash scripts/install-deps.sh --minimal; fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON > /dev/null
# The build speaks only when it builds: one progress line (redrawn on a terminal), or the first error and
# where the whole log is. Nothing to build prints nothing, so the example's output comes first.
log=build/run-example-build.log
progress() {
  local tty=0
  [ -t 2 ] && tty=1
  awk -v tty="$tty" '
    /^\[ *[0-9]+%\] (Building|Linking)/ {
      percent = $0; sub(/\].*/, "", percent); sub(/^\[ */, "", percent)
      if (!shown) { printf "run-example.sh: building in build/ (the first build takes minutes)%s", tty ? "" : "\n" > "/dev/stderr"; shown = 1 }
      if (tty) printf "\rrun-example.sh: building in build/ (the first build takes minutes): %s", percent > "/dev/stderr"
      fflush("/dev/stderr")
    }
    END { if (shown && tty) printf "\n" > "/dev/stderr" }'
}
if ! cmake --build build -j "$jobs" 2>&1 | tee "$log" | progress; then
  echo "run-example.sh: the build failed; its first error (the whole log is $log):" >&2
  grep -m1 -A8 -E 'error:|Error [0-9]|CMake Error' "$log" >&2 || tail -n 20 "$log" >&2
  exit 1
fi
exec build/mnist_mlp "$@"
