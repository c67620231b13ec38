#!/bin/sh
# Fails when the shared library exports a symbol without the bpt_ prefix (ABI hygiene).
library="$1"
bad=$(nm -D --defined-only "$library" | awk '{print $3}' | grep -v '^bpt_' | grep -vE '^(_init|_fini|_edata|_end|__bss_start)$')
if [ -n "$bad" ]; then
  echo "symbols without the bpt_ prefix exported from $library:"
  echo "$bad"
  exit 1
fi
count=$(nm -D --defined-only "$library" | grep -c ' bpt_')
echo "$library exports $count symbols, all bpt_*"
[ "$count" -gt 0 ]
