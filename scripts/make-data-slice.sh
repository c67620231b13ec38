#!/usr/bin/env bash
# Cuts the first N training and N/2 test samples of Fashion-MNIST into plain IDX files in DIR, for example
# runs that must stay short (valgrind, sanitizers).   scripts/make-data-slice.sh DIR [N=512]
# Exits 77 when Fashion-MNIST is not installed (scripts/install-deps.sh installs it).
set -euo pipefail
directory=$1
count=${2:-512}
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || exit 77
mkdir -p "$directory"
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))"; printf "\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
# head closes the pipe early, so zcat's SIGPIPE is expected: pipefail is off here and the sizes are checked.
set +o pipefail
for split in train:$count t10k:$((count / 2)); do
  name=${split%%:*}
  n=${split##*:}
  { printf '\x00\x00\x08\x03'; be32 "$n"; be32 28; be32 28
    zcat "$data/$name-images-idx3-ubyte.gz" | tail -c +17 | head -c $((n * 784)); } > "$directory/$name-images-idx3-ubyte"
  { printf '\x00\x00\x08\x01'; be32 "$n"
    zcat "$data/$name-labels-idx1-ubyte.gz" | tail -c +9 | head -c "$n"; } > "$directory/$name-labels-idx1-ubyte"
  [ "$(stat -c %s "$directory/$name-images-idx3-ubyte")" -eq $((16 + n * 784)) ] &&
    [ "$(stat -c %s "$directory/$name-labels-idx1-ubyte")" -eq $((8 + n)) ] ||
    { echo "make-data-slice: could not cut $name" >&2; exit 1; }
done
