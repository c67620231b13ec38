#!/usr/bin/env bash
# f32 GEMM GFLOP/s on the training shapes: libbptrain's CPU gemm (the OpenBLAS core it chose as a user gets
# it, bench/gemm_shapes.c) beside torch.mm in the PyPI PyTorch (MKL; bench/torch_env.sh pypi creates its
# virtual environment on first use), same threads, OPENBLAS_CORETYPE unset for both (this command only),
# OMP_WAIT_POLICY=passive. Rounds alternate the sides; each shape's best round counts, since on a shared
# machine interference only ever slows a run down. Needs a quiet machine to mean anything.
#
#   [THREADS=2] bash bench/gemm.sh [rounds=3] [seconds per shape=0.5]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
seconds=${2:-0.5}
threads=${THREADS:-2}
pypi=$(bash bench/torch_env.sh pypi)
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DBPT_BUILD_TESTS=OFF > /dev/null
cmake --build build-bench -j 2 --target gemm_shapes_bench > /dev/null

run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive "$@"; }
ours="" theirs=""
for _ in $(seq "$rounds"); do
  ours+=$(run build-bench/gemm_shapes_bench --threads "$threads" --seconds "$seconds")$'\n'
  theirs+=$(run "$pypi" bench/gemm_torch.py --threads "$threads" --seconds "$seconds")$'\n'
done
best() { # OUTPUT SHAPE TRANSPOSE: the best gflops of that shape over the rounds
  echo "$1" | grep " shape=$2 transpose=$3 " | sed -n 's/.*gflops=\([0-9.]*\).*/\1/p' | sort -g -r | head -1
}
echo "gemm benchmark: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), threads $threads," \
  "$rounds rounds; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$ours" | grep -m1 '^libbptrain BLAS'
echo "$theirs" | grep -m1 '^torch'
printf "%-14s %-9s %-16s %-16s %s\n" shape transpose "libbptrain GF/s" "torch.mm GF/s" "ours/torch"
echo "$ours" | sed -n 's/^gemm shape=\([^ ]*\) transpose=\([A-Z]*\) .*/\1 \2/p' | sort -u -k1,1 -k2,2 | while read -r shape transpose; do
  a=$(best "$ours" "$shape" "$transpose") b=$(best "$theirs" "$shape" "$transpose")
  printf "%-14s %-9s %-16s %-16s %s\n" "$shape" "$transpose" "$a" "${b:--}" \
    "$(awk -v a="$a" -v b="${b:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }')"
done
