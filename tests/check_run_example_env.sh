#!/usr/bin/env bash
# scripts/run-example.sh's OpenMP waiting default (issue 16.3): a short spin (GOMP_SPINCOUNT=1000) when the caller chose no waiting
# policy, the caller's own choice untouched otherwise. Runs the script's --print-env mode, which stops before
# installing or building anything.   check_run_example_env.sh SOURCE_DIR
set -euo pipefail
script=$1/scripts/run-example.sh
failures=0
# expect "ASSIGNMENTS" "EXPECTED OUTPUT": the variables the example would get, sorted, one a line.
expect() {
  local assignments=() got
  read -r -a assignments <<< "$1"
  got=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u KMP_BLOCKTIME "${assignments[@]}" bash "$script" --print-env)
  if [ "$got" != "$2" ]; then
    echo "FAIL: with '${1:-nothing set}' the example would get '${got//$'\n'/ }', expected '${2//$'\n'/ }'" >&2
    failures=$((failures + 1))
  else
    echo "ok: with '${1:-nothing set}' -> '${got//$'\n'/ }'"
  fi
}
expect "" "GOMP_SPINCOUNT=1000"
expect "OMP_WAIT_POLICY=" $'GOMP_SPINCOUNT=1000\nOMP_WAIT_POLICY='
expect "OMP_WAIT_POLICY=passive" "OMP_WAIT_POLICY=passive"
expect "OMP_WAIT_POLICY=active" "OMP_WAIT_POLICY=active"
expect "OMP_WAIT_POLICY=PASSIVE" "OMP_WAIT_POLICY=PASSIVE"
expect "GOMP_SPINCOUNT=100000" "GOMP_SPINCOUNT=100000"
expect "KMP_BLOCKTIME=200" "KMP_BLOCKTIME=200"
expect "OMP_WAIT_POLICY=active GOMP_SPINCOUNT=10" $'GOMP_SPINCOUNT=10\nOMP_WAIT_POLICY=active'
[ "$failures" -eq 0 ] || { echo "check_run_example_env: $failures case(s) failed" >&2; exit 1; }
