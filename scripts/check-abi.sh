#!/usr/bin/env bash
# Compares the ABI of the current sources with the baseline kept in abi/ (see docs/abi.md).
# Passes when nothing changed or functions were only added; fails on any other change (removed or changed
# functions, changed public types) until SOVERSION and the baseline are bumped on purpose.
# The loadable modules (libbptrain-<name>.so.<ABI>) have one public face, their entry symbol: when
# MODULES_DIR is given, each module there must export exactly the symbols listed in abi/modules.symbols.
# Usage: check-abi.sh [REFERENCE_BUILD_DIR [MODULES_DIR]]
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
reference=${1:-$source_dir/build-abi-reference}
modules_dir=${2:-}
mkdir -p "$reference"
current=$reference/current.abi
soname=$("$source_dir/scripts/abi-dump.sh" "$current" "$reference")
header_major=$(sed -n 's/^#define BPT_ABI_VERSION \([0-9]*\).*/\1/p' "$source_dir/include/bptrain/common.h")
if [ "$soname" != "libbptrain.so.$header_major" ]; then
  echo "check-abi: SONAME is $soname but include/bptrain/common.h says BPT_ABI_VERSION $header_major;" \
    "bump both together" >&2
  exit 1
fi
baseline=$source_dir/abi/$soname.abi
if [ ! -f "$baseline" ]; then
  echo "check-abi: no baseline $baseline for $soname. After bumping the ABI version on purpose, run" \
    "scripts/update-abi-baseline.sh and commit the new baseline." >&2
  exit 1
fi

if [ -n "$modules_dir" ]; then
  checked=0
  for module in "$modules_dir"/libbptrain-*.so."$header_major"; do
    [ -f "$module" ] || continue
    exported=$(nm -D --defined-only "$module" | awk '{print $3}' | grep -vE '^(_init|_fini|_edata|_end|__bss_start)$' | sort)
    if [ "$exported" != "$(sort "$source_dir/abi/modules.symbols")" ]; then
      echo "check-abi: FAILED: $(basename "$module") exports [$(echo "$exported" | tr '\n' ' ')]," \
        "abi/modules.symbols lists [$(tr '\n' ' ' < "$source_dir/abi/modules.symbols")]" >&2
      exit 1
    fi
    checked=$((checked + 1))
  done
  echo "check-abi: $checked module(s) in $modules_dir export exactly abi/modules.symbols"
fi
echo "check-abi: comparing $soname with abi/$(basename "$baseline")"
status=0
abidiff --suppressions "$source_dir/abi/suppressions.ini" "$baseline" "$current" > "$reference/abidiff.txt" || status=$?
cat "$reference/abidiff.txt"
# abidiff's exit status is a bit set: 1 error, 2 usage error, 4 ABI change, 8 incompatible change. Added
# functions set bit 4, so judge again with additions hidden: any bit left means a change old callers notice.
status_without_additions=0
abidiff --no-added-syms --suppressions "$source_dir/abi/suppressions.ini" "$baseline" "$current" > /dev/null || status_without_additions=$?
if [ $((status_without_additions & 3)) -ne 0 ]; then
  echo "check-abi: abidiff failed (status $status_without_additions)" >&2
  exit 1
fi
if [ "$status_without_additions" -ne 0 ]; then
  echo >&2
  echo "check-abi: FAILED: the change above breaks programs built against $soname." >&2
  echo "  Either keep the old interface (add a new function or an options field read through its size)," >&2
  echo "  or bump BPT_ABI_VERSION in CMakeLists.txt and include/bptrain/common.h, then run" >&2
  echo "  scripts/update-abi-baseline.sh and commit abi/ (see docs/abi.md)." >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "check-abi: OK, compatible additions only (run scripts/update-abi-baseline.sh to record them)"
else
  echo "check-abi: OK, no ABI change"
fi
