#!/usr/bin/env bash
# Byte-level GPT training, libbptrain (examples/char_gpt) vs PyTorch (bench/char_gpt_torch.py), side by side in
# one run: the same corpus, windows, model and recipe. Columns: training tokens/s (steps after the first few),
# peak RSS, and the validation loss after the run's steps. PyTorch: the current 2.x from PyPI (bench/torch_env.sh
# creates its environment on first use), the better of eager and torch.compile, F.scaled_dot_product_attention,
# OMP_WAIT_POLICY=passive; Debian's PyTorch 1.13 as a second column. Same threads on every side;
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for this command only. Rounds alternate the sides; each side's
# best rate counts (interference on a shared machine only slows a run down).
#
#   [THREADS="1 2"] [TORCH=pypi,debian] [DTYPE=f32] bash bench/char_gpt.sh [rounds=2] [steps=60] [model args...]
#   e.g. GPT-2-small shape: bash bench/char_gpt.sh 1 20 --layers 12 --dim 768 --heads 12 --context 1024 --batch 4
#   (the model args go to both sides; builds build-bench/ first)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
steps=${2:-60}
shift $(( $# >= 2 ? 2 : $# ))
model=("$@")
threads_list=${THREADS:-1 2}
dtype=${DTYPE:-f32}
torch_sides=${TORCH:-pypi,debian}
pypi="" debian=""
case ",$torch_sides," in *,pypi,*) pypi=$(bash bench/torch_env.sh pypi) ;; esac
case ",$torch_sides," in *,debian,*) debian=$(bash bench/torch_env.sh debian) ;; esac
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=OFF > /dev/null
cmake --build build-bench -j 2 --target char_gpt > /dev/null

run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
# Our side as key=value fields: tokens/s over the steps after the first 3 (char_gpt's own count: the first steps
# allocate and warm caches), peak RSS from the kernel's count for the whole process, the final val loss.
ours() {
  local out
  out=$(run /usr/bin/time -f "rss_kb=%M" build-bench/char_gpt --steps "$steps" --threads "$1" --dtype "$dtype" \
    "${model[@]}" 2>&1)
  echo "tokens_per_second=$(echo "$out" | sed -n 's/.*; \([0-9]*\) after the first 3 steps.*/\1/p')" \
    "rss_mb=$(echo "$out" | sed -n 's/^rss_kb=\([0-9]*\)/\1/p' | awk '{printf "%.0f", $1 / 1024}')" \
    "val_loss=$(echo "$out" | sed -n 's/^val loss \([0-9.]*\).*/\1/p')"
}
field() { echo "$1" | sed -n "s/.*$2=\([^ ]*\).*/\1/p" | head -1; }
best() { echo "$1" | sed -n "s/.*$2=\([^ ]*\).*/\1/p" | sort -g -r | head -1; }

echo "char_gpt benchmark: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $rounds rounds of" \
  "$steps steps, dtype $dtype, model: ${model[*]:-defaults}; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-8s %-30s %-44s %-7s %-26s %-7s %-8s\n" threads "libbptrain tok/s (RSS, val)" \
  "PyTorch 2.x best tok/s (RSS, val, mode)" speed "PyTorch 1.13 (RSS, val)" speed "RSS/2.x"
for t in $threads_list; do
  our_rate="" our_line="" new="" old=""
  for _ in $(seq "$rounds"); do
    line=$(ours "$t")
    rate=$(field "$line" tokens_per_second)
    if [ -z "$our_rate" ] || [ "${rate:-0}" -gt "$our_rate" ]; then our_rate=${rate:-0} our_line=$line; fi
    torch_args=(--steps "$steps" --threads "$t" --dtype "$dtype" "${model[@]}")
    if [ -n "$pypi" ]; then
      for mode in "" --compile; do
        new+=$(run OMP_WAIT_POLICY=passive "$pypi" bench/char_gpt_torch.py "${torch_args[@]}" $mode 2>/dev/null ||
          echo "failed=1")$'\n'
      done
    fi
    if [ -n "$debian" ]; then
      old+=$(run OMP_WAIT_POLICY=passive "$debian" bench/char_gpt_torch.py "${torch_args[@]}" 2>/dev/null ||
        echo "failed=1")$'\n'
    fi
  done
  new_rate=$(best "$new" tokens_per_second) old_rate=$(best "$old" tokens_per_second)
  new_line=$(echo "$new" | grep "tokens_per_second=${new_rate:-x} " | head -1 || true)
  old_line=$(echo "$old" | grep "tokens_per_second=${old_rate:-x} " | head -1 || true)
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "-" }'; }
  printf "%-8s %-30s %-44s %-7s %-26s %-7s %-8s\n" "$t" \
    "$our_rate ($(field "$our_line" rss_mb) MB, $(field "$our_line" val_loss))" \
    "${new_rate:--} ($(field "$new_line" peak_rss_mb) MB, $(field "$new_line" val_loss), $(field "$new_line" mode))" \
    "$(ratio "$our_rate" "${new_rate:-0}")" \
    "${old_rate:--} ($(field "$old_line" peak_rss_mb) MB, $(field "$old_line" val_loss))" \
    "$(ratio "$our_rate" "${old_rate:-0}")" \
    "$(awk -v a="$(field "$our_line" rss_mb)" -v b="$(field "$new_line" peak_rss_mb)" \
      'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else printf "-" }')"
done
