#!/usr/bin/env bash
# Installs the Debian packages libbptrain needs to build, test and run its examples on a fresh machine.
# Run as root (CI and the README's commands do). Safe to run again: apt-get skips what is installed.
set -euo pipefail

packages=(
  build-essential cmake pkg-config clang
  libopenblas-openmp-dev zlib1g-dev libomp-dev
  libcmocka-dev
  dataset-fashion-mnist
  # Robustness (issue 9): valgrind runs and the libFuzzer/ASan runtime for clang
  valgrind libclang-rt-14-dev
  # comm layer (issue 7): the MPI engine, its tests and ddp_mnist
  openmpi-bin libopenmpi-dev
)
# --- packaging (issue 8): ABI check (abidw/abidiff), API reference, --plot, Python binding and its tests ---
packages+=(abigail-tools doxygen gnuplot-nox python3)
# --- ONNX export (issue 17.3): protobuf-c and the official onnx.proto (libonnx-dev ships it); python3-venv for
# the ONNX Runtime check's environment (scripts/onnx_env.sh) ---
packages+=(protobuf-c-compiler libprotobuf-c-dev libonnx-dev python3-venv)
# The Python binding takes and returns NumPy arrays; its tests run with Debian's python3 and this numpy
packages+=(python3-numpy)
# Ranks on emulated network hosts (issue 31): ip netns, veth, bridge and tc tbf (scripts/netns-mpi.sh)
packages+=(iproute2)
# --- FPGA RTL (issue 28): Verilator builds the fpga_cosim C/RTL co-simulation ctest (skipped without it);
# Yosys and Icarus Verilog are for scripts/fpga_synth.sh and for simulating rtl/ by hand (not CI-critical) ---
packages+=(verilator yosys iverilog)
# Transformers (issue 25): examples/char_gpt trains on the text of Debian's fortunes (/usr/share/games/fortunes)
packages+=(fortunes)

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: run as root (apt-get needs it)" >&2
  exit 1
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi
