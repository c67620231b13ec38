#!/usr/bin/env bash
# Class counts from corrupt labels (robustness, issue 18 class 9): on a 512-sample slice of Fashion-MNIST with
# one training label changed to 200, one test label changed to 200, or a --classes that leaves a class empty,
# every example must exit non-zero with a message naming the label file and the problem, instead of training
# a 201-class model and exiting 0. A clean slice must still pass the check. Skips (77) without the data.
# Usage: check_corrupt_labels.sh WORK_DIR BIN_DIR
set -uo pipefail
work=$1 bin=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
"$here/scripts/make-data-slice.sh" "$work/clean" 512
status=$?
[ $status -eq 77 ] && { echo "skipped: no Fashion-MNIST"; exit 77; }
[ $status -eq 0 ] || exit 1
# Byte 8 + i of an IDX label file is sample i's label.
corrupt() { # corrupt NAME SPLIT SAMPLE VALUE
  cp -r "$work/clean" "$work/$1"
  printf "\\x$(printf %02x "$4")" | dd of="$work/$1/$2-labels-idx1-ubyte" bs=1 seek=$((8 + $3)) conv=notrunc status=none
}
corrupt train200 train 7 200
corrupt test200 t10k 3 200

failures=0
expect() { # expect DESCRIPTION PATTERN... -- COMMAND...: exit non-zero, output matching every pattern
  local description=$1 patterns=() output
  shift
  while [ "$1" != -- ]; do patterns+=("$1"); shift; done
  shift
  output=$("$@" 2>&1)
  local rc=$?
  if [ $rc -eq 0 ]; then
    echo "FAIL: $description: exit 0"; failures=$((failures + 1)); return
  fi
  for pattern in "${patterns[@]}"; do
    if ! grep -q -- "$pattern" <<< "$output"; then
      echo "FAIL: $description: no '$pattern' in: $(tail -3 <<< "$output")"; failures=$((failures + 1)); return
    fi
  done
  echo "ok: $description (exit $rc)"
}

for example in mnist_mlp mnist_cnn resnet mnist_bsn mnist_precision checkpoint_resume speculative_mnist mnist_mlp_cpp; do
  [ -x "$bin/$example" ] || continue
  common=(--epochs 1 --batch 64 --threads 1)
  [ "$example" = speculative_mnist ] && common=(--epochs 1 --batch 64)
  extra=()
  [ "$example" = checkpoint_resume ] && extra=(--checkpoint "$work/$example.ckpt")
  run=("$bin/$example" "${common[@]}" "${extra[@]}")
  # Inferred counts (the MLPs) report classes 10-199 empty, fixed ones (the CNNs' 10) the label outside.
  expect "$example, training label 200" "train-labels-idx1-ubyte" "200" -- "${run[@]}" --data "$work/train200"
  expect "$example, test label 200" "t10k-labels-idx1-ubyte" "label 200 of sample 3 is outside" -- \
    "${run[@]}" --data "$work/test200"
  expect "$example, --classes 11 on 10 classes" "train-labels-idx1-ubyte" "have no samples: 10 " -- "${run[@]}" --data "$work/clean" --classes 11
  expect "$example, --classes 5 on 10 classes" "outside the 5 classes" -- "${run[@]}" --data "$work/clean" --classes 5
done
# The check must not refuse clean data: a short run on the clean slice, with the count given and inferred.
for classes in 10 0; do
  if "$bin/mnist_mlp" --data "$work/clean" --epochs 1 --batch 64 --threads 1 --classes $classes > "$work/clean.log" 2>&1; then
    echo "ok: mnist_mlp trains on the clean slice (--classes $classes)"
  else
    echo "FAIL: mnist_mlp on the clean slice: $(tail -2 "$work/clean.log")"; failures=$((failures + 1))
  fi
done
[ $failures -eq 0 ] || { echo "check_corrupt_labels: $failures failures"; exit 1; }
echo "check_corrupt_labels: every example refused the corrupt label sets"
