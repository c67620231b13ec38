#!/usr/bin/env bash
# Records the ABI of the current sources as the baseline abi/libbptrain.so.<ABI major>.abi (see docs/abi.md).
# Refuses to overwrite a baseline of the same ABI major with an incompatible ABI unless --accept-incompatible
# is given (only for an ABI major that was never released); the usual way is to bump BPT_ABI_VERSION first.
# Usage: update-abi-baseline.sh [--accept-incompatible] [REFERENCE_BUILD_DIR]
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
accept_incompatible=0
if [ "${1:-}" = "--accept-incompatible" ]; then
  accept_incompatible=1
  shift
fi
reference=${1:-$source_dir/build-abi-reference}
mkdir -p "$reference" "$source_dir/abi"
current=$reference/current.abi
soname=$("$source_dir/scripts/abi-dump.sh" "$current" "$reference")
baseline=$source_dir/abi/$soname.abi
if [ -f "$baseline" ]; then
  status=0
  abidiff --no-added-syms --suppressions "$source_dir/abi/suppressions.ini" "$baseline" "$current" || status=$?
  if [ "$status" -ne 0 ] && [ "$accept_incompatible" -eq 0 ]; then
    echo "update-abi-baseline: the ABI changed incompatibly (abidiff status $status) but the SONAME is still" \
      "$soname. Bump BPT_ABI_VERSION in CMakeLists.txt and include/bptrain/common.h, or pass" \
      "--accept-incompatible if $soname was never released." >&2
    exit 1
  fi
fi
cp "$current" "$baseline"
echo "update-abi-baseline: wrote abi/$soname.abi ($(grep -c '<elf-symbol name=' "$baseline") symbols); commit it"
