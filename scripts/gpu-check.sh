#!/usr/bin/env bash
# The GPU machine check for the CUDA backend (issue 5), in one call: builds with CUDA, runs the backend-ops
# test (every op and primitive against the CPU), trains the MLP (and the ResNet example when it exists) in f32, bf16 and f16 + loss scaling where the
# examples offer --precision, runs the same models in PyTorch (eager and AMP) on the same GPU, times gemm
# against cuBLAS through PyTorch, and prints a short table last. Full logs go to $OUT (default build-gpu/out).
#
# Run from the repository root on the device machine, e.g. through the device tool:
#   run(command="bash scripts/gpu-check.sh", carry=[".gpu-data"], timeout_s=600)
# It writes three files to $OUT: table.txt, summary.log and gpu-check-logs.tar.gz (every log), refreshed as
# each section ends (not only on exit: the device tool's SIGKILL at its limit skips exit traps), so a run cut
# short still brings back what it finished. Every section runs under `timeout` (GPU_CHECK_SECTION_LIMIT, 240 s,
# for the tests and the gemm timing; GPU_CHECK_BUILD_LIMIT, 420 s, for the build) and a failed or timed-out
# section is recorded in the table and the script carries on with the next one.
# Dry run without a GPU (what CI does): GPU_CHECK_DRY_RUN=1 builds the same targets with BPT_WITH_CUDA=AUTO
# (the CUDA module when nvcc is there, none otherwise), runs test_backend_ops with the CPU standing in (it
# reports that it skips cuda), builds and runs the NCCL smoke test (exit 77 without a GPU) and gemm_bench, and
# skips PyTorch and the training runs. Add GPU_CHECK_FORCE_SHIMS=1 to build with the stand-ins too.
# Data: the machine has no /usr/share/datasets. Put Fashion-MNIST in the repo-ignored folder .gpu-data first
# (here: mkdir -p .gpu-data && cp -r /usr/share/datasets/fashion-mnist .gpu-data/ &&
#  echo /.gpu-data/ >> .git/info/exclude), and name it in carry; without it a synthetic IDX set of the same
# shape is generated (accuracies then mean little, throughput is unaffected). BPT_DATA overrides both.
# Missing Debian packages on that image (OpenBLAS, CMocka, zlib headers) are replaced by the small stand-ins
# in scripts/gpu-check/; cuDNN is taken from /usr/local/cuda or, failing that, from PyTorch's nvidia-cudnn wheel.
# Knobs: GPU_CHECK_EPOCHS (2), GPU_CHECK_RUN_LIMIT (seconds per training run, 120), GPU_CHECK_BUDGET
# (seconds for everything, 540: later runs are skipped and say so), GPU_CHECK_FORCE_SHIMS=1
# (use the stand-ins even where the real packages exist: how the script is tested without a GPU),
# GPU_CHECK_BUILD (build folder, build-gpu), GPU_CHECK_JOBS (parallel build jobs, nproc), GPU_CHECK_ARCHITECTURES (CMAKE_CUDA_ARCHITECTURES, 90), PYTHON
# (the interpreter for PyTorch, python3), CUDNN_ROOT (a cuDNN outside /usr/local/cuda).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-$root/build-gpu/out}
build=${GPU_CHECK_BUILD:-$root/build-gpu}
# The device tool brings back at most 8 files from $OUT: logs gather in one folder, packed on exit.
logs=$build/gpu-check-logs
rm -rf "$logs"
mkdir -p "$OUT" "$logs"
# What is finished reaches $OUT at once: publish runs after every row and section, and on exit as well.
publish() {
  cp "$logs/table.txt" "$logs/summary.log" "$OUT/" 2>/dev/null
  tar czf "$OUT/gpu-check-logs.tar.gz.part" -C "$logs" . 2>/dev/null &&
    mv -f "$OUT/gpu-check-logs.tar.gz.part" "$OUT/gpu-check-logs.tar.gz"
}
trap publish EXIT
dry=${GPU_CHECK_DRY_RUN:-0}
section_limit=${GPU_CHECK_SECTION_LIMIT:-240}
build_limit=${GPU_CHECK_BUILD_LIMIT:-420}
deps=$build-deps
epochs=${GPU_CHECK_EPOCHS:-2}
limit=${GPU_CHECK_RUN_LIMIT:-120}
budget=${GPU_CHECK_BUDGET:-540} # seconds for the whole script: the device tool's command limit is 600
began=$(date +%s)
python=${PYTHON:-python3}
jobs=${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
export PATH=/usr/local/cuda/bin:$PATH
declare -a table=()

say() { echo "[gpu-check] $*" | tee -a "$logs/summary.log"; }
row() { table+=("$1"); echo "$1" >>"$logs/table.txt"; publish; }
: >"$logs/table.txt"
# limited SECONDS COMMAND...: the command under timeout (TERM, then KILL 10 s later); 124 or 137 means it ran
# out of time, which the callers name in the table.
limited() { local seconds=$1; shift; timeout -k 10 "$seconds" "$@"; }
outcome() { case $1 in 0) echo "exit 0";; 124|137) echo "TIMED OUT ($1)";; *) echo "exit $1";; esac; }

# ---- 0. the machine ----
{
  date -u
  limited 30 nvidia-smi 2>&1 | head -15
  limited 30 nvcc --version 2>&1 | tail -2
  [ "$dry" = 1 ] || limited 60 $python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1
  uname -a
} >"$logs/environment.log" 2>&1
[ "$dry" = 1 ] && say "dry run (GPU_CHECK_DRY_RUN=1): CUDA if nvcc is found, no PyTorch, no training runs"
say "environment: $(grep -m1 -o 'NVIDIA [A-Z0-9 ]*' "$logs/environment.log" || echo 'no nvidia-smi output')"

# ---- 1. dependencies: the real packages when present, stand-ins otherwise ----
mkdir -p "$deps/include" "$deps/lib"
with_cuda=ON
[ "$dry" = 1 ] && with_cuda=AUTO
cmake_args=(-G "$(command -v make >/dev/null && echo 'Unix Makefiles' || echo Ninja)" -DCMAKE_BUILD_TYPE=Release -DBPT_WITH_CUDA=$with_cuda -DCMAKE_CUDA_ARCHITECTURES="${GPU_CHECK_ARCHITECTURES:-90}")
has_header() { echo "#include <$1>" | cc -E -x c - >/dev/null 2>&1; }
force=${GPU_CHECK_FORCE_SHIMS:-0}

if [ "$force" = 1 ] || ! has_header cblas.h || ! { ldconfig -p | grep -q libopenblas; }; then
  say "OpenBLAS not found: using the plain CBLAS stand-in (CPU reference only)"
  cp scripts/gpu-check/cblas.h "$deps/include/"
  cc -O2 -fPIC -shared -fopenmp -I scripts/gpu-check scripts/gpu-check/cblas_shim.c -o "$deps/lib/libopenblas.so" ||
    { row "dependencies: FAILED (the CBLAS stand-in does not compile)"; exit 1; }
  cmake_args+=(-DBPT_OPENBLAS_LIBRARY="$deps/lib/libopenblas.so" -DBPT_CBLAS_INCLUDE_DIR="$deps/include")
fi
if [ "$force" = 1 ] || ! has_header zlib.h; then
  libz=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
  [ -n "$libz" ] || libz=$(ldconfig -p | awk '/libz\.so\.1/ {print $NF; exit}')
  say "zlib headers not found: using the zlib.h stand-in, linking $libz"
  mkdir -p "$deps/zlib"
  cp scripts/gpu-check/zlib.h "$deps/zlib/"
  cmake_args+=(-DZLIB_INCLUDE_DIR="$deps/zlib" -DZLIB_LIBRARY="$libz")
fi
if [ "$force" = 1 ] || ! has_header cmocka.h || ! { ldconfig -p | grep -q libcmocka; }; then
  say "CMocka not found: building the tests against the CMocka stand-in"
  mkdir -p "$deps/cmocka"
  cp scripts/gpu-check/cmocka.h "$deps/cmocka/"
  cc -O2 -c -I scripts/gpu-check scripts/gpu-check/cmocka_shim.c -o "$deps/cmocka/cmocka_shim.o" &&
    ar rcs "$deps/cmocka/libcmocka.a" "$deps/cmocka/cmocka_shim.o" ||
    { row "dependencies: FAILED (the CMocka stand-in does not compile)"; exit 1; }
  cmake_args+=(-DCMOCKA_LIBRARY="$deps/cmocka/libcmocka.a" -DCMOCKA_INCLUDE_DIR="$deps/cmocka")
fi
if [ ! -f /usr/local/cuda/include/cudnn.h ] && [ -z "${CUDNN_ROOT:-}" ]; then
  wheel=$($python -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null)
  if [ -n "$wheel" ] && [ -f "$wheel/include/cudnn.h" ]; then
    say "cuDNN from PyTorch's wheel: $wheel"
    mkdir -p "$deps/cudnn/lib"
    ln -sfn "$wheel/include" "$deps/cudnn/include"
    for library in "$wheel"/lib/libcudnn*.so.*; do ln -sf "$library" "$deps/cudnn/lib/"; done
    ln -sf "$(ls "$wheel"/lib/libcudnn.so.* | head -1)" "$deps/cudnn/lib/libcudnn.so"
    export CUDNN_ROOT=$deps/cudnn
    export LD_LIBRARY_PATH=$wheel/lib:${LD_LIBRARY_PATH:-}
  fi
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}

# ---- 2. build ----
start=$(date +%s)
# Nothing after this runs without a build, so a failed configure or build ends the script (table first).
limited 120 cmake -S . -B "$build" "${cmake_args[@]}" >"$logs/configure.log" 2>&1
status=$?
if [ $status != 0 ]; then
  row "configure: FAILED, $(outcome $status) (see configure.log)"; tail -20 "$logs/configure.log"; exit 1
fi
targets=(bptrain_static mnist_mlp test_backend_ops test_host_syncs)
for example in resnet mnist_precision; do [ -f "examples/$example.c" ] && targets+=("$example"); done
limited "$build_limit" cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$logs/build.log" 2>&1
status=$?
if [ $status != 0 ]; then
  row "build: FAILED, $(outcome $status) (see build.log)"; grep -m20 -E "error|Error" "$logs/build.log"; exit 1
fi
say "built ${targets[*]} in $(( $(date +%s) - start )) s"
# The CUDA backend is a module (libbptrain-cuda.so.0 next to libbptrain.so); the programs linked with
# libbptrain.a (the tests, gemm_bench) find it through BPTRAIN_MODULE_PATH.
export BPTRAIN_MODULE_PATH=$build
if [ -f "$build/libbptrain-cuda.so.0" ]; then
  row "build: $(( $(date +%s) - start )) s ($(grep -m1 -o 'nvcc [0-9][0-9.]*' "$logs/configure.log" || echo nvcc))"
elif [ "$dry" = 1 ]; then
  row "build: $(( $(date +%s) - start )) s, without the CUDA module (no nvcc/cuDNN here: dry run goes on)"
else
  row "build: FAILED, no CUDA module $build/libbptrain-cuda.so.0"; exit 1
fi

# ---- 3. every op and shared primitive on every backend, the GPU among them ----
limited "$section_limit" "$build/tests/test_backend_ops" >"$logs/test_backend_ops.log" 2>&1
status=$?
summary=$(grep -E "op cases|failures:|every case on cuda|FAILED" "$logs/test_backend_ops.log" | cut -c1-160 | head -5 | tr '\n' ' ')
row "test_backend_ops: $(outcome $status) $( [ $status = 0 ] && echo PASSED || echo FAILED) $summary"
if [ "$dry" = 1 ]; then
  row "test_backend_ops with BPT_CUDA_TF32=1 BPT_CUDA_BENCHMARK=1: skipped (dry run: the same CPU comparisons)"
else
  BPT_CUDA_TF32=1 BPT_CUDA_BENCHMARK=1 limited "$section_limit" "$build/tests/test_backend_ops" \
    >"$logs/test_backend_ops_tf32.log" 2>&1
  row "test_backend_ops with BPT_CUDA_TF32=1 BPT_CUDA_BENCHMARK=1: $(outcome $?) (tf32 may exceed the f32 tolerances: informative)"
fi

# ---- 3a. host waits per training step through the backend table, on cuda (issue 27; the dry run: the CPU) ----
limited "$section_limit" "$build/tests/test_host_syncs" >"$logs/test_host_syncs.log" 2>&1
status=$?
summary=$(grep -E "waits and|skipped on cuda" "$logs/test_host_syncs.log" | grep -E "^cuda|skipped" | cut -c1-120 | tr '\n' ' ')
row "test_host_syncs: $(outcome $status) $( [ $status = 0 ] && echo PASSED || echo FAILED) $summary"

# ---- 3b. the NCCL engine on one GPU (comm layer, issue 7) ----
if limited "$build_limit" cmake --build "$build" -j "$jobs" --target test_nccl_smoke >>"$logs/build.log" 2>&1; then
  limited "$section_limit" "$build/tests/nccl/test_nccl_smoke" >"$logs/test_nccl_smoke.log" 2>&1
  status=$?
  case $status in 0) verdict=PASSED;; 77) verdict="skipped (no GPU)";; *) verdict=FAILED;; esac
  row "test_nccl_smoke (world size 1): $(outcome $status) $verdict"
else
  row "test_nccl_smoke: not built (NCCL or MPI not found on this machine)"
fi

# ---- 4. gemm against cuBLAS through PyTorch ----
# Linked against the static library and the libraries the configure step found; the CUDA backend itself
# comes from the module through BPTRAIN_MODULE_PATH.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -1; }
zlib_library=$(cache ZLIB_LIBRARY_RELEASE); [ -n "$zlib_library" ] || zlib_library=$(cache ZLIB_LIBRARY)
# Only the libraries this configure found (a dry run without CUDA has no cuDNN or cudart to name).
link_libraries=()
for variable in BPT_CUDNN_LIBRARY CUDA_cudart_LIBRARY BPT_OPENBLAS_LIBRARY; do
  library=$(cache $variable)
  [ -f "$library" ] && link_libraries+=("$library")
done
if { cc -std=c11 -O2 -I include -I src -c scripts/gpu-check/gemm_bench.c -o "$build/gemm_bench.o" &&
  c++ -o "$build/gemm_bench" "$build/gemm_bench.o" "$build/libbptrain.a" "${link_libraries[@]}" \
    "${zlib_library:--lz}" -fopenmp -ldl -lpthread -lm; } >"$logs/gemm_bench_build.log" 2>&1; then
  limited "$section_limit" "$build/gemm_bench" >"$logs/gemm_ours.log" 2>&1
  status=$?
  [ $status = 124 ] || [ $status = 137 ] && row "gemm_bench: TIMED OUT after $section_limit s"
else
  row "gemm_bench: does not build (see gemm_bench_build.log)"
  : >"$logs/gemm_ours.log"
fi
if [ "$dry" = 1 ]; then
  : >"$logs/gemm_torch.log"
else
  limited "$section_limit" $python scripts/gpu-check/torch_bench.py gemm >"$logs/gemm_torch.log" 2>&1
fi
while read -r _ dtype shape ours; do
  theirs=$(awk -v d="$dtype" -v s="$shape" '$2 == d && $3 == s {print $4}' "$logs/gemm_torch.log")
  ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "n/a" }')
  row "gemm $dtype $shape: ours $ours TFLOP/s, torch.matmul ${theirs:-n/a} TFLOP/s ($ratio)"
done < <(grep '^gemm ' "$logs/gemm_ours.log")
grep -q '^gemm ' "$logs/gemm_ours.log" || row "gemm: not measured ($(tail -1 "$logs/gemm_ours.log" 2>/dev/null))"

if [ "$dry" = 1 ]; then
  row "training runs: skipped (dry run)"
  echo
  printf '%s\n' "${table[@]}"
  # CI runs the dry run: a failed, timed-out or unbuildable section fails it.
  if grep -qE "FAILED|TIMED OUT|does not build" "$logs/table.txt"; then
    echo "gpu-check dry run: FAILED"; exit 1
  fi
  echo "gpu-check dry run: every section got past its build and skipped or passed without a GPU"
  exit 0
fi

# ---- 5. data ----
data=${BPT_DATA:-}
for candidate in "$root/.gpu-data/fashion-mnist" "$root/.gpu-data" /usr/share/datasets/fashion-mnist; do
  [ -z "$data" ] && ls "$candidate"/train-images-idx3-ubyte* >/dev/null 2>&1 && data=$candidate
done
if [ -z "$data" ]; then
  data=$build/synthetic-idx
  limited 120 $python scripts/gpu-check/make_synthetic_idx.py "$data" >>"$logs/summary.log" 2>&1
  say "no Fashion-MNIST: using a synthetic IDX set in $data (accuracies are not Fashion-MNIST's)"
fi

# ---- 6. training runs: ours and PyTorch's ----
# samples/s of the last epoch (training + test evaluation) from the examples' "N s elapsed" lines; examples
# without them give their progress bar's last training rate, marked '+'.
ours_rate() {
  tr '\r' '\n' <"$1" | awk '
    /^epoch [0-9]+:/ { for (i = 1; i <= NF; i++) if ($(i+1) == "s" && $(i+2) == "elapsed") t[++n] = $i }
    { for (i = 2; i <= NF; i++) if ($i == "samples/s") rate = $(i-1) }
    END { if (n >= 2) printf "%.0f", 60000 / (t[n] - t[n-1]); else if (n == 1) printf "%.0f*", 60000 / t[1];
          else if (rate != "") printf "%s+", rate; else print "n/a" }'
}
# Seconds a run may take: its own limit, or what is left of the budget; 0 when too little is left.
run_limit() {
  local left=$(( budget - ($(date +%s) - began) - 15 ))
  [ "$left" -lt 30 ] && { echo 0; return; }
  [ "$left" -lt "$limit" ] && echo "$left" || echo "$limit"
}
# ours NAME "ENV=..." BINARY ARGUMENTS...: needs the example to take --backend (and its other options).
ours() {
  local name=$1 environment=$2 binary=$3; shift 3
  local seconds; seconds=$(run_limit)
  [ "$seconds" = 0 ] && { row "$name: skipped (time budget of $budget s spent)"; return; }
  [ -x "$build/$binary" ] || { row "$name: not run ($binary is not in this tree)"; return; }
  local help; help=$(limited 30 "$build/$binary" --help 2>&1)
  for option in --backend "$@"; do
    case $option in --*) grep -q -- "$option" <<<"$help" || { row "$name: not run ($binary has no $option option)"; return; } ;; esac
  done
  env $environment timeout -k 10 "$seconds" "$build/$binary" --backend cuda --data "$data" --epochs "$epochs" "$@" \
    >"$logs/$name.log" 2>&1
  local status=$?
  row "$name: $(ours_rate "$logs/$name.log") samples/s, $(grep -o 'final test accuracy: [0-9.]*%' "$logs/$name.log" | tail -1) ($(outcome $status))"
}
theirs() { # NAME MODEL MODE [torch_bench options]
  local name=$1 model=$2 mode=$3; shift 3
  local seconds; seconds=$(run_limit)
  [ "$seconds" = 0 ] && { row "$name: skipped (time budget of $budget s spent)"; return; }
  timeout -k 10 "$seconds" $python scripts/gpu-check/torch_bench.py "$model" --data "$data" --mode "$mode" \
    --epochs "$epochs" "$@" >"$logs/$name.log" 2>&1
  local status=$?
  row "$name: $(grep -o 'samples_per_second=[0-9]*' "$logs/$name.log" | cut -d= -f2) samples/s, accuracy $(grep -o 'accuracy=[0-9.]*' "$logs/$name.log" | cut -d= -f2) ($(outcome $status))"
}
# Most telling comparisons first, so a short budget still answers them. The mixed-precision MLP is the
# precision example (its --dtype picks the policy; f16 gets dynamic loss scaling).
ours mlp_ours_f32 "" mnist_mlp
theirs mlp_torch_eager mlp eager
ours mlp_ours_bf16 "" mnist_precision --dtype bf16
theirs mlp_torch_amp_bf16 mlp amp-bf16
ours mlp_ours_f16_loss_scaling "" mnist_precision --dtype f16 --loss-scaling dynamic
theirs mlp_torch_amp_f16 mlp amp-f16
ours mlp_ours_f32_tf32 "BPT_CUDA_TF32=1" mnist_mlp
# ResNet-20 without augmentation (the example's default; PyTorch's side has none). PyTorch lets convolutions
# use tf32 and torch_bench.py turns cudnn.benchmark on: the first of ours matches both.
resnet=(--depth 20)
ours resnet_ours_f32_tf32 "BPT_CUDA_BENCHMARK=1 BPT_CUDA_TF32=1" resnet "${resnet[@]}"
theirs resnet_torch_eager resnet eager --blocks 3
ours resnet_ours_bf16 "BPT_CUDA_BENCHMARK=1 BPT_CUDA_TF32=1" resnet "${resnet[@]}" --dtype bf16
theirs resnet_torch_amp_bf16 resnet amp-bf16 --blocks 3
ours resnet_ours_f16_loss_scaling "BPT_CUDA_BENCHMARK=1 BPT_CUDA_TF32=1" resnet "${resnet[@]}" --dtype f16
theirs resnet_torch_amp_f16 resnet amp-f16 --blocks 3
ours resnet_ours_f32 "BPT_CUDA_BENCHMARK=1" resnet "${resnet[@]}"

# ---- 7. the table ----
echo
echo "=== gpu-check: $(grep -m1 -o 'NVIDIA [A-Z0-9 ]*' "$logs/environment.log" || echo GPU), data $data, batch 128, $epochs epochs ==="
printf '%s\n' "${table[@]}"
echo "(samples/s: last epoch, training + test evaluation; '*' = single epoch incl. warm-up; '+' = training only;"
echo " logs: $OUT/gpu-check-logs.tar.gz, table: $OUT/table.txt)"
