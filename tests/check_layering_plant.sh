#!/bin/sh
# check_layering must be able to fail: plants an object that the #include check cannot see through (a CPU
# backend file calling core's bpt_version through its public header, and one of base/ calling core's
# bpt_status_string) next to the real objects, and expects check_layering.sh to fail naming both uses.
# Usage: check_layering_plant.sh SOURCE_DIR OBJECT_LIST NM CC WORK_DIR
source_dir=$1 object_list=$2 nm_tool=$3 cc=$4 work=$5
rm -rf "$work" && mkdir -p "$work/CMakeFiles/plant.dir/src/backends/cpu" "$work/CMakeFiles/plant.dir/src/base" || exit 1
printf '#include "bptrain/common.h"\nconst char *bpt_cpu_planted(void);\nconst char *bpt_cpu_planted(void) { return bpt_version(); }\n' \
  > "$work/backend.c"
printf '#include "bptrain/common.h"\nconst char *bpt_base_planted(void);\nconst char *bpt_base_planted(void) { return bpt_status_string(BPT_OK); }\n' \
  > "$work/base.c"
"$cc" -I"$source_dir/include" -c "$work/backend.c" -o "$work/CMakeFiles/plant.dir/src/backends/cpu/planted.c.o" &&
  "$cc" -I"$source_dir/include" -c "$work/base.c" -o "$work/CMakeFiles/plant.dir/src/base/planted.c.o" || exit 1
{ cat "$object_list"; ls "$work"/CMakeFiles/plant.dir/src/backends/cpu/planted.c.o "$work"/CMakeFiles/plant.dir/src/base/planted.c.o; } \
  > "$work/objects.txt"
if sh "$source_dir/tests/check_layering.sh" "$source_dir" "$work/objects.txt" "$nm_tool" > "$work/out.txt" 2>&1; then
  cat "$work/out.txt"
  echo "check_layering_plant: check_layering.sh passed with planted violations" >&2
  exit 1
fi
cat "$work/out.txt"
for use in "src/backends/cpu/planted.c (backends/cpu) uses bpt_version, defined in src/core/common.c (core)" \
  "src/base/planted.c (base) uses bpt_status_string, defined in src/core/common.c (core)"; do
  if ! grep -qF "$use" "$work/out.txt"; then
    echo "check_layering_plant: check_layering.sh failed without naming: $use" >&2
    exit 1
  fi
done
echo "check_layering_plant: both planted uses were named"
