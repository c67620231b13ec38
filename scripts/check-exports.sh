#!/usr/bin/env bash
# Fails when the shared library exports a symbol without the bpt_ prefix (a leaked internal helper or a
# statically linked dependency), or exports no bpt_ symbols at all. Usage: check-exports.sh LIBRARY
set -euo pipefail
library=$1
symbols=$(nm -D --defined-only "$library" | awk 'NF == 3 {print $3}')
# The linker may define these section markers in any shared object; they are not part of our interface.
unexpected=$(printf '%s\n' "$symbols" | grep -v -E '^(bpt_[a-z0-9_]+|_init|_fini|_edata|_end|__bss_start)$' || true)
count=$(printf '%s\n' "$symbols" | grep -c '^bpt_' || true)
if [ -n "$unexpected" ]; then
  echo "check-exports: $library exports symbols outside the bpt_ namespace:" >&2
  printf '  %s\n' $unexpected >&2
  echo "Give internal functions hidden visibility (no BPT_API) or a static definition." >&2
  exit 1
fi
if [ "$count" -eq 0 ]; then
  echo "check-exports: $library exports no bpt_ symbols at all" >&2
  exit 1
fi
echo "check-exports: $count symbols, all bpt_*"
