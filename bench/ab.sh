#!/usr/bin/env bash
# Same-run A/B of two libbptrain builds (say main before and after a change): the MLP (bench/mlp_train.c) and
# the CNN (bench/cnn_bench.c) benchmarks of both builds run alternately, ROUNDS times each, and each side's
# best round counts (on a shared machine interference only ever slows a run down). OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE are unset for both, as in the other benchmarks.
#
#   bash bench/ab.sh BUILD_A BUILD_B [ROUNDS=5] [THREADS=2]
#   (each build dir needs the targets mlp_train_bench and cnn_bench: cmake --build DIR --target ...)
set -euo pipefail
a=$1 b=$2 rounds=${3:-5} threads=${4:-2}
run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" "$@"; }
rate() { awk '{ for (i = 1; i <= NF; i++) { if ($i ~ /^samples_per_second=/) { split($i, f, "="); print f[2] }
                                           if ($(i + 1) == "samples/s") print $i } }' <<<"$1"; }
best() { sort -g -r | head -1; }
echo "A/B: A=$a B=$b, $rounds alternating rounds, $threads threads; load: $(cut -d' ' -f1-3 /proc/loadavg)"
bench() {  # name, then the command with BUILD standing for the build dir
  local name=$1 ra=() rb=() line
  shift
  for ((round = 0; round < rounds; round++)); do
    line=$(run "${@//BUILD/$a}" 2>/dev/null)
    ra+=("$(rate "$line")")
    line=$(run "${@//BUILD/$b}" 2>/dev/null)
    rb+=("$(rate "$line")")
  done
  local x y
  x=$(printf '%s\n' "${ra[@]}" | best) y=$(printf '%s\n' "${rb[@]}" | best)
  awk -v n="$name" -v x="$x" -v y="$y" 'BEGIN { printf "%-22s A %8.0f  B %8.0f samples/s  B/A %.3f\n", n, x, y, y / x }'
}
for batch in 32 128 512; do
  bench "mlp batch $batch" BUILD/mlp_train_bench --batch "$batch" --samples 20000 --threads "$threads"
done
for model in lenet resnet8; do
  bench "$model batch 128" BUILD/bench/cnn_bench "$model" --threads "$threads" --batch 128 --steps 10
done
