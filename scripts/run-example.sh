#!/usr/bin/env bash
# The README's main command: installs what is missing (as root), builds in Release and trains the MLP
# on Fashion-MNIST. Extra arguments go to the example (e.g. --epochs 1, --data DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -eq 0 ]; then bash scripts/install-deps.sh; fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=OFF > /dev/null
cmake --build build -j "$jobs" --target mnist_mlp
exec build/mnist_mlp --threads "$jobs" "$@"
