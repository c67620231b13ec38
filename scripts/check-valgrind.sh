#!/usr/bin/env bash
# Runs the examples' short runs and the robustness tests under valgrind memcheck: no invalid reads or
# writes, no uninitialised values used, no definite or indirect leaks.
#   scripts/check-valgrind.sh [build-dir]     (default: build-valgrind, a plain Debug build; JOBS=N, default 2)
# The examples train on a 512-sample slice of Fashion-MNIST (scripts/make-data-slice.sh; valgrind is ~50x slower).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then bash scripts/install-deps.sh; fi
build=${1:-build-valgrind}
jobs=${JOBS:-2}
command -v valgrind > /dev/null || { echo "check-valgrind: valgrind is not installed (scripts/install-deps.sh)" >&2; exit 1; }

mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DBPT_SANITIZE=OFF -DBPT_WITH_CUDA=OFF > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$jobs"

# --errors-for-leak-kinds: "possibly lost" blocks are the thread stacks and TLS of libgomp's pool, which
# stay alive until exit by design; definite and indirect leaks are ours and fail the run.
valgrind_run() {
  local name=$1
  shift
  echo "check-valgrind: $name"
  if ! valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
      --show-leak-kinds=definite,indirect --track-origins=yes --child-silent-after-fork=yes \
      --suppressions=scripts/valgrind.supp --log-file="$build/valgrind-$name.log" "$@" > "$build/$name.out" 2>&1; then
    tail -60 "$build/valgrind-$name.log"
    echo "check-valgrind: $name FAILED (log: $build/valgrind-$name.log)" >&2
    exit 1
  fi
  grep -E "ERROR SUMMARY|definitely lost|indirectly lost" "$build/valgrind-$name.log" | sed 's/^==[0-9]*== /  /'
}

export BPT_BINARY_DIR=$PWD/$build OMP_NUM_THREADS=2
# test_modules: dlopen of missing, broken and mismatched module files, and of this build's modules.
for test in test_misuse test_checkpoint test_anomaly test_fuzz_corpus test_ops_gradients test_api_edges test_modules; do
  [ -x "$build/tests/$test" ] && valgrind_run "$test" "$build/tests/$test"
done

slice=$build/fashion-mnist-slice
if scripts/make-data-slice.sh "$slice" 512; then
  valgrind_run mnist_mlp "$build/mnist_mlp" --data "$slice" --epochs 1 --batch 64 --threads 2
  tail -1 "$build/mnist_mlp.out"
  # A run stopped after 5 steps (with its checkpoint written), then resumed to the end of the epoch.
  rm -f "$build/resume.ckpt"
  valgrind_run checkpoint_stop "$build/checkpoint_resume" --checkpoint "$build/resume.ckpt" --data "$slice" \
    --epochs 1 --batch 64 --threads 2 --stop-after 5 --save-every 2
  valgrind_run checkpoint_resume "$build/checkpoint_resume" --checkpoint "$build/resume.ckpt" --data "$slice" \
    --epochs 1 --batch 64 --threads 2 --resume
  tail -1 "$build/checkpoint_resume.out"
else
  echo "check-valgrind: Fashion-MNIST not installed; example runs skipped"
fi
echo "check-valgrind: clean"
