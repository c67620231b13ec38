#!/usr/bin/env bash
# Prints the python3 of a virtual environment with ONNX Runtime and the onnx checker from PyPI, for the ONNX
# export check (tests/onnx/check_onnx_runtime.py, which CTest runs with $BPT_ONNX_PYTHON). Creates it on first
# use in .venv-onnx at the repository root, or in $BPT_ONNX_VENV (about 100 MB, a minute once).
# Progress goes to stderr; stdout is only the interpreter's path: export BPT_ONNX_PYTHON=$(bash scripts/onnx_env.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${BPT_ONNX_VENV:-$root/.venv-onnx}
source "$root/scripts/python_venv.sh"
bpt_python_venv onnx_env "$venv" "onnxruntime, onnx, numpy" "onnxruntime and onnx" onnxruntime onnx numpy
echo "$venv/bin/python"
