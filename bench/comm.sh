#!/usr/bin/env bash
# Comm layer benchmark: our all-reduce against MPI_Allreduce on the same buffers, and data-parallel step
# time with and without overlap, on 2 ranks over shared memory. Extra arguments go to comm_bench (bench/mpi/comm.c)
# (--rounds N, --steps N, --batch N, --threads N, --rotate 0 for the fixed candidate order). Results are recorded in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BPT_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON > /dev/null
cmake --build "$build" -j 2 --target comm_bench > /dev/null
# Benchmarks run OpenBLAS with its own kernel choice (see docs/benchmarks.md).
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 \
  mpiexec --allow-run-as-root --oversubscribe --mca btl self,vader \
  -n 2 "$build/tests/mpi/comm_bench" "$@"
