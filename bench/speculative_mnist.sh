#!/bin/sh
# Speculative backprop benchmark (issue 6): thresholds 0, 0.10, 0.175, 0.25 on the CPU (wall time, two trainer
# threads) and on fpga-sim (simulated cycles), one table. Threshold 0 is ordinary backprop, the reference.
# --model lenet runs LeNet-5 instead of the MLP (issue 28), on the CPU and on fpga-sim, which runs its
# convolutions and pooling itself.
# Usage: bench/speculative_mnist.sh [BUILD_DIR] [extra speculative_mnist options]
# OpenBLAS tuning variables are unset for this command only, as docs/benchmarks.md asks of benchmarks.
set -e
build=${1:-build}
[ $# -gt 0 ] && shift
# --repeats 3 unless the extra options choose (the example refuses an option given twice).
case " $* " in *" --repeats "*) repeats= ;; *) repeats="--repeats 3" ;; esac
# shellcheck disable=SC2086 # $repeats is empty or two words
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$build/speculative_mnist" $repeats "$@"
