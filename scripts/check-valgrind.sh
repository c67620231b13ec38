#!/usr/bin/env bash
# Runs the examples' short runs and the robustness tests under valgrind memcheck: no invalid reads or
# writes, no uninitialised values used, no definite or indirect leaks.
#   scripts/check-valgrind.sh [build-dir]     (default: build-valgrind, a plain Debug build)
# The example trains on a 512-sample slice of Fashion-MNIST cut with zcat/head (valgrind runs ~50x slower).
set -euo pipefail
cd "$(dirname "$0")/.."
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
for test in test_misuse test_checkpoint test_anomaly test_ops_gradients; do
  [ -x "$build/tests/$test" ] && valgrind_run "$test" "$build/tests/$test"
done

data=/usr/share/datasets/fashion-mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  slice=$build/fashion-mnist-slice
  mkdir -p "$slice"
  # IDX headers for 512 training and 256 test samples, then the first samples of the real files. head
  # closes the pipe early, so zcat's SIGPIPE is expected: pipefail is off here and the sizes are checked.
  set +o pipefail
  for split in train:512:\\x00\\x00\\x02\\x00 t10k:256:\\x00\\x00\\x01\\x00; do
    IFS=: read -r name count bytes <<< "$split"
    { printf "\x00\x00\x08\x03$bytes\x00\x00\x00\x1c\x00\x00\x00\x1c"
      zcat "$data/$name-images-idx3-ubyte.gz" | tail -c +17 | head -c $((count * 784)); } > "$slice/$name-images-idx3-ubyte"
    { printf "\x00\x00\x08\x01$bytes"
      zcat "$data/$name-labels-idx1-ubyte.gz" | tail -c +9 | head -c "$count"; } > "$slice/$name-labels-idx1-ubyte"
  done
  set -o pipefail
  [ "$(stat -c %s "$slice/train-images-idx3-ubyte")" -eq $((16 + 512 * 784)) ] &&
    [ "$(stat -c %s "$slice/t10k-labels-idx1-ubyte")" -eq $((8 + 256)) ] ||
    { echo "check-valgrind: could not cut the Fashion-MNIST slice" >&2; exit 1; }
  valgrind_run mnist_mlp "$build/mnist_mlp" --data "$slice" --epochs 1 --batch 64 --threads 2
  tail -1 "$build/mnist_mlp.out"
else
  echo "check-valgrind: Fashion-MNIST not installed; example run skipped"
fi
echo "check-valgrind: clean"
