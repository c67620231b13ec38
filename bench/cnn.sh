#!/usr/bin/env bash
# LeNet-5 and ResNet-8 training throughput and peak RSS, libbptrain against PyTorch, side by side: the two
# run alternately (ROUNDS times each) with the same threads and batch, and the median of each is compared,
# so a shared machine's load hits both alike. Throughput is reported per wall second and per CPU second
# (process CPU time, which a shared machine's load disturbs far less). OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE are unset for both.
#
#   [MODELS="lenet resnet8"] bench/cnn.sh [BUILD_DIR] [THREADS] [BATCH] [ROUNDS] [STEPS]   (defaults: build 1 128 3 20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
threads=${2:-1}
batch=${3:-128}
rounds=${4:-3}
steps=${5:-20}
run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" "$@"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "cnn benchmark: threads $threads, batch $batch, $rounds alternating rounds of $steps timed steps; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for model in ${MODELS:-lenet resnet8}; do
  ours=() theirs=() our_cpu=() their_cpu=() our_rss=() their_rss=()
  for ((round = 0; round < rounds; round++)); do
    line=$(run "$build/bench/cnn_bench" "$model" --threads "$threads" --batch "$batch" --steps "$steps")
    echo "  $line"
    ours+=("$(awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "samples/s") print $i }' <<<"$line")")
    our_cpu+=("$(awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "samples" && $(i + 2) == "per") print $i }' <<<"$line")")
    our_rss+=("$(awk '{ for (i = 1; i < NF; i++) if ($i == "RSS") print $(i + 1) }' <<<"$line")")
    line=$(OPENBLAS_NUM_THREADS="$threads" run /usr/bin/python3 "$here/cnn_torch.py" "$model" --threads "$threads" \
           --batch "$batch" --steps "$steps")
    echo "  $line"
    theirs+=("$(awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "samples/s") print $i }' <<<"$line")")
    their_cpu+=("$(awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "samples" && $(i + 2) == "per") print $i }' <<<"$line")")
    their_rss+=("$(awk '{ for (i = 1; i < NF; i++) if ($i == "RSS") print $(i + 1) }' <<<"$line")")
  done
  a=$(printf '%s\n' "${ours[@]}" | median) b=$(printf '%s\n' "${theirs[@]}" | median)
  ca=$(printf '%s\n' "${our_cpu[@]}" | median) cb=$(printf '%s\n' "${their_cpu[@]}" | median)
  ra=$(printf '%s\n' "${our_rss[@]}" | median) rb=$(printf '%s\n' "${their_rss[@]}" | median)
  awk -v m="$model" -v a="$a" -v b="$b" -v ca="$ca" -v cb="$cb" -v ra="$ra" -v rb="$rb" 'BEGIN {
    printf "%s: libbptrain %.0f samples/s, PyTorch %.0f samples/s: %.2fx; per CPU-second %.0f vs %.0f: %.2fx; " \
           "peak RSS %.0f MB vs %.0f MB: %.0f%%\n", m, a, b, a / b, ca, cb, ca / cb, ra, rb, 100 * ra / rb }'
done
