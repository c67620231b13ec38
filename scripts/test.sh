#!/usr/bin/env bash
# Builds libbptrain and runs every test (the README's test command; CI runs it through .ci/run).
# Installs missing Debian packages first when run as root. Build folder: $BPT_BUILD_DIR, default build-test.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -eq 0 ]; then bash scripts/install-deps.sh; fi

# Tests run two at a time on shared cores: OpenMP threads that spin while waiting would starve each other.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
build=${BPT_BUILD_DIR:-build-test}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=ON
cmake --build "$build" -j "$jobs"
(cd "$build" && ctest --output-on-failure -j "$jobs")
