#!/usr/bin/env bash
# Installs the Debian packages libbptrain needs on a fresh machine. Run as root (CI and the README's commands
# do). Safe to run again: apt-get skips what is installed.
#   install-deps.sh            everything for developing: the minimal set plus the test, sanitizer, ABI, MPI,
#                              network and FPGA tools (what scripts/test.sh and CI use)
#   install-deps.sh --minimal  what the README's first commands need to build, train and export: compiler,
#                              CMake, OpenBLAS, oneDNN, zlib, CMocka (run-example.sh builds the tests too), the data
#                              set, ONNX export, gnuplot for --plot, Python with NumPy and venv
#                              (what scripts/run-example.sh uses)
#   --print                    lists the packages instead of installing them (no root needed)
#   --verbose                  shows apt-get's output (otherwise kept in a log, shown when apt-get fails)
set -euo pipefail

minimal=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev zlib1g-dev
  # oneDNN 2.6 (issue 26.1): the bf16 policy's products run on its matmul where the CPU has AVX512_BF16 or
  # AMX; opened at run time like OpenBLAS, its headers needed at build time (the library builds without it)
  libdnnl-dev
  libcmocka-dev
  dataset-fashion-mnist
  # examples/char_gpt's default text (issue 25): /usr/share/games/fortunes
  fortunes
  # --plot
  gnuplot-nox
  # --- ONNX export (issue 17.3): protobuf-c and the official onnx.proto (libonnx-dev ships it) ---
  protobuf-c-compiler libprotobuf-c-dev libonnx-dev
  # The Python binding takes and returns NumPy arrays; `pip install ./python` goes into a venv (PEP 668)
  python3 python3-numpy python3-venv
)
developing=(
  clang libomp-dev
  # Robustness (issue 9): valgrind runs and the libFuzzer/ASan runtime for clang
  valgrind libclang-rt-14-dev
  # comm layer (issue 7): the MPI engine, its tests and ddp_mnist
  openmpi-bin libopenmpi-dev
  # packaging (issue 8): ABI check (abidw/abidiff) and the API reference
  abigail-tools doxygen
  # Ranks on emulated network hosts (issue 31): ip netns, veth, bridge and tc tbf (scripts/netns-mpi.sh)
  iproute2
  # --- FPGA RTL (issue 28): Verilator builds the fpga_cosim C/RTL co-simulation ctest (skipped without it);
  # Yosys and Icarus Verilog are for scripts/fpga_synth.sh and for simulating rtl/ by hand (not CI-critical) ---
  verilator yosys iverilog
)
packages=("${minimal[@]}" "${developing[@]}")
print=0 verbose=0
for argument in "$@"; do
  case $argument in
    --minimal) packages=("${minimal[@]}") ;;
    --print) print=1 ;;
    --verbose) verbose=1 ;;
    *) echo "install-deps: unknown argument '$argument' (--minimal, --print, --verbose)" >&2; exit 2 ;;
  esac
done
if [ "$print" -eq 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: run as root (apt-get needs it)" >&2
  exit 1
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  # apt-get prints about a thousand lines on a fresh machine, which buried the one line a newcomer needs: they
  # go to a log, shown only when apt-get fails (or with --verbose).
  echo "install-deps: installing ${#missing[@]} packages with apt-get (a few minutes on a fresh machine): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  install_missing() { apt-get update -qq && apt-get install -y -qq "${missing[@]}"; }
  if [ "$verbose" -eq 1 ]; then
    install_missing
  else
    log=$(mktemp "${TMPDIR:-/tmp}/install-deps.XXXXXX.log")
    if ! install_missing > "$log" 2>&1; then
      echo "install-deps: apt-get failed; the last lines of its output ($log):" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    echo "install-deps: done (apt-get's output: $log)"
  fi
fi
