#!/bin/sh
# Speculative backprop benchmark (issue 6): thresholds 0, 0.10, 0.175, 0.25 on the CPU (wall time, two trainer
# threads) and on fpga-sim (simulated cycles), one table. Threshold 0 is ordinary backprop, the reference.
# Usage: bench/speculative_mnist.sh [BUILD_DIR] [extra speculative_mnist options]
# OpenBLAS tuning variables are unset for this command only, as docs/benchmarks.md asks of benchmarks.
set -e
build=${1:-build}
[ $# -gt 0 ] && shift
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$build/speculative_mnist" --repeats 3 "$@"
