#!/usr/bin/env bash
# scripts/install-deps.sh's two sets (issue 29): --minimal (what scripts/run-example.sh installs) has what
# building, training and exporting need and none of the developers' tools; the full set holds all of it.
# As root, also runs run-example.sh with stand-ins for install-deps.sh and cmake to see that it asks for
# --minimal. Usage: check_install_deps.sh SOURCE_DIR WORK_DIR
set -euo pipefail
source_dir=$1 work=$2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
minimal=$(bash "$source_dir/scripts/install-deps.sh" --minimal --print)
full=$(bash "$source_dir/scripts/install-deps.sh" --print)
has() { grep -qx -- "$2" <<< "$1"; }
for package in build-essential cmake libopenblas-openmp-dev zlib1g-dev libcmocka-dev dataset-fashion-mnist \
  libprotobuf-c-dev python3-venv; do
  has "$minimal" "$package" || fail "--minimal lacks $package"
done
for package in clang valgrind openmpi-bin doxygen abigail-tools verilator; do
  has "$minimal" "$package" && fail "--minimal installs the developers' $package"
  has "$full" "$package" || fail "the full set lacks $package"
done
while read -r package; do
  has "$full" "$package" || fail "$package is in --minimal but not in the full set"
done <<< "$minimal"
# The Python docs send a newcomer to the same minimal set as the README and run-example.sh.
grep -q 'scripts/install-deps.sh --minimal' "$source_dir/docs/python.md" ||
  fail "docs/python.md does not name install-deps.sh --minimal, the set run-example.sh and the README use"
set +e
output=$(bash "$source_dir/scripts/install-deps.sh" --minimall 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "unknown argument '--minimall'" <<< "$output" || fail "a misspelt option: exit $rc, $output"
if [ "$(id -u)" -eq 0 ]; then
  rm -rf "$work" && mkdir -p "$work/repo/scripts" "$work/bin"
  cp "$source_dir/scripts/run-example.sh" "$work/repo/scripts/"
  printf '#!/bin/sh\necho "$@" > "%s/install-deps.args"\n' "$work" > "$work/repo/scripts/install-deps.sh"
  printf '#!/bin/sh\n[ "$1" = -S ] && mkdir -p build && printf "#!/bin/sh\\n" > build/mnist_mlp && chmod +x build/mnist_mlp\nexit 0\n' \
    > "$work/bin/cmake"
  chmod +x "$work/bin/cmake"
  (cd "$work/repo" && PATH="$work/bin:$PATH" bash scripts/run-example.sh > /dev/null 2>&1) || fail "run-example.sh failed"
  [ "$(cat "$work/install-deps.args" 2>/dev/null)" = --minimal ] ||
    fail "run-example.sh ran install-deps.sh with '$(cat "$work/install-deps.args" 2>/dev/null)', not --minimal"
  # apt-get's thousand lines stay in a log: one line before and one after, or its last lines when it fails.
  mkdir -p "$work/apt/bin"
  printf '#!/bin/sh\nexit 1\n' > "$work/apt/bin/dpkg-query"
  printf '#!/bin/sh\nseq 1000 | sed "s/^/apt line /"\n[ -z "$APT_FAILS" ] || { echo "E: Unable to locate package"; exit 100; }\n' \
    > "$work/apt/bin/apt-get"
  chmod +x "$work/apt/bin/dpkg-query" "$work/apt/bin/apt-get"
  set +e
  output=$(PATH="$work/apt/bin:$PATH" TMPDIR="$work/apt" bash "$source_dir/scripts/install-deps.sh" --minimal 2>&1)
  rc=$?
  set -e
  [ "$rc" -eq 0 ] && [ "$(wc -l <<< "$output")" -le 2 ] && ! grep -q "apt line" <<< "$output" ||
    fail "install-deps.sh showed apt-get's output: exit $rc, $(wc -l <<< "$output") lines"
  set +e
  output=$(PATH="$work/apt/bin:$PATH" TMPDIR="$work/apt" APT_FAILS=1 bash "$source_dir/scripts/install-deps.sh" 2>&1)
  rc=$?
  set -e
  [ "$rc" -ne 0 ] && grep -q "E: Unable to locate package" <<< "$output" && [ "$(wc -l <<< "$output")" -le 25 ] ||
    fail "a failing apt-get: exit $rc, without its last lines: $(tail -3 <<< "$output")"
else
  echo "note: not root, so run-example.sh's own call and apt-get's log are not run"
fi
[ "$failures" -eq 0 ] || { echo "$failures failures"; exit 1; }
echo "install-deps: minimal set of $(wc -l <<< "$minimal"), full set of $(wc -l <<< "$full") packages"
