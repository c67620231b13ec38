#!/usr/bin/env bash
# MLP training throughput and peak memory, libbptrain vs PyTorch, side by side in one run.
# Columns: libbptrain as a user gets it; the current PyTorch 2.x from PyPI (a virtual environment that
# bench/torch_env.sh creates on first use), the better of eager and torch.compile; Debian's PyTorch 1.13.
# The GEMM bound column times only the step's eight matrix products (bench/mlp_gemm_bound.c), same threads.
# The bf16 column is libbptrain under the bf16 precision policy (mlp_train_bench --dtype bf16), its ratio
# to libbptrain's f32 in the same rounds; the line under the table names the unit each ran on. Beside it
# PyTorch 2.x under torch.autocast(bfloat16), its best of eager and compile, and our bf16's ratio to it.
# All sides: the same threads, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (this command only), PyTorch with
# OMP_WAIT_POLICY=passive (its fastest setting here). Rounds alternate the sides; each side's best round
# counts, since on a shared machine interference only ever slows a run down.
#
#   [THREADS=2] [TORCH=pypi,debian] bash bench/mlp.sh [rounds=5] [samples=30000] [batches="32 128 512"]
#   (builds build-bench/ first; TORCH=debian skips the PyPI column)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
samples=${2:-30000}
batches=${3:-32 128 512}
threads=${THREADS:-2}
torch_sides=${TORCH:-pypi,debian}
pypi="" debian=""
case ",$torch_sides," in *,pypi,*) pypi=$(bash bench/torch_env.sh pypi) ;; esac
case ",$torch_sides," in *,debian,*) debian=$(bash bench/torch_env.sh debian) ;; esac
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=OFF > /dev/null
cmake --build build-bench -j 2 --target mlp_train_bench mlp_gemm_bound_bench gemm_shapes_bench > /dev/null

run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
field() { echo "$1" | sed -n "s/.*$2=\([^ ]*\).*/\1/p" | sort -g -r | head -1; }
# The round with the best rate, whole line, so its mode and kernel can be reported with it.
best_line() { echo "$1" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^samples_per_second=/) { split($i, f, "="); print f[2], $0 } }' |
  sort -g -r | head -1 | cut -d' ' -f2-; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "-" }'; }

echo "mlp benchmark: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), threads $threads," \
  "$rounds rounds of $samples samples; load: $(cut -d' ' -f1-3 /proc/loadavg)"
run build-bench/gemm_shapes_bench --info
printf "%-6s %-22s %-24s %-40s %-7s %-22s %-7s %-10s %-20s %-26s %-7s\n" batch "libbptrain (RSS)" \
  "libbptrain bf16 (/f32)" "PyTorch 2.x best (RSS, mode, kernel)" speed "PyTorch 1.13 (RSS)" speed "RSS/2.x" \
  "GEMM bound (ours %)" "PyTorch 2.x bf16 (mode)" "bf16 speed"
units=""
for batch in $batches; do
  ours="" ours_bf16="" new="" new_bf16="" old="" bound=""
  for _ in $(seq "$rounds"); do
    bound+=$(run build-bench/mlp_gemm_bound_bench --batch "$batch" --threads "$threads")$'\n'
    ours+=$(run build-bench/mlp_train_bench --batch "$batch" --samples "$samples" --threads "$threads")$'\n'
    ours_bf16+=$(run build-bench/mlp_train_bench --batch "$batch" --samples "$samples" --threads "$threads" \
      --dtype bf16)$'\n'
    if [ -n "$pypi" ]; then
      for mode in "" --compile; do
        # A mode that fails (torch.compile without a compiler, say) drops out of the best, not the benchmark.
        new+=$(run OMP_WAIT_POLICY=passive "$pypi" bench/mlp_train_torch.py --batch "$batch" --samples "$samples" \
          --threads "$threads" $mode 2>/dev/null || true)$'\n'
        new_bf16+=$(run OMP_WAIT_POLICY=passive "$pypi" bench/mlp_train_torch.py --batch "$batch" \
          --samples "$samples" --threads "$threads" --bf16 $mode 2>/dev/null || true)$'\n'
      done
    fi
    if [ -n "$debian" ]; then
      old+=$(run OMP_WAIT_POLICY=passive "$debian" bench/mlp_train_torch.py --batch "$batch" --samples "$samples" \
        --threads "$threads")$'\n'
    fi
  done
  ours_rate=$(field "$ours" samples_per_second) bound_rate=$(field "$bound" samples_per_second)
  ours_rss=$(echo "$ours" | sed -n 's/.*peak_rss_mb=\([0-9.]*\).*/\1/p' | sort -g | head -1)
  bf16_rate=$(field "$ours_bf16" samples_per_second)
  units="f32 $(field "$(best_line "$ours")" unit), bf16 $(field "$(best_line "$ours_bf16")" unit)"
  new_line=$(best_line "$new") old_line=$(best_line "$old")
  new_rate=$(field "$new_line" samples_per_second) old_rate=$(field "$old_line" samples_per_second)
  new_rss=$(field "$new_line" peak_rss_mb) old_rss=$(field "$old_line" peak_rss_mb)
  new_bf16_line=$(best_line "$new_bf16")
  new_bf16_rate=$(field "$new_bf16_line" samples_per_second)
  printf "%-6s %-22s %-24s %-40s %-7s %-22s %-7s %-10s %-20s %-26s %-7s\n" "$batch" "$ours_rate ($ours_rss MB)" \
    "$bf16_rate ($(ratio "$bf16_rate" "$ours_rate"))" \
    "${new_rate:--} (${new_rss:--} MB, $(field "$new_line" mode), $(field "$new_line" kernel))" \
    "$(ratio "$ours_rate" "${new_rate:-0}")" "${old_rate:--} (${old_rss:--} MB)" "$(ratio "$ours_rate" "${old_rate:-0}")" \
    "$(awk -v a="$ours_rss" -v b="${new_rss:-0}" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else printf "-" }')" \
    "$bound_rate ($(awk "BEGIN{printf \"%.0f%%\", 100*$ours_rate/$bound_rate}"))" \
    "${new_bf16_rate:--} ($(field "$new_bf16_line" mode))" "$(ratio "$bf16_rate" "${new_bf16_rate:-0}")"
done
echo "libbptrain units: $units"
