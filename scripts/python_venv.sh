# Sourced by scripts/onnx_env.sh and bench/torch_env.sh: makes a virtual environment of Debian's python3
# with packages from PyPI, once. Progress goes to stderr, so the callers' stdout stays the interpreter's path.
#   bpt_python_venv WHO VENV "IMPORTS" "WHAT (for the progress line)" PACKAGE...
# Returns at once when VENV's python already imports IMPORTS (comma-separated); installs python3-venv with
# apt-get when root and it is missing, and fails with a message naming the package otherwise.
bpt_python_venv() {
  local who=$1 venv=$2 imports=$3 what=$4
  shift 4
  "$venv/bin/python" -c "import $imports" 2> /dev/null && return 0
  if ! /usr/bin/python3 -c "import venv, ensurepip" 2> /dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
    else
      echo "$who: python3-venv is missing (apt-get install python3-venv as root)" >&2
      return 1
    fi
  fi
  echo "$who: creating $venv with $what from PyPI (once)" >&2
  /usr/bin/python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --progress-bar off "$@" >&2
}
