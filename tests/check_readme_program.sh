#!/usr/bin/env bash
# The README's "A first program" must compile and run as written: extracts the first ```c block under that
# heading, builds it against the built library with -Wall -Wextra -Werror as C11 (and as C++ when a C++
# compiler is found), trains 2 epochs on a 2048-sample slice of Fashion-MNIST and checks what it printed:
# one mean loss per epoch, falling, and a test accuracy line. Skips (77) without the data set.
# Usage: check_readme_program.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
source_dir=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
awk '/^## A first program/ { section = 1; next }
     section && /^## / { exit }
     section && !inside && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' "$source_dir/README.md" > "$work/first.c"
grep -q 'int main' "$work/first.c" || { echo "FAIL: no \`\`\`c block with main() under '## A first program'" >&2; exit 1; }
echo "extracted $(wc -l < "$work/first.c") lines from README.md"

flags=(-Wall -Wextra -Werror -I"$source_dir/include")
link=(-L"$build" -lbptrain -Wl,-rpath,"$build")
"${CC:-cc}" -std=c11 -pedantic "${flags[@]}" "$work/first.c" "${link[@]}" -o "$work/first"
cxx=${CXX:-c++}
if command -v "$cxx" > /dev/null; then
  "$cxx" -x c++ -std=c++17 "${flags[@]}" "$work/first.c" -x none "${link[@]}" -o "$work/first_cxx"
  echo "compiles as C11 and as C++17"
fi

if ! bash "$source_dir/scripts/make-data-slice.sh" "$work/data" 2048; then
  echo "skipped running it: no Fashion-MNIST (scripts/install-deps.sh installs dataset-fashion-mnist)"
  exit 77
fi
"$work/first" "$work/data" 2 | tee "$work/output.txt"
mapfile -t losses < <(sed -n 's/^epoch [0-9]*: mean loss \([0-9.]*\)$/\1/p' "$work/output.txt")
[ "${#losses[@]}" -eq 2 ] || { echo "FAIL: expected 2 'epoch N: mean loss X' lines" >&2; exit 1; }
awk -v a="${losses[0]}" -v b="${losses[1]}" 'BEGIN { exit !(b < a && a < 2.3) }' ||
  { echo "FAIL: the loss did not fall below ln(10) and then further (${losses[*]})" >&2; exit 1; }
accuracy=$(sed -n 's/^test accuracy \([0-9.]*\)%$/\1/p' "$work/output.txt")
# 2 epochs on 2048 samples reach about 75%; chance is 10%.
awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 50) }' || { echo "FAIL: test accuracy '${accuracy}' below 50%" >&2; exit 1; }
