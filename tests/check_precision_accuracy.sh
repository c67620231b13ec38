#!/usr/bin/env bash
# The bound on the full schedule: the 784-512-256-10 MLP trained 5 epochs on Fashion-MNIST in bf16 and
# in f16 with dynamic loss scaling must end within 0.5 points of the same run in f32 (same seed, same batches).
# tests/test_precision_training.c checks a short schedule on every build; this one is the real comparison
# (labelled "long": the sanitizer build skips it). Exits 77 (skipped) without the data set.
set -euo pipefail
binary=$1
data=/usr/share/datasets/fashion-mnist
[ -e "$data/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in $data: skipped"; exit 77; }
accuracy() {
  "$binary" --data "$data" --epochs 5 --threads 2 "$@" 2>/dev/null |
    sed -n 's/^epoch [0-9]*: test accuracy \([0-9.]*\)%.*/\1/p' | tail -1
}
f32=$(accuracy --dtype f32)
bf16=$(accuracy --dtype bf16)
f16=$(accuracy --dtype f16 --loss-scaling dynamic)
echo "test accuracy after 5 epochs: f32 $f32%, bf16 $bf16%, f16 + loss scaling $f16%"
awk -v a="$f32" -v b="$bf16" -v c="$f16" 'BEGIN {
  if (a == "" || b == "" || c == "") { print "a run printed no accuracy"; exit 1 }
  d1 = b - a; d2 = c - a; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2
  printf "bf16 differs by %.2f points, f16 by %.2f (bound 0.5)\n", d1, d2
  exit (d1 <= 0.5 && d2 <= 0.5) ? 0 : 1 }'
