#!/bin/sh
# OpenMP 5.0 applies an `if` clause without a modifier to every construct of a combined directive that takes
# one, simd included: `parallel for simd if (n > T)` runs the loop scalar, not only on one thread, whenever
# n <= T (GCC 12 does so: every element-wise loop under the parallel threshold ran scalar). On a combined
# parallel ... simd directive such clauses must name the construct they mean, `if (parallel: ...)`; a plain
# `omp simd if (...)` means the simd loop and is left alone.
# Usage: check_omp_clauses.sh SOURCE_DIR
source_dir=${1:-.}
found=$(grep -rn --include='*.c' --include='*.h' --include='*.cpp' \
  '#[[:space:]]*pragma[[:space:]]\{1,\}omp[[:space:]].*parallel.*simd.*[[:space:]]if[[:space:]]*([^:]*)' \
  "$source_dir/src" "$source_dir/bench" "$source_dir/examples" 2>/dev/null)
if [ -n "$found" ]; then
  echo "check_omp_clauses: an if clause on a parallel ... simd directive without 'parallel:' also turns off the simd loop:" >&2
  echo "$found" >&2
  exit 1
fi
echo "check_omp_clauses: no parallel ... simd directive carries an unqualified if clause"
