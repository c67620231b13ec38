#!/usr/bin/env bash
# Runs a training example briefly with --metrics, --plot and --profile, then checks what it printed and
# wrote: the final test accuracy reaches MIN_PERCENT, the CSV has step and epoch rows, the trace is JSON,
# and the PNG exists when gnuplot is installed. Skips (77) without the Fashion-MNIST data.
# Usage: check_example.sh WORK_DIR MIN_PERCENT COMMAND [ARGUMENTS...]
set -euo pipefail
work=$1 minimum=$2
shift 2
data=${BPT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -d "$data" ]; then
  echo "skipped: no Fashion-MNIST in $data (scripts/install-deps.sh installs dataset-fashion-mnist)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$@" --data "$data" --metrics "$work/metrics.csv" --plot "$work/curves.png" --profile "$work/trace.json" |
  tee "$work/output.txt"
accuracy=$(sed -n 's/.*final test accuracy: \([0-9.]*\)%.*/\1/p' "$work/output.txt")
[ -n "$accuracy" ] || { echo "FAIL: no final test accuracy printed" >&2; exit 1; }
awk -v a="$accuracy" -v m="$minimum" 'BEGIN { exit !(a >= m) }' ||
  { echo "FAIL: final test accuracy $accuracy% < $minimum%" >&2; exit 1; }
head -1 "$work/metrics.csv" | grep -q '^kind,epoch,step,train_loss,train_accuracy,test_loss,test_accuracy' ||
  { echo "FAIL: metrics header" >&2; exit 1; }
grep -q '^step,' "$work/metrics.csv" && grep -q '^epoch,' "$work/metrics.csv" ||
  { echo "FAIL: metrics rows missing" >&2; exit 1; }
python3 -c 'import json, sys; events = json.load(open(sys.argv[1]))["traceEvents"]; assert len(events) > 10' \
  "$work/trace.json" || { echo "FAIL: trace is not Chrome trace JSON" >&2; exit 1; }
grep -q '^forward ' "$work/output.txt" || { echo "FAIL: no profile summary" >&2; exit 1; }
if command -v gnuplot > /dev/null; then
  [ -s "$work/curves.png" ] || { echo "FAIL: no plot" >&2; exit 1; }
fi
echo "example OK: accuracy $accuracy% >= $minimum%, metrics, trace$(command -v gnuplot > /dev/null && echo ', plot')"
