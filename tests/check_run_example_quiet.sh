#!/usr/bin/env bash
# scripts/run-example.sh's build output (issue 29): nothing when there is nothing to build, one progress line
# when it builds (never CMake's "Built target" lines), the first error and the log's path when the build
# fails, and then no training. A stand-in cmake (on PATH) plays the three builds; a stand-in build/mnist_mlp
# prints "training". Usage: check_run_example_quiet.sh SOURCE_DIR WORK_DIR
set -euo pipefail
source_dir=$1 work=$2
rm -rf "$work" && mkdir -p "$work/repo/scripts" "$work/bin"
cp "$source_dir/scripts/run-example.sh" "$work/repo/scripts/"
cat > "$work/bin/cmake" <<'STUB'
#!/usr/bin/env bash
if [ "$1" = -S ]; then mkdir -p build && printf '#!/bin/sh\necho training\n' > build/mnist_mlp && chmod +x build/mnist_mlp; exit 0; fi
case $FAKE_BUILD in
  nothing) for i in $(seq 85); do echo "[100%] Built target t$i"; done ;;
  builds) echo "[ 10%] Building C object a.o"; echo "[ 50%] Linking C shared library libbptrain.so"
          echo "[100%] Built target bptrain" ;;
  fails) echo "[ 10%] Building C object a.o"; echo "src/a.c:1:1: error: boom"; echo "gmake: *** [all] Error 2"; exit 2 ;;
esac
STUB
chmod +x "$work/bin/cmake"
failures=0
run() { # run MODE: the script's output (stdout and stderr) and exit status
  set +e
  output=$(cd "$work" && PATH="$work/bin:$PATH" FAKE_BUILD=$1 BPT_RUN_EXAMPLE_SKIP_DEPS=1 bash repo/scripts/run-example.sh 2>&1)
  rc=$?
  set -e
}
fail() { echo "FAIL: $*"; printf '%s\n' "$output" | head -n 5 | sed 's/^/  | /'; failures=$((failures + 1)); }
run nothing
[ "$rc" -eq 0 ] && [ "$output" = training ] && echo "ok: nothing to build prints nothing" || fail "nothing to build"
run builds
[ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$output" | grep -c 'building in build/')" -eq 1 ] &&
  ! grep -q 'Built target\|Building C' <<< "$output" && [ "$(tail -n 1 <<< "$output")" = training ] &&
  echo "ok: a build is one progress line" || fail "a build"
run fails
[ "$rc" -ne 0 ] && grep -q 'error: boom' <<< "$output" && grep -q 'run-example-build.log' <<< "$output" &&
  ! grep -q training <<< "$output" && echo "ok: a failed build shows its first error" || fail "a failed build"
[ "$failures" -eq 0 ] || exit 1
