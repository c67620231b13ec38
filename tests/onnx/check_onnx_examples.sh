#!/usr/bin/env bash
# The examples' --onnx FILE: mnist_mlp, mnist_cnn and resnet train briefly on a slice of Fashion-MNIST and
# export; ONNX Runtime, fed the raw test images as pixels in [0, 1], must reach the test accuracy the example
# printed (within one test image: a near-tie may round the other way). Skips (77) without Fashion-MNIST or
# without onnxruntime for $BPT_ONNX_PYTHON (default python3).
# Usage: check_onnx_examples.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
python=${BPT_ONNX_PYTHON:-python3}
rm -rf "$work" && mkdir -p "$work"
if ! "$python" -c "import onnxruntime, numpy" 2> /dev/null; then
  echo "skipped: onnxruntime is not installed for $python (bash scripts/onnx_env.sh makes an environment with it)"
  exit 77
fi
bash "$here/../../scripts/make-data-slice.sh" "$work/data" 512 || exit 77
for example in mnist_mlp mnist_cnn resnet; do
  "$build/$example" --data "$work/data" --epochs 1 --threads 2 --onnx "$work/$example.onnx" 2> /dev/null |
    tee "$work/$example.txt"
  ours=$(sed -n 's/^final test accuracy: \([0-9.]*\)%.*/\1/p' "$work/$example.txt")
  theirs=$("$python" "$here/onnx_accuracy.py" "$work/$example.onnx" "$work/data")
  echo "$example: libbptrain $ours%, ONNX Runtime $theirs% on the raw test images"
  awk -v a="$ours" -v b="$theirs" 'BEGIN { d = a - b; exit !(a != "" && (d < 0 ? -d : d) <= 0.4) }' ||
    { echo "FAIL: $example: ONNX Runtime's accuracy $theirs% differs from libbptrain's $ours%"; exit 1; }
done
