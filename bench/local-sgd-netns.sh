#!/usr/bin/env bash
# Local SGD against synchronous data parallel on a shaped link, set beside the cost model
# (bench/local_sgd_model.py). Two ranks in network namespaces (scripts/netns-mpi.sh) train the MLP of
# ddp_mnist; in one run:
#   1. the ring's alpha and beta on that link, fitted by bench/ring_model.py to bench/comm-netns.sh's
#      all-reduce table (2 ranks, 64 KiB to 64 MiB), and gamma from build/reduce_rate_bench;
#   2. the step time with no averaging inside the run (--average-every larger than its steps): the compute c;
#   3. the step time for H = 1 (synchronous, gradients every step), each H given, and each H with each
#      bounded staleness S given (--max-staleness S, S <= H);
# then local_sgd_model.py --check prints measured against predicted. Needs root, like netns-mpi.sh.
#
#   bench/local-sgd-netns.sh [--rate 1gbit] [--epochs 1] [--every "4 8"] [--staleness "2"] [--out FILE]
# Benchmarks unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE; every run is bounded by netns-mpi.sh's timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BPT_BUILD_DIR:-build}
rate=1gbit epochs=1 every="4 8" staleness="2" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --staleness) staleness=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "local-sgd-netns: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out=$(mktemp /tmp/local-sgd-netns.XXXXXX)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON > /dev/null
cmake --build "$build" -j 2 --target ddp_mnist comm_bench reduce_rate_bench bptrain_modules > /dev/null
bench_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 BPTRAIN_MODULE_PATH="$PWD/$build")

echo "== gamma: the f32 sum of a ring step (reduce_rate_bench)"
gamma=$("${bench_env[@]}" "$build/reduce_rate_bench" | awk '/s\/byte/ {for (i = 1; i <= NF; i++) if ($i ~ /s\/byte/) print $(i - 1)}' | tail -1)
[ -n "$gamma" ] || { echo "local-sgd-netns: reduce_rate_bench printed no s/byte figure" >&2; exit 1; }
echo "gamma $gamma" | tee "$out"

echo "== alpha, beta: the ring all-reduce at $rate (comm-netns.sh, then ring_model.py)"
table=$(mktemp /tmp/local-sgd-ring.XXXXXX)
trap 'rm -f "$table"' EXIT
BPT_BUILD_DIR="$build" bash bench/comm-netns.sh --ranks 2 --rates "$rate" > "$table"
fit=$(python3 bench/ring_model.py --gamma "$gamma" "$table" | grep "^fit, rate $rate ")
echo "$fit"
alpha_us=$(echo "$fit" | sed -E 's/.*alpha = *([0-9.e+-]+) us.*/\1/')
beta=$(echo "$fit" | sed -E 's/.*beta = ([0-9.e+-]+) s\/byte.*/\1/')
echo "link $rate alpha $(python3 -c "print($alpha_us * 1e-6)") beta $beta" | tee -a "$out"
# The measured all-reduce itself (ours, fastest round), for the model's second prediction.
awk -v rate="$rate" '/^ +[0-9]+ +[0-9.]+ \/ +[0-9.]+ +[0-9.]+ \// && !done {print "allreduce " rate " bytes " $1 " ms " $5}
                     /^data-parallel step/ {done = 1}' "$table" | tee -a "$out"

# The last epoch's samples/s of ddp_mnist (its progress line, on stderr); a step is a global batch of 128.
step_ms() {
  local output
  output=$("${bench_env[@]}" bash scripts/netns-mpi.sh --ranks 2 --rate "$rate" --timeout 900 \
    "$build/ddp_mnist" --epochs "$epochs" --threads 1 --average-every "$1" --max-staleness "${2:-0}" 2>&1 | tr '\r' '\n')
  echo "$output" | grep -v "samples/s" >&2
  echo "$output" | awk '/samples\/s/ {for (i = 1; i <= NF; i++) if ($i == "samples/s") rate = $(i - 1)}
                        END {if (rate) printf "%.3f\n", 128e3 / rate}'
}
parameter_bytes=$((4 * (784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10)))
echo "== compute: no averaging inside the run"
compute=$(step_ms 1000000000)
for h in 1 $every; do
  echo "== H = $h"
  step=$(step_ms "$h")
  echo "ranks 2 rate $rate bytes $parameter_bytes compute_ms $compute H $h step_ms $step" | tee -a "$out"
  [ "$h" -gt 1 ] || continue
  for s in $staleness; do
    [ "$s" -le "$h" ] || continue
    echo "== H = $h, bounded staleness S = $s"
    step=$(step_ms "$h" "$s")
    echo "ranks 2 rate $rate bytes $parameter_bytes compute_ms $compute H $h S $s step_ms $step" | tee -a "$out"
  done
done
echo "== the model against these measurements ($out)"
python3 bench/local_sgd_model.py --check "$out"
