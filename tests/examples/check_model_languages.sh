#!/usr/bin/env bash
# The README's promise for one model file: a model trained and saved once (by the C example) is evaluated to
# the same test accuracy from C, C++ and Python; a model saved from Python is evaluated by the C example to the
# accuracy Python reports; and the same model exported to ONNX gives that accuracy in ONNX Runtime on the raw
# test images (that part skipped, with a message, when $BPT_ONNX_PYTHON has no onnxruntime). Trains on a
# slice of Fashion-MNIST so it stays quick. Skips (77) without the data set or without NumPy for Python.
# Usage: check_model_languages.sh WORK_DIR MNIST_MLP MNIST_MLP_CPP PYTHON
set -euo pipefail
work=$1 c=$2 cpp=$3 python=$4
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
bash "$here/../../scripts/make-data-slice.sh" "$work/data" 1024 || exit 77
"$python" -c "import numpy" 2> /dev/null || { echo "skipped: no NumPy for $python"; exit 77; }
accuracy() { grep -F "$1: test accuracy" "$2" | sed -n 's/.*: test accuracy \([0-9.]*\)%.*/\1/p'; }

"$c" --data "$work/data" --epochs 1 --threads 2 --save "$work/c.ckpt" --onnx "$work/c.onnx" > "$work/train.txt"
trained=$(sed -n 's/^final test accuracy: \([0-9.]*\)%.*/\1/p' "$work/train.txt")
[ -n "$trained" ] || { cat "$work/train.txt"; fail "mnist_mlp printed no final test accuracy"; }
"$c" --data "$work/data" --threads 2 --eval "$work/c.ckpt" > "$work/eval-c.txt"
"$cpp" --data "$work/data" --threads 2 --eval "$work/c.ckpt" > "$work/eval-cpp.txt"
"$python" "$here/../../examples/python/mnist_mlp.py" --data "$work/data" --threads 2 --eval "$work/c.ckpt" \
  > "$work/eval-python.txt"
for language in c cpp python; do
  evaluated=$(accuracy "$work/c.ckpt" "$work/eval-$language.txt")
  echo "saved from C (trained to $trained%), evaluated from $language: $evaluated%"
  [ "$evaluated" = "$trained" ] || { cat "$work/eval-$language.txt"; fail "$language --eval: $evaluated%, not $trained%"; }
done

"$python" "$here/../../examples/python/mnist_mlp.py" --data "$work/data" --epochs 1 --threads 2 --save "$work/py.ckpt" \
  > "$work/train-python.txt"
python_trained=$(sed -n 's/.*final test accuracy: \([0-9.]*\)%.*/\1/p' "$work/train-python.txt")
"$c" --data "$work/data" --threads 2 --eval "$work/py.ckpt" > "$work/eval-c-of-python.txt"
evaluated=$(accuracy "$work/py.ckpt" "$work/eval-c-of-python.txt")
echo "saved from Python (trained to $python_trained%), evaluated from C: $evaluated%"
[ -n "$python_trained" ] && [ "$evaluated" = "$python_trained" ] || fail "C --eval of Python's checkpoint: $evaluated%, not $python_trained%"

onnx_python=${BPT_ONNX_PYTHON:-python3}
if "$onnx_python" -c "import onnxruntime, numpy" 2> /dev/null; then
  theirs=$("$onnx_python" "$here/../onnx/onnx_accuracy.py" "$work/c.onnx" "$work/data")
  echo "exported to ONNX, run in ONNX Runtime on the raw test images: $theirs%"
  awk -v a="$trained" -v b="$theirs" 'BEGIN { d = a - b; exit !((d < 0 ? -d : d) <= 0.2) }' ||
    fail "ONNX Runtime's accuracy $theirs% differs from libbptrain's $trained%"
else
  echo "ONNX Runtime part skipped: no onnxruntime for $onnx_python (bash scripts/onnx_env.sh makes an environment with it)"
fi
