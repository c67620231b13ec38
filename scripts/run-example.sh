#!/usr/bin/env bash
# The README's main command: installs what is missing (as root), builds in Release and trains the MLP
# on Fashion-MNIST. Extra arguments go to the example (e.g. --epochs 1, --threads 1, --data DIR); the example
# uses every core unless told otherwise. It builds the whole tree (library, examples, tests) in build/, so
# the README's later commands (cmake --install build, ctest in build/) work in the same folder.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -eq 0 ]; then bash scripts/install-deps.sh; fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON > /dev/null
cmake --build build -j "$jobs"
exec build/mnist_mlp "$@"
