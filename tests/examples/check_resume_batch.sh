#!/usr/bin/env bash
# checkpoint_resume keeps its place in samples: a run stopped mid-epoch, at an epoch's end or before a partial
# last batch and resumed with its own --batch ends bit for bit where the uninterrupted run ends; resumed with a
# --batch that divides the samples it had trained it continues at that sample; with one that does not, or
# with fewer --epochs than the file has done, it is refused with a message instead of skipping or repeating
# data. Skips (77) without the Fashion-MNIST data.
# Usage: check_resume_batch.sh WORK_DIR CHECKPOINT_RESUME
set -uo pipefail
work=$1 resume=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
"$here/scripts/make-data-slice.sh" "$work/data" 256
status=$?
[ $status -eq 77 ] && { echo "skipped: no Fashion-MNIST"; exit 77; }
[ $status -eq 0 ] || exit 1
common=(--data "$work/data" --epochs 2 --threads 1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
reported=0
ok() { [ $failures -eq $reported ] && echo "ok: $*"; reported=$failures; }
checksum() { sed -n 's/^parameter checksum: \([0-9a-f]*\) .*/\1/p' "$1"; }

# 256 samples at batch 16: 16 steps an epoch; stopping after 21 steps leaves epoch 2 at sample 80.
"$resume" "${common[@]}" --batch 16 --checkpoint "$work/straight.ckpt" > "$work/straight.txt" || fail "straight run"
"$resume" "${common[@]}" --batch 16 --checkpoint "$work/stopped.ckpt" --stop-after 21 > /dev/null || fail "stopped run"
cp "$work/stopped.ckpt" "$work/other-batch.ckpt"
cp "$work/stopped.ckpt" "$work/bad-batch.ckpt"
"$resume" "${common[@]}" --batch 16 --checkpoint "$work/stopped.ckpt" --resume > "$work/resumed.txt" ||
  fail "resume with the same --batch"
grep -q "epoch 2, sample 80 (step 5 at batch 16)" "$work/resumed.txt" ||
  fail "the same --batch resumes elsewhere: $(head -1 "$work/resumed.txt")"
[ -n "$(checksum "$work/straight.txt")" ] && [ "$(checksum "$work/straight.txt")" = "$(checksum "$work/resumed.txt")" ] ||
  fail "stopped and resumed weights differ from the uninterrupted run's"
ok "stopped and resumed with --batch 16 equals the uninterrupted run"

"$resume" "${common[@]}" --batch 8 --checkpoint "$work/other-batch.ckpt" --resume > "$work/batch8.txt" 2>&1 ||
  fail "resume with --batch 8 (divides 80): $(tail -1 "$work/batch8.txt")"
grep -q "epoch 2, sample 80 (step 10 at batch 8)" "$work/batch8.txt" ||
  fail "--batch 8 does not resume at sample 80: $(head -1 "$work/batch8.txt")"
ok "--batch 8 resumes at sample 80"

if "$resume" "${common[@]}" --batch 32 --checkpoint "$work/bad-batch.ckpt" --resume > "$work/batch32.txt" 2>&1; then
  fail "--batch 32 (does not divide 80) was accepted"
fi
grep -q "stopped after sample 80 of epoch 2, which is not a whole number of batches of 32" "$work/batch32.txt" ||
  fail "--batch 32: $(tail -1 "$work/batch32.txt")"
ok "--batch 32 is refused"

# Stopping at an epoch's end (16 steps) must not save the next epoch's shuffled order as this position.
"$resume" "${common[@]}" --batch 16 --checkpoint "$work/boundary.ckpt" --stop-after 16 > /dev/null || fail "stop at 16"
"$resume" "${common[@]}" --batch 16 --checkpoint "$work/boundary.ckpt" --resume > "$work/boundary.txt" ||
  fail "resume from an epoch's end"
[ "$(checksum "$work/straight.txt")" = "$(checksum "$work/boundary.txt")" ] ||
  fail "stopped at an epoch's end and resumed: weights differ from the uninterrupted run's"
ok "stopped at an epoch's end and resumed equals the uninterrupted run"

# A partial last batch (256 = 10 x 24 + 16): stopped after 5 steps (sample 120), resumed at batch 24.
"$resume" "${common[@]}" --batch 24 --checkpoint "$work/straight24.ckpt" > "$work/straight24.txt" || fail "batch 24"
"$resume" "${common[@]}" --batch 24 --checkpoint "$work/partial.ckpt" --stop-after 5 > /dev/null || fail "stop at 5"
"$resume" "${common[@]}" --batch 24 --checkpoint "$work/partial.ckpt" --resume > "$work/partial.txt" ||
  fail "resume at batch 24"
grep -q "epoch 1, sample 120 (step 5 at batch 24)" "$work/partial.txt" ||
  fail "batch 24 resumes elsewhere: $(head -1 "$work/partial.txt")"
[ "$(checksum "$work/straight24.txt")" = "$(checksum "$work/partial.txt")" ] ||
  fail "with a partial last batch, stopped and resumed weights differ from the uninterrupted run's"
ok "with a partial last batch, stopped and resumed equals the uninterrupted run"

# A file from a run with more --epochs: 2 epochs done and 80 samples of the third.
"$resume" --data "$work/data" --epochs 3 --threads 1 --batch 16 --checkpoint "$work/longer.ckpt" --stop-after 37 \
  > /dev/null || fail "a 3-epoch run stopped after 37 steps"
if "$resume" "${common[@]}" --batch 16 --checkpoint "$work/longer.ckpt" --resume > "$work/longer.txt" 2>&1; then
  fail "--epochs 2 on a file 80 samples into epoch 3 was accepted"
fi
grep -q "has 2 epoch(s) done and 80 sample(s) of the next; this run trains 2 epoch(s)" "$work/longer.txt" ||
  fail "--epochs 2 on a longer run's file: $(tail -1 "$work/longer.txt")"
ok "a file from a run with more --epochs is refused"

if "$resume" --data "$work/data" --epochs 1 --threads 1 --batch 16 --checkpoint "$work/straight.ckpt" --resume \
  > "$work/epochs.txt" 2>&1; then
  fail "--epochs 1 on a file with 2 epochs done was accepted"
fi
grep -q "has 2 epoch(s) done and 0 sample(s) of the next; this run trains 1 epoch(s)" "$work/epochs.txt" ||
  fail "--epochs 1: $(tail -1 "$work/epochs.txt")"
ok "--epochs below the file's is refused"
[ $failures -eq 0 ] || { echo "$failures failures"; exit 1; }
