#!/usr/bin/env bash
# Prints the python3 of a virtual environment with ONNX Runtime and the onnx checker from PyPI, for the ONNX
# export check (tests/onnx/check_onnx_runtime.py, which CTest runs with $BPT_ONNX_PYTHON). Creates it on first
# use in .venv-onnx at the repository root, or in $BPT_ONNX_VENV (about 100 MB, a minute once).
# Progress goes to stderr; stdout is only the interpreter's path: export BPT_ONNX_PYTHON=$(bash scripts/onnx_env.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${BPT_ONNX_VENV:-$root/.venv-onnx}
if ! "$venv/bin/python" -c "import onnxruntime, onnx, numpy" 2> /dev/null; then
  if ! /usr/bin/python3 -c "import venv, ensurepip" 2> /dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
    else
      echo "onnx_env: python3-venv is missing (apt-get install python3-venv as root)" >&2
      exit 1
    fi
  fi
  echo "onnx_env: creating $venv with onnxruntime and onnx from PyPI (once)" >&2
  /usr/bin/python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --progress-bar off onnxruntime onnx numpy >&2
fi
echo "$venv/bin/python"
