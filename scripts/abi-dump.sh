#!/usr/bin/env bash
# Builds the ABI reference copy of libbptrain and writes its ABI description (libabigail's abidw) to OUTPUT.
# The reference copy is the same sources built with debug information and every optional dependency off,
# so the description never depends on the flags or dependencies of whatever build the caller has: the
# public ABI must not change with build options anyway. Only types declared under include/ are recorded.
# Usage: abi-dump.sh OUTPUT.abi [REFERENCE_BUILD_DIR]  (default build-abi-reference next to the sources;
#        BPT_ABI_JOBS=N build jobs, default 2)
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
output=$1
reference=${2:-$source_dir/build-abi-reference}
for tool in abidw cmake readelf; do
  command -v "$tool" > /dev/null || { echo "abi-dump: $tool not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
done

# The reference is configured as its own build (Debug, no tests, examples, MPI or CUDA): refuse a directory
# that holds another build, which that would silently turn into this one.
if [ -f "$reference/CMakeCache.txt" ] && [ ! -f "$reference/abi-configure.log" ]; then
  echo "abi-dump: $reference holds another build; give a directory of its own (default: build-abi-reference)," \
    "since the ABI reference is reconfigured as a Debug build without tests, examples, MPI or CUDA" >&2
  exit 2
fi
mkdir -p "$reference"
cmake -S "$source_dir" -B "$reference" -DCMAKE_BUILD_TYPE=Debug -DBPT_BUILD_TESTS=OFF -DBPT_BUILD_EXAMPLES=OFF \
  -DBPT_WITH_CUDA=OFF -DBPT_WITH_MPI=OFF -DBPT_WITH_NCCL=OFF -DBPT_SANITIZE=OFF > "$reference/abi-configure.log" 2>&1 ||
  { cat "$reference/abi-configure.log" >&2; exit 2; }
cmake --build "$reference" --target bptrain -j "${BPT_ABI_JOBS:-2}" > "$reference/abi-build.log" 2>&1 ||
  { tail -40 "$reference/abi-build.log" >&2; exit 2; }
library=$(find "$reference" -maxdepth 1 -name 'libbptrain.so.*' -type f | head -1)
[ -n "$library" ] || { echo "abi-dump: no libbptrain.so.* in $reference" >&2; exit 2; }
abidw --headers-dir "$source_dir/include" --drop-private-types --no-corpus-path --no-comp-dir-path \
  --type-id-style hash --out-file "$output.tmp" "$library"
# Source paths relative to the checkout, so the baseline reads the same from any machine.
sed "s|filepath='$source_dir/|filepath='|" "$output.tmp" > "$output"
rm -f "$output.tmp"
readelf -d "$library" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p'
