#!/usr/bin/env bash
# examples/char_gpt on a small text (the repository's docs): it learns (validation loss well under the 5.55 nats
# of a uniform guess), a run stopped and resumed from its checkpoint ends with the uninterrupted run's weights bit
# for bit, greedy generation with the key/value cache writes the same bytes as a whole window per byte, a
# recomputed run trains the same weights as a plain one, misuse is refused before any work, and under MPI two
# ranks train as one rank on the whole batch (within float tolerance; skipped without mpirun).
# Usage: check_char_gpt.sh WORK_DIR CHAR_GPT SOURCE_DIR
set -uo pipefail
work=$1 gpt=$2 source=$3
rm -rf "$work" && mkdir -p "$work"
cat "$source"/docs/*.md > "$work/text.txt"
tiny=(--data "$work/text.txt" --layers 2 --dim 32 --heads 2 --context 32 --batch 8 --lr 3e-3 --warmup 5
      --threads 1 --val-batches 4)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
checksum() { sed -n 's/^parameter checksum \([0-9a-f]*\)$/\1/p' "$1" | tail -1; }

"$gpt" "${tiny[@]}" --steps 60 --sample 24 --prompt "The " > "$work/learn.txt" 2>&1 || fail "training run: $(tail -2 "$work/learn.txt")"
val=$(sed -n 's/^val loss \([0-9.]*\).*/\1/p' "$work/learn.txt")
awk -v v="${val:-9}" 'BEGIN { exit !(v < 4.5) }' || fail "val loss ${val:-missing} after 60 steps is not below 4.5"
grep -q "tokens/s" "$work/learn.txt" || fail "no progress line with tokens/s"
grep -q "^activation memory: .* bytes per token" "$work/learn.txt" || fail "no activation memory line"
[ $failures -eq 0 ] && echo "ok: it learns (val loss $val)"

# --onnx writes the model; where ONNX Runtime is installed ($BPT_ONNX_PYTHON, as check_onnx_runtime), it
# generates greedily from the file, a window per byte, and must write the bytes char_gpt wrote.
"$gpt" "${tiny[@]}" --steps 20 --onnx "$work/gpt.onnx" --sample 16 --prompt "The " > "$work/onnx.txt" 2>&1 ||
  fail "--onnx: $(tail -2 "$work/onnx.txt")"
[ -s "$work/gpt.onnx" ] || fail "--onnx wrote no file"
onnx_python=${BPT_ONNX_PYTHON:-python3}
if "$onnx_python" -c "import onnxruntime" 2> /dev/null; then
  sed -n '/^sample (/,/^sampling:/p' "$work/onnx.txt" | sed '1d;$d' > "$work/onnx-sample.txt"
  "$onnx_python" - "$work/gpt.onnx" "$work/onnx-sample.txt" <<'PY' || fail "ONNX Runtime's greedy bytes differ"
import sys
import numpy as np
import onnxruntime
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
names = [i.name for i in session.get_inputs()]
context = session.get_inputs()[0].shape[1]
text = bytearray(b"The ")
for _ in range(16):
    window = text[-context:]
    tokens = np.zeros((1, context), np.int32)
    tokens[0, :len(window)] = list(window)
    feed = {"tokens": tokens, "positions": np.arange(context, dtype=np.int32)[None, :]}
    (logits,) = session.run(None, {n: feed[n] for n in names})
    text.append(int(np.argmax(logits[0, len(window) - 1])))
expected = open(sys.argv[2], "rb").read().rstrip(b"\n")
print("ONNX Runtime:", bytes(text), "char_gpt:", expected)
sys.exit(0 if bytes(text) == expected else 1)
PY
  [ $failures -eq 0 ] && echo "ok: ONNX Runtime generates char_gpt's greedy bytes from the exported file"
else
  echo "skipped: ONNX Runtime on the exported model (no onnxruntime in ${onnx_python})"
fi

# Greedy bytes: the cache and the window agree (the sample fits the context, so both see every byte).
sample() { sed -n '/^sample (/,/^sampling:/p' "$1" | sed '1d;$d'; }
"$gpt" "${tiny[@]}" --steps 20 --sample 24 --prompt "The " > "$work/cached.txt" 2>&1 || fail "cached sampling"
"$gpt" "${tiny[@]}" --steps 20 --sample 24 --prompt "The " --no-kv-cache > "$work/window.txt" 2>&1 ||
  fail "window sampling"
if [ -z "$(sample "$work/cached.txt")" ] || [ "$(sample "$work/cached.txt")" != "$(sample "$work/window.txt")" ]; then
  fail "greedy samples differ: cache '$(sample "$work/cached.txt")', window '$(sample "$work/window.txt")'"
else
  echo "ok: greedy generation with the key/value cache equals a window per byte"
fi
# Past the context the cache starts afresh from the last half: it must still run and write every byte.
"$gpt" "${tiny[@]}" --steps 2 --sample 80 --temperature 0.8 --top-k 10 > "$work/long.txt" 2>&1 ||
  fail "sampling past the context: $(tail -2 "$work/long.txt")"
grep -q "^sampling: 80 bytes" "$work/long.txt" || fail "sampling past the context wrote: $(tail -1 "$work/long.txt")"

# Stopped after 7 of 16 steps and resumed: the uninterrupted run's weights, bit for bit.
"$gpt" "${tiny[@]}" --steps 16 --checkpoint "$work/straight.ckpt" > "$work/straight.txt" 2>&1 || fail "straight run"
"$gpt" "${tiny[@]}" --steps 16 --checkpoint "$work/resumed.ckpt" --stop-after 7 > "$work/stopped.txt" 2>&1 ||
  fail "stopped run"
"$gpt" "${tiny[@]}" --steps 16 --checkpoint "$work/resumed.ckpt" --resume > "$work/resumed.txt" 2>&1 ||
  fail "resumed run: $(tail -2 "$work/resumed.txt")"
grep -q "resumed from .* at step 7" "$work/resumed.txt" || fail "did not resume at step 7: $(head -3 "$work/resumed.txt")"
if [ -z "$(checksum "$work/straight.txt")" ] || [ "$(checksum "$work/straight.txt")" != "$(checksum "$work/resumed.txt")" ]; then
  fail "resumed weights $(checksum "$work/resumed.txt") differ from the uninterrupted $(checksum "$work/straight.txt")"
else
  echo "ok: stopped at step 7 and resumed equals the uninterrupted run ($(checksum "$work/straight.txt"))"
fi

# Recomputation changes memory, not arithmetic.
"$gpt" "${tiny[@]}" --steps 16 --recompute > "$work/recompute.txt" 2>&1 || fail "recomputed run"
[ "$(checksum "$work/recompute.txt")" = "$(checksum "$work/straight.txt")" ] ||
  fail "recomputed weights $(checksum "$work/recompute.txt") differ from $(checksum "$work/straight.txt")"
held() { sed -n 's/^activation memory: \([0-9]*\) bytes per token held.*/\1/p' "$1"; }
[ "$(held "$work/recompute.txt")" -lt "$(held "$work/straight.txt")" ] 2>/dev/null ||
  fail "recomputation holds $(held "$work/recompute.txt") bytes per token, no fewer than $(held "$work/straight.txt")"
[ $failures -eq 0 ] && echo "ok: --recompute: the same weights from $(held "$work/recompute.txt") instead of $(held "$work/straight.txt") bytes per token"

# Misuse: refused at once with the option named.
expect() { # expect STATUS PATTERN ARGS...
  local want=$1 pattern=$2 output rc
  shift 2
  output=$(timeout 60 "$gpt" "$@" 2>&1); rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$pattern" <<< "$output"; then
    fail "char_gpt $*: exit $rc, want $want and '$pattern' in: $(tail -1 <<< "$output")"
  fi
}
expect 2 "--dim a multiple of --heads" --dim 30 --heads 4
expect 2 "--resume needs --checkpoint" --resume
expect 2 "--save and --eval exclude each other" --eval "$work/straight.ckpt" --save "$work/x.ckpt"
expect 2 "--dtype 'f64'" --dtype f64
expect 1 "no-such-file" --data "$work/no-such-file"
expect 1 "at least" --data "$source/LICENSE" --context 100000
[ $failures -eq 0 ] && echo "ok: misuse is refused"

# Data parallel: 2 ranks x 4 windows equal 1 rank x 8 after the same steps, within float tolerance (an absolute
# one: AdamW's first steps move every weight by about the rate, whatever its size).
if command -v mpirun > /dev/null && ls "$(dirname "$gpt")"/libbptrain-mpi.so* > /dev/null 2>&1; then
  "$gpt" "${tiny[@]}" --steps 6 --dump-parameters "$work/one.f32" > "$work/one.txt" 2>&1 || fail "1-rank run"
  # Open MPI leaks its own start-up allocations (no libbptrain frame), so a sanitizer build checks these ranks for
  # memory errors but not leaks, as tests/mpi/CMakeLists.txt does for the MPI tests.
  OMP_NUM_THREADS=1 LSAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none -x LSAN_OPTIONS -np 2 "$gpt" "${tiny[@]}" --steps 6 \
    --dump-parameters "$work/two.f32" > "$work/two.txt" 2>&1 || fail "2-rank run: $(tail -3 "$work/two.txt")"
  grep -q "data parallel: 2 ranks" "$work/two.txt" || fail "the 2-rank run did not split the batch"
  python3 - "$work/one.f32" "$work/two.f32" <<'PY' || fail "2 ranks differ from 1 rank"
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read()); b.frombytes(open(sys.argv[2], "rb").read())
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
# Six steps at rate <= 3e-3 move a weight by up to ~2e-2; summation order alone leaves ~1e-6.
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"2 ranks vs 1: {len(a)} parameters, largest difference {worst:.2e}")
sys.exit(0 if worst < 1e-4 else 1)
PY
  [ $failures -eq 0 ] && echo "ok: 2 ranks train as 1 rank on the whole batch"
else
  echo "skipped: data-parallel equality (no mpirun or no MPI module)"
fi
[ $failures -eq 0 ] || { echo "$failures failures"; exit 1; }
echo "char_gpt OK"
