#!/usr/bin/env bash
# LeNet-5 and ResNet-8 training throughput and peak RSS, libbptrain against PyTorch, side by side: the sides
# run alternately (ROUNDS times each) with the same threads and batch, and the median of each is compared,
# so a shared machine's load hits all alike. Competitors: the current PyTorch 2.x from PyPI (a virtual
# environment bench/torch_env.sh creates on first use), channels-last, the better of eager and torch.compile
# in each round; and Debian's PyTorch 1.13, the better of NCHW and channels-last. Throughput is reported per
# wall second and per CPU second (process CPU time, which a shared machine's load disturbs far less).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every side; PyTorch runs with OMP_WAIT_POLICY=passive.
# DTYPE=bf16: libbptrain under the bf16 precision policy against PyTorch under torch.autocast(bfloat16); each
# side's line names the units it ran on.
#
#   [MODELS="lenet resnet8"] [TORCH=pypi,debian] [DTYPE=f32|bf16] bench/cnn.sh [BUILD_DIR] [THREADS] [BATCH] \
#     [ROUNDS] [STEPS]
#   (defaults: build 1 128 3 20; TORCH=debian skips the PyPI column)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
threads=${2:-1}
batch=${3:-128}
rounds=${4:-3}
steps=${5:-20}
torch_sides=${TORCH:-pypi,debian}
dtype=${DTYPE:-f32}
case "$dtype" in
  f32) torch_dtype="" ours_dtype="" ;; # no --dtype: a build older than the flag runs f32 too
  bf16) torch_dtype="--bf16" ours_dtype="--dtype bf16" ;;
  *) echo "cnn.sh: DTYPE is f32 or bf16, not '$dtype'" >&2; exit 2 ;;
esac
pypi="" debian=""
case ",$torch_sides," in *,pypi,*) pypi=$(bash "$here/torch_env.sh" pypi) ;; esac
case ",$torch_sides," in *,debian,*) debian=$(bash "$here/torch_env.sh" debian) ;; esac
run() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" "$@"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rate() { awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "samples/s") print $i }' <<<"$1"; }
cpu_rate() { awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "samples" && $(i + 2) == "per") print $i }' <<<"$1"; }
rss() { awk '{ for (i = 1; i < NF; i++) if ($i == "RSS") print $(i + 1) }' <<<"$1"; }
# Runs one PyTorch configuration per argument set given on stdin (one per line) and prints the fastest's line.
torch_best() {
  local python=$1 model=$2 best="" best_rate=0 line options
  while read -r options; do
    line=$(OPENBLAS_NUM_THREADS="$threads" run OMP_WAIT_POLICY=passive "$python" "$here/cnn_torch.py" "$model" \
           --threads "$threads" --batch "$batch" --steps "$steps" $options $torch_dtype 2>/dev/null) || continue
    echo "  $line" >&2
    if awk -v a="$(rate "$line")" -v b="$best_rate" 'BEGIN { exit !(a > b) }'; then best=$line best_rate=$(rate "$line"); fi
  done
  echo "$best"
}

echo "cnn benchmark: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), threads $threads, batch $batch, $dtype," \
  "$rounds alternating rounds of $steps timed steps; load: $(cut -d' ' -f1-3 /proc/loadavg)"
# The library's own banner: the core it chose (which can differ from OpenBLAS's own pick) and its bf16 units.
if [ -x "$build/gemm_shapes_bench" ]; then
  run "$build/gemm_shapes_bench" --info
else
  echo "libbptrain BLAS: OpenBLAS's own pick $(run /usr/bin/python3 -c 'import ctypes; l = ctypes.CDLL("libopenblas.so.0"); l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())') (build $build has no gemm_shapes_bench for the library's banner)"
fi
for model in ${MODELS:-lenet resnet8}; do
  ours=() our_cpu=() our_rss=() new=() new_cpu=() new_rss=() old=() old_rss=() new_kind=""
  for ((round = 0; round < rounds; round++)); do
    line=$(run "$build/bench/cnn_bench" "$model" --threads "$threads" --batch "$batch" --steps "$steps" \
      ${ours_dtype:+$ours_dtype})
    echo "  $line"
    ours+=("$(rate "$line")") our_cpu+=("$(cpu_rate "$line")") our_rss+=("$(rss "$line")")
    if [ -n "$pypi" ]; then
      line=$(printf '%s\n' "--channels-last" "--channels-last --compile" | torch_best "$pypi" "$model")
      if [ -n "$line" ]; then
        new+=("$(rate "$line")") new_cpu+=("$(cpu_rate "$line")") new_rss+=("$(rss "$line")")
        new_kind=$(sed -n 's/^pytorch \([^ ]*\) \(.*\) '"$model"' batch.*/\1 \2/p' <<<"$line")
      fi
    fi
    if [ -n "$debian" ]; then
      line=$(printf '%s\n' "" "--channels-last" | torch_best "$debian" "$model")
      if [ -n "$line" ]; then old+=("$(rate "$line")") old_rss+=("$(rss "$line")"); fi
    fi
  done
  a=$(printf '%s\n' "${ours[@]}" | median) ca=$(printf '%s\n' "${our_cpu[@]}" | median)
  ra=$(printf '%s\n' "${our_rss[@]}" | median)
  b=$(printf '%s\n' "${new[@]}" | median) cb=$(printf '%s\n' "${new_cpu[@]}" | median)
  rb=$(printf '%s\n' "${new_rss[@]}" | median) c=$(printf '%s\n' "${old[@]}" | median)
  awk -v m="$model" -v a="$a" -v b="$b" -v c="$c" -v ca="$ca" -v cb="$cb" -v ra="$ra" -v rb="$rb" -v k="$new_kind" 'BEGIN {
    printf "%s: libbptrain %.0f samples/s; PyTorch 2.x (%s) %.0f: %s; PyTorch 1.13 %.0f: %s; per CPU-second %.0f vs %.0f: %s; " \
           "peak RSS %.0f MB vs %.0f MB: %s\n", m, a, k, b, (b > 0 ? sprintf("%.2fx", a / b) : "-"), c,
           (c > 0 ? sprintf("%.2fx", a / c) : "-"), ca, cb, (cb > 0 ? sprintf("%.2fx", ca / cb) : "-"), ra, rb,
           (rb > 0 ? sprintf("%.0f%%", 100 * ra / rb) : "-") }'
done
