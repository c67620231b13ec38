#!/bin/sh
# The rooms of the house (docs/ARCHITECTURE.md, "Layering"), checked twice:
#  1. #include lines: src/comm/ and src/backends/ include no src/core/ header (the one exception is the op
#     list, core/ops.def, which backend.h expands into the op ids kernels are registered under), and src/base/
#     includes only src/base/ and public headers.
#  2. Symbols: each object file of the library and of its modules (the list CMake writes, one path a line)
#     uses, by `nm`, only symbols that its room may use; a symbol belongs to the room whose object defines it.
#     This catches what #include lines cannot: a call through a local prototype, or a header of base/ whose
#     body is core's. module_services.c stands in for base/ and comm/ helpers inside a module (through the
#     table the core hands over), so its definitions give no symbol a room.
# Usage: check_layering.sh SOURCE_DIR [OBJECT_LIST [NM]]. Without OBJECT_LIST only the #include check runs.
source_dir=${1:-${BPT_SOURCE_DIR:-.}}
object_list=$2
nm_tool=${3:-nm}
status=0

found=$(grep -rn '#[[:space:]]*include[[:space:]]*"core/' "$source_dir/src/comm" "$source_dir/src/backends" 2>/dev/null |
  grep -v '^[^:]*/src/backends/backend\.h:[0-9]*:#include "core/ops\.def"$')
if [ -n "$found" ]; then
  echo "check_layering: src/comm/ and src/backends/ must not include src/core/ headers:" >&2
  echo "$found" >&2
  status=1
fi
found=$(grep -rn '#[[:space:]]*include[[:space:]]*"' "$source_dir/src/base" 2>/dev/null |
  grep -v '#[[:space:]]*include[[:space:]]*"\(base\|bptrain\)/')
if [ -n "$found" ]; then
  echo "check_layering: src/base/ may include only src/base/ and public (bptrain/) headers:" >&2
  echo "$found" >&2
  status=1
fi
[ $status -eq 0 ] && echo "check_layering: includes: no src/core/ header in src/comm/ or src/backends/; src/base/ self-contained"

if [ -z "$object_list" ]; then
  echo "check_layering: no object list given, symbols not checked"
  exit $status
fi
if [ ! -s "$object_list" ]; then
  echo "check_layering: object list '$object_list' is missing or empty (build the library first)" >&2
  exit 1
fi

while IFS= read -r object; do
  if [ -n "$object" ] && [ ! -f "$object" ]; then
    echo "check_layering: $object is not built (build the library and its modules first)" >&2
    exit 1
  fi
done < "$object_list"
# One line per external symbol of each object, "OBJECT: SYMBOL TYPE ..." (U: used, w/v: weak reference,
# anything else: defined).
symbols=$(mktemp) || exit 1
trap 'rm -f "$symbols"' EXIT
if ! grep -v '^$' "$object_list" | tr '\n' '\0' | xargs -0 "$nm_tool" -A -P -g > "$symbols"; then
  echo "check_layering: $nm_tool failed on the objects of $object_list" >&2
  exit 1
fi

# An object's source is its path under CMakeFiles/<target>.dir/ without ".o"; generated files get the room
# of what they were generated for. Which rooms each room may use besides its own and base: the backend
# folders (backends/cpu, backends/fpga, backends/cuda) the shared backend code of src/backends/*.c, never
# core, comm or one another; comm the module loader; core the backend interface (registry, capability
# query) and comm, never a backend's folder; export (ONNX) core; the module glue anything.
awk '
  function room_of(source) {
    if (source ~ /^src\/(base|core|comm|export|modules)\//) { split(source, part, "/"); return part[2] }
    if (source ~ /^src\/backends\/[^\/]+\//) { split(source, part, "/"); return "backends/" part[3] }
    if (source ~ /^src\/backends\//) return "backends"
    if (source ~ /^generated\/onnx\//) return "export"
    if (source ~ /^generated\/[^\/]+_kernel_table\.c$/) { sub(/^generated\//, "", source); sub(/_kernel_table\.c$/, "", source); return "backends/" source }
    return ""
  }
  function allowed(user, home) {
    if (user == home || home == "base") return 1
    if (user == "core") return home == "backends" || home == "comm"
    if (user == "backends") return home ~ /^backends\// || home == "modules"
    if (user ~ /^backends\//) return home == "backends"
    if (user == "comm") return home == "modules"
    if (user == "export") return home == "core"
    if (user == "modules") return 1
    return 0
  }
  {
    object = $1; sub(/:$/, "", object)
    source = object; sub(/.*\/CMakeFiles\/[^\/]*\.dir\//, "", source); sub(/\.o$/, "", source)
    room = room_of(source)
    if (room == "") {
      printf "check_layering: cannot tell the room of %s (source %s); extend check_layering.sh\n", object, source
      bad = 1; next
    }
    if ($3 == "U") { user[++n] = room; user_source[n] = source; used[n] = $2; next }
    if ($3 == "w" || $3 == "v" || source == "src/modules/module_services.c") next
    if (($2 in home) && home[$2] != room) {
      printf "check_layering: %s is defined in two rooms: %s (%s) and %s (%s)\n", $2, where[$2], home[$2], source, room
      bad = 1
    }
    home[$2] = room; where[$2] = source
  }
  END {
    checked = 0
    for (i = 1; i <= n; i++) {
      if (!(used[i] in home)) continue
      checked++
      if (!allowed(user[i], home[used[i]])) {
        printf "check_layering: %s (%s) uses %s, defined in %s (%s)\n", user_source[i], user[i], used[i],
               where[used[i]], home[used[i]]
        bad = 1
      }
    }
    if (bad) exit 1
    printf "check_layering: symbols: %d uses of library symbols, each allowed by its room\n", checked
  }' "$symbols" || {
  echo "check_layering: an object uses a symbol its room may not (the rule is in docs/ARCHITECTURE.md)" >&2
  exit 1
}
exit $status
