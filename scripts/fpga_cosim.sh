#!/usr/bin/env bash
# The full C/RTL co-simulation grid of the fpga-sim GEMM engine (the ctest fpga_cosim runs only small shapes):
# every product of the MLP example (784-512-256-10, batch 128) and of the speculative example (784-128-64-10,
# one sample per product), bit-exact against the C kernel, with the cycle model's error against the RTL.
#   BPT_BUILD_DIR=build bash scripts/fpga_cosim.sh
# Shapes are m,n,k,beta,transpose_a,transpose_b as linear.c calls them: forward X W^T (beta 0), weight
# gradient dY^T X (beta 1), input gradient dY W (beta 1).
set -euo pipefail
build="${BPT_BUILD_DIR:-build}"
binary="$build/tests/fpga_cosim/fpga_cosim"
[ -x "$binary" ] || { echo "fpga_cosim.sh: $binary not built (needs Verilator; cmake --build $build --target fpga_cosim)" >&2; exit 1; }
mlp=(128,512,784,0,0,1 512,784,128,1,1,0
     128,256,512,0,0,1 256,512,128,1,1,0 128,512,256,1,0,0
     128,10,256,0,0,1 10,256,128,1,1,0 128,256,10,1,0,0)
speculative=(1,128,784,0,0,1 128,784,1,1,1,0
             1,64,128,0,0,1 64,128,1,1,1,0 1,128,64,1,0,0
             1,10,64,0,0,1 10,64,1,1,1,0 1,64,10,1,0,0)
echo "MLP 784-512-256-10, batch 128"
BPTRAIN_MODULE_PATH="$build" "$binary" --max-error 5 "${mlp[@]}"
echo "speculative 784-128-64-10, one sample"
BPTRAIN_MODULE_PATH="$build" "$binary" --max-error 5 "${speculative[@]}"
