#!/usr/bin/env bash
# The checkpoint as the examples' one model file: mnist_cnn --save writes a checkpoint that mnist_cnn --eval
# reads back to the same test accuracy; checkpoint_resume's checkpoint (another model) is refused naming the
# first parameter that differs; an old BPTPARAM file loads by position with a note. Skips (77) without the
# Fashion-MNIST data.
# Usage: check_model_file.sh WORK_DIR MNIST_CNN CHECKPOINT_RESUME
set -euo pipefail
work=$1 cnn=$2 resume=$3
data=${BPT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -d "$data" ]; then
  echo "skipped: no Fashion-MNIST in $data (scripts/install-deps.sh installs dataset-fashion-mnist)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$cnn" --data "$data" --epochs 1 --threads 2 --save "$work/lenet.ckpt" > "$work/train.txt"
trained=$(sed -n 's/.*final test accuracy: \([0-9.]*\)%.*/\1/p' "$work/train.txt")
[ -n "$trained" ] || fail "mnist_cnn printed no final test accuracy"
"$cnn" --data "$data" --threads 2 --eval "$work/lenet.ckpt" > "$work/eval.txt"
evaluated=$(sed -n 's/.*lenet.ckpt: test accuracy \([0-9.]*\)%.*/\1/p' "$work/eval.txt")
[ "$evaluated" = "$trained" ] || fail "--eval of the saved checkpoint: $evaluated%, training ended at $trained%"

"$resume" --data "$data" --checkpoint "$work/mlp.ckpt" --epochs 1 --stop-after 3 > /dev/null
if "$cnn" --data "$data" --threads 2 --eval "$work/mlp.ckpt" > "$work/mismatch.txt" 2>&1; then
  fail "mnist_cnn --eval accepted the MLP's checkpoint"
fi
grep -q "parameter 'lenet.*' .* is missing in the file (the file has parameter 'fc1.weight' \[512,784\] in its place" \
  "$work/mismatch.txt" || { cat "$work/mismatch.txt"; fail "the mismatch does not name the first parameter"; }

# An old BPTPARAM file with the checkpoint's values (PARM is the one section holding them, in order).
python3 - "$work/lenet.ckpt" "$work/old.bin" << 'PYTHON'
import struct, sys
data = open(sys.argv[1], "rb").read()
offset, values = 24, []
for _ in range(struct.unpack_from("<I", data, 16)[0]):
    tag, _, length = struct.unpack_from("<4sIQ", data, offset)
    payload = data[offset + 20 : offset + 20 + length]
    offset += 20 + length
    if tag != b"PARM":
        continue
    at, (count,) = 4, struct.unpack_from("<I", payload, 0)
    for _ in range(count):
        (name_length,) = struct.unpack_from("<I", payload, at)
        at += 4 + name_length + 4
        (rank,) = struct.unpack_from("<I", payload, at)
        dims = struct.unpack_from("<%dq" % rank, payload, at + 4)
        at += 4 + 8 * rank
        size = 1
        for d in dims:
            size *= d
        values.append(payload[at : at + 4 * size])
        at += 4 * size
blob = b"".join(values)
open(sys.argv[2], "wb").write(b"BPTPARAM" + struct.pack("<q", len(blob) // 4) + blob)
PYTHON
"$cnn" --data "$data" --threads 2 --eval "$work/old.bin" > "$work/old.txt"
grep -q "note: .*old.bin is an old parameter file (no names or shapes): its 61706 values were loaded by position" \
  "$work/old.txt" || { cat "$work/old.txt"; fail "no note for the old parameter file"; }
old=$(sed -n 's/.*old.bin: test accuracy \([0-9.]*\)%.*/\1/p' "$work/old.txt")
[ "$old" = "$trained" ] || fail "--eval of the BPTPARAM file: $old%, the checkpoint $trained%"
echo "model file OK: save/eval $trained%, mismatch named, BPTPARAM loaded by position"
