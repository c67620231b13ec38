#!/usr/bin/env bash
# Prints the python3 of the competitor PyTorch for bench/mlp.sh and bench/cnn.sh.
#   torch_env.sh pypi     the current PyTorch 2.x from PyPI, in a virtual environment this script creates on
#                         first use (bench/.venv-torch, or $BPT_TORCH_VENV; a few GB, several minutes once)
#   torch_env.sh debian   Debian's PyTorch 1.13 (/usr/bin/python3, python3-torch installed when root)
# Progress goes to stderr; stdout is only the interpreter's path, so callers can do py=$(torch_env.sh pypi).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
which=${1:-pypi}
case "$which" in
  debian)
    if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
      if [ "$(id -u)" -eq 0 ]; then
        echo "torch_env: installing Debian's python3-torch" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >&2
      else
        echo "torch_env: Debian's PyTorch is missing (apt-get install python3-torch as root)" >&2
        exit 1
      fi
    fi
    echo /usr/bin/python3
    ;;
  pypi)
    venv=${BPT_TORCH_VENV:-$here/.venv-torch}
    source "$here/../scripts/python_venv.sh"
    bpt_python_venv torch_env "$venv" "torch, numpy" "PyTorch 2.x (a few GB)" "torch>=2" numpy
    echo "$venv/bin/python"
    ;;
  *)
    echo "usage: torch_env.sh pypi|debian" >&2
    exit 2
    ;;
esac
