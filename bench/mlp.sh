#!/usr/bin/env bash
# MLP training throughput and peak memory, libbptrain vs PyTorch, side by side in one run.
# The GEMM bound column times only the step's eight matrix products (bench/mlp_gemm_bound.c), same threads.
# Both sides: 2 threads, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (this command only), PyTorch with
# OMP_WAIT_POLICY=passive (its fastest setting here). Rounds alternate the two sides; each side's best
# round counts, since on a shared machine interference only ever slows a run down.
#
#   bash bench/mlp.sh [rounds=5] [samples=30000]      (builds build-bench/ first; installs python3-torch
#                                                       when run as root and it is missing)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
samples=${2:-30000}
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then apt-get install -y -qq python3-torch; else echo "needs python3-torch" >&2; exit 1; fi
fi
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=OFF > /dev/null
cmake --build build-bench -j 2 --target mlp_train_bench mlp_gemm_bound_bench > /dev/null

run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
printf "%-6s %-28s %-28s %-8s %-7s %-26s\n" batch "libbptrain samples/s (RSS)" "PyTorch samples/s (RSS)" speed RSS \
  "GEMM bound (ours/bound)"
for batch in 32 128 512; do
  ours="" theirs="" bound=""
  for _ in $(seq "$rounds"); do
    bound+=$(run build-bench/mlp_gemm_bound_bench --batch "$batch" --threads 2)$'\n'
    ours+=$(run build-bench/mlp_train_bench --batch "$batch" --samples "$samples" --threads 2)$'\n'
    theirs+=$(run OMP_WAIT_POLICY=passive /usr/bin/python3 bench/mlp_train_torch.py --batch "$batch" \
      --samples "$samples" --threads 2)$'\n'
  done
  field() { echo "$1" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p" | sort -n -r | head -1; }
  ours_rate=$(field "$ours" samples_per_second); theirs_rate=$(field "$theirs" samples_per_second)
  bound_rate=$(field "$bound" samples_per_second)
  ours_rss=$(echo "$ours" | sed -n 's/.*peak_rss_mb=\([0-9.]*\).*/\1/p' | sort -n | head -1)
  theirs_rss=$(echo "$theirs" | sed -n 's/.*peak_rss_mb=\([0-9.]*\).*/\1/p' | sort -n | head -1)
  printf "%-6s %-28s %-28s %-8s %-7s %-26s\n" "$batch" "$ours_rate ($ours_rss MB)" "$theirs_rate ($theirs_rss MB)" \
    "$(awk "BEGIN{printf \"%.2fx\", $ours_rate/$theirs_rate}")" "$(awk "BEGIN{printf \"%.2fx\", $ours_rss/$theirs_rss}")" \
    "$bound_rate ($(awk "BEGIN{printf \"%.0f%%\", 100*$ours_rate/$bound_rate}"))"
done
