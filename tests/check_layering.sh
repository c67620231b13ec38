#!/bin/sh
# The rooms of the house (docs/ARCHITECTURE.md): src/comm/ sums buffers and src/backends/ runs kernels, and
# neither may see core's private headers; the shared reporting helpers live in src/base/. Fails, listing the
# offending lines, when a file there includes "core/...". The one exception is the op list, core/ops.def, which
# backend.h expands into the op ids that kernels are registered under: it is part of the backend interface.
source_dir=${1:-${BPT_SOURCE_DIR:-.}}
found=$(grep -rn '#[[:space:]]*include[[:space:]]*"core/' "$source_dir/src/comm" "$source_dir/src/backends" 2>/dev/null |
  grep -v '^[^:]*/src/backends/backend\.h:[0-9]*:#include "core/ops\.def"$')
if [ -n "$found" ]; then
  echo "check_layering: src/comm/ and src/backends/ must not include src/core/ headers:" >&2
  echo "$found" >&2
  exit 1
fi
echo "check_layering: no src/core/ header included from src/comm/ or src/backends/"
