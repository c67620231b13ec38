#!/usr/bin/env bash
# OpenMP waiting on shared cores (issue 16.3): MLP training throughput (bench/mlp_train.c, batch 128, 2 threads)
# under each way of waiting, on two cores that are (i) idle, (ii) shared with two busy-loop processes, (iii)
# shared with a second copy of the same training run (the "two users on one box" case). Rounds alternate the
# options; each cell is the median of its rounds in samples/s, then its ratio to libgomp's default waiting.
# A run ends after SAMPLES timed samples or S seconds, whichever comes first (the spinning configurations
# under load run at a few hundred samples/s).
# Last, the cost of one parallel region under each policy on otherwise idle cores (bench/omp_region.c).
# Everything runs pinned to the first two CPUs this shell may use, so a bigger machine measures the same thing.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset in this command only, as in the other benchmarks.
#
#   bash bench/shared_cores.sh [--quick] [--rounds N] [--samples N] [--seconds S] [--conditions "idle busy twin"]
#   OPTIONS="default OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=1000 ..." overrides the rows; "threads=1" in a row
#   runs one thread instead of two. Default: 3 rounds, 3 minutes on 2 loaded vCPUs (less when quiet); --quick: 1 round.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 samples=12800 seconds=2 conditions="idle busy twin"
while [ $# -gt 0 ]; do
  case $1 in
    --quick) rounds=1 samples=6400 seconds=1 ;;
    --rounds) rounds=$2; shift ;;
    --samples) samples=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --conditions) conditions=$2; shift ;;
    *) echo "usage: bench/shared_cores.sh [--quick] [--rounds N] [--samples N] [--seconds S] [--conditions LIST]" >&2; exit 2 ;;
  esac
  shift
done
read -r -a options <<< "${OPTIONS:-default OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=1000 GOMP_SPINCOUNT=10000 GOMP_SPINCOUNT=100000 threads=1}"

cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=OFF > /dev/null
cmake --build build-bench -j 2 --target mlp_train_bench omp_region_bench > /dev/null
# A slice keeps the data loading (the gz decompression of all 60,000 images) out of every short run.
data=build-bench/shared-cores-data
[ -f "$data/train-labels-idx1-ubyte" ] || bash scripts/make-data-slice.sh "$data" 6400 ||
  { echo "shared_cores: Fashion-MNIST is not installed (scripts/install-deps.sh)" >&2; exit 1; }

# The first two CPUs of this shell's affinity list ("0-3,8" -> 0,1).
cpus=$(awk '/^Cpus_allowed_list/ { n = split($2, r, ","); for (i = 1; i <= n && k < 2; i++) {
         split(r[i], e, "-"); hi = e[2] == "" ? e[1] : e[2]; for (c = e[1]; c <= hi && k < 2; c++) list[k++] = c }
         print list[0] (k > 1 ? "," list[1] : "") }' /proc/self/status)
pinned() { taskset -c "$cpus" "$@"; }

spinners=()
stop_spinners() { for pid in "${spinners[@]}"; do kill "$pid" 2> /dev/null || true; done; spinners=(); }
trap stop_spinners EXIT
# taskset itself in the background (not the pinned function, whose subshell would leave the loop orphaned
# when killed): taskset execs the loop, so $! is the loop.
start_spinners() { for _ in 1 2; do taskset -c "$cpus" sh -c 'while :; do :; done' & spinners+=($!); done; }

# One training run under OPTION: its samples/s (the env keeps OMP_WAIT_POLICY/GOMP_SPINCOUNT unset for
# "default", whatever the caller's shell has).
train() {
  local option=$1 threads=2 assignments=()
  case $option in
    default) ;;
    threads=*) threads=${option#threads=} ;;
    *) assignments=("$option") ;;
  esac
  pinned env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS \
    "${assignments[@]}" build-bench/mlp_train_bench --batch 128 --samples "$samples" --seconds "$seconds" \
    --threads "$threads" --data "$data" | sed -n 's/.*samples_per_second=\([0-9.]*\).*/\1/p'
}
# Under "twin" two copies run at once; the rate is their mean, what each of the two users sees.
measure() {
  local condition=$1 option=$2
  if [ "$condition" = twin ]; then
    local first second
    first=$(mktemp) second=$(mktemp)
    train "$option" > "$first" & local a=$!
    train "$option" > "$second" & local b=$!
    wait "$a" "$b"
    awk '{ s += $1; n++ } END { if (n == 2) printf "%.0f\n", s / 2 }' "$first" "$second"
    rm -f "$first" "$second"
  else
    train "$option"
  fi
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

echo "shared cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), CPUs $cpus," \
  "$(gcc -dumpfullversion 2> /dev/null | sed 's/^/libgomp of gcc /'), $rounds rounds of $samples samples;" \
  "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-24s" option
for condition in $conditions; do printf " %-22s" "$condition"; done
echo
declare -A result
for condition in $conditions; do
  [ "$condition" = busy ] && start_spinners
  declare -A rates=()
  for ((round = 0; round < rounds; round++)); do
    for option in "${options[@]}"; do rates[$option]+="$(measure "$condition" "$option") "; done
  done
  stop_spinners
  for option in "${options[@]}"; do result[$condition,$option]=$(tr ' ' '\n' <<< "${rates[$option]}" | median); done
  unset rates
done
for option in "${options[@]}"; do
  printf "%-24s" "$option"
  for condition in $conditions; do
    awk -v r="${result[$condition,$option]}" -v d="${result[$condition,default]:-0}" \
      'BEGIN { if (d > 0) printf " %8.0f (%5.2fx)       ", r, r / d; else printf " %8.0f               ", r }'
  done
  echo
done
# What each policy costs per parallel region with nothing else on the cores (bench/omp_region.c): the idle
# price of waking sleeping threads, which the MLP pays about 22 times a step.
for option in "${options[@]}"; do
  case $option in threads=*) continue ;; default) assignments=() ;; *) assignments=("$option") ;; esac
  printf "%-24s %s\n" "$option" "$(pinned env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "${assignments[@]}" \
    build-bench/omp_region_bench --gap 200 --work 100 --regions 300 | sed 's/^omp_region //')"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
