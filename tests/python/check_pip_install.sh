#!/usr/bin/env bash
# The newcomer's path of docs/python.md, as written: a copy of the checkout (its tracked and untracked,
# non-ignored files: what a fresh clone holds, plus uncommitted work), the "## Install" command run there
# unchanged (a new venv, pip install ., which builds libbptrain with CMake and ships it), then the
# "## Quick start" program run with that venv's python, with no BPTRAIN_LIBRARY, PYTHONPATH or
# LD_LIBRARY_PATH. Checks that the library loaded is the one inside the installed package and that the
# program printed a test accuracy. Skips (77) when PyPI cannot be reached or there is no Fashion-MNIST.
# Usage: check_pip_install.sh SOURCE_DIR WORK_DIR
set -euo pipefail
source_dir=$1 work=$2
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte" ] || [ -f "$data/train-images-idx3-ubyte.gz" ] ||
  { echo "SKIP: no Fashion-MNIST in $data (scripts/install-deps.sh installs dataset-fashion-mnist)"; exit 77; }
/usr/bin/python3 - <<'PY' || { echo "SKIP: PyPI (pypi.org) is unreachable: pip cannot fetch scikit-build-core"; exit 77; }
import urllib.request
urllib.request.urlopen("https://pypi.org/simple/scikit-build-core/", timeout=20).read(1)
PY

section() {  # the first ```$2 block under the level-2 heading $1 of docs/python.md
  awk -v heading="## $1" -v fence="\`\`\`$2" '
    $0 == heading { section = 1; next }
    section && /^## / { exit }
    section && !inside && $0 == fence { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }' "$source_dir/docs/python.md"
}
rm -rf "$work" && mkdir -p "$work/clone"
(cd "$source_dir" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - --no-recursion) |
  tar -xf - -C "$work/clone"
section "Install" sh > "$work/install.sh"
section "Quick start" python > "$work/clone/quickstart.py"
grep -q 'pip install' "$work/install.sh" || { echo "FAIL: no pip install in docs/python.md's Install block"; exit 1; }
grep -q 'import bptrain' "$work/clone/quickstart.py" || { echo "FAIL: no Quick start program in docs/python.md"; exit 1; }
echo "install, as docs/python.md writes it:"; sed 's/^/  /' "$work/install.sh"

cd "$work/clone"
clean=(env -u BPTRAIN_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH -u PYTHONHOME PATH=/usr/bin:/bin)
start=$(date +%s)
"${clean[@]}" bash -e "$work/install.sh" > "$work/install.log" 2>&1 || { tail -n 40 "$work/install.log"; echo "FAIL: the install command failed"; exit 1; }
echo "the install took $(( $(date +%s) - start )) s"
loaded=$(cd "$work" && "${clean[@]}" "$work/clone/venv/bin/python" -c "import bptrain; print(bptrain.library_path())")
case "$loaded" in
  "$work/clone/venv/lib/"*/site-packages/bptrain/libbptrain.so.0) echo "loaded $loaded" ;;
  *) echo "FAIL: bptrain loaded $loaded, not the library inside the installed package"; exit 1 ;;
esac
# Without a library anywhere it looks (the package's Python files alone), the import error is short: one
# line saying what failed, then one tried path a line, none of another machine's lib/<triplet>.
mkdir -p "$work/nolib/bptrain" && cp "$work/clone/venv/lib/"*/site-packages/bptrain/*.py "$work/nolib/bptrain/"
if (cd "$work" && "${clean[@]}" PYTHONPATH="$work/nolib" "$work/clone/venv/bin/python" -c "import bptrain") \
    > "$work/noimport.out" 2>&1; then
  echo "FAIL: bptrain imported with no library beside it"; exit 1
fi
sed -n '/FileError/,$p' "$work/noimport.out" > "$work/noimport.msg"
cat "$work/noimport.msg"
multiarch=$(/usr/bin/python3 -c "import sys; print(sys.implementation._multiarch)")
if awk 'length($0) > 200 { bad = 1 } END { exit !bad }' "$work/noimport.msg" ||
   grep -o 'lib/[a-z0-9_]*-linux-gnu' "$work/noimport.msg" | grep -vqx "lib/$multiarch" ||
   [ "$(grep -c '^  /\|^  libbptrain' "$work/noimport.msg")" -lt 2 ]; then
  echo "FAIL: the import error is not one short line per tried path for this machine"; exit 1
fi
"${clean[@]}" OMP_WAIT_POLICY=passive venv/bin/python quickstart.py | tee "$work/quickstart.out"
grep -Eq '^test accuracy [0-9]+\.[0-9]+%$' "$work/quickstart.out" || { echo "FAIL: the quick start printed no test accuracy"; exit 1; }
# The package folder's own pyproject.toml (`pip install ./python`) must build the same working package.
"${clean[@]}" /usr/bin/python3 -m venv "$work/venv-folder"
"${clean[@]}" "$work/venv-folder/bin/pip" install --quiet ./python > "$work/install-folder.log" 2>&1 ||
  { tail -n 40 "$work/install-folder.log"; echo "FAIL: pip install ./python failed"; exit 1; }
loaded=$(cd "$work" && "${clean[@]}" "$work/venv-folder/bin/python" -c "import bptrain; print(bptrain.library_path())")
case "$loaded" in
  "$work/venv-folder/lib/"*/site-packages/bptrain/libbptrain.so.0) echo "pip install ./python: loaded $loaded" ;;
  *) echo "FAIL: after pip install ./python, bptrain loaded $loaded"; exit 1 ;;
esac
echo "PASS: the Install and Quick start of docs/python.md run as written"
