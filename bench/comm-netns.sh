#!/usr/bin/env bash
# The comm benchmark (bench/mpi/comm.c) with each rank on an emulated network host: scripts/netns-mpi.sh puts
# every rank in its own network namespace and shapes each link with tc tbf; MPI runs over TCP on those links.
# All-reduce from 64 KiB to 64 MiB, then the data-parallel MLP step, at each rate in turn. Needs root.
#
#   bench/comm-netns.sh [--ranks N] [--rates "none 10gbit 1gbit"] [comm_bench options...]
# Results are recorded in docs/benchmarks.md and docs/comm.md.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BPT_BUILD_DIR:-build}
ranks=2 rates="none 10gbit 1gbit"
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    *) break ;;
  esac
done
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON > /dev/null
cmake --build "$build" -j 2 --target comm_bench bptrain_modules > /dev/null
for rate in $rates; do
  echo "=== $ranks ranks, links shaped to: $rate"
  # Each run is bounded (10 min); netns-mpi.sh removes its namespaces whatever happens.
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 BPTRAIN_MODULE_PATH="$PWD/$build" \
    bash scripts/netns-mpi.sh --ranks "$ranks" --rate "$rate" --timeout 600 \
    "$build/tests/mpi/comm_bench" --min-bytes 65536 --rounds 5 --steps 3 "$@"
done
