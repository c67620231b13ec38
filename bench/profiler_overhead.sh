#!/usr/bin/env bash
# Profiler overhead, side by side in one run: the branch's library with the profiler off and on, and the
# library of a reference revision (default: main, which has no profiler hooks) running the same training
# steps. Repeats the pair of runs so noise shows; compare medians.
# Usage: bench/profiler_overhead.sh [REFERENCE_REVISION] [STEPS] [ROUNDS] [BATCH] [REPEATS] [WIDTH]
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
reference=${1:-main} steps=${2:-20} rounds=${3:-15} batch=${4:-128} repeats=${5:-3} width=${6:-784}
work=$source_dir/build-bench-profiler
mkdir -p "$work/reference-src"
git -C "$source_dir" archive "$reference" | tar -x -C "$work/reference-src"
for tree in reference current; do
  src=$work/reference-src
  [ "$tree" = current ] && src=$source_dir
  cmake -S "$src" -B "$work/$tree" -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=OFF -DBPT_BUILD_EXAMPLES=OFF \
    -DBPT_WITH_CUDA=OFF -DBPT_WITH_MPI=OFF -DBPT_WITH_NCCL=OFF > "$work/$tree.configure.log"
  cmake --build "$work/$tree" --target bptrain -j 2 > "$work/$tree.build.log"
done
cc -O2 -std=c11 -I"$work/reference-src/include" -DBPT_BENCH_NO_PROFILER "$source_dir/bench/profiler_overhead.c" \
  -L"$work/reference" -lbptrain -Wl,-rpath,"$work/reference" -o "$work/overhead_reference"
cc -O2 -std=c11 -I"$source_dir/include" "$source_dir/bench/profiler_overhead.c" \
  -L"$work/current" -lbptrain -Wl,-rpath,"$work/current" -o "$work/overhead_current"
echo "reference = $reference ($(git -C "$source_dir" rev-parse --short "$reference")), current = working tree"
for repeat in $(seq "$repeats"); do
  printf 'reference (no hooks): '
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$work/overhead_reference" "$steps" "$rounds" "$batch" "$width"
  printf 'current:              '
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$work/overhead_current" "$steps" "$rounds" "$batch" "$width"
done
