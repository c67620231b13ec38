#!/usr/bin/env bash
# Checks scripts/netns-mpi.sh itself: each rank runs in a namespace of its own, sees only its own link,
# shaped by tbf at the asked rate; and a job past its limit is ended and leaves no namespace behind.
# Exits 77 (CTest: skipped) where the script cannot make namespaces.
set -uo pipefail
script=$1
fail() { echo "check failed: $1" >&2; exit 1; }

out=$(bash "$script" --ranks 3 --rate 1gbit --timeout 40 \
  sh -c 'printf "%s\n" "ns $(readlink /proc/self/ns/net)" "$(ip -br -4 addr show bptnet0)" "$(tc qdisc show dev bptnet0)"' 2>&1)
status=$?
[ "$status" -ne 77 ] || { echo "$out"; exit 77; }
[ "$status" -eq 0 ] || fail "a 3-rank job of sh ended with $status: $out"
# The ranks' lines may interleave on a busy machine: count the namespace ids wherever they stand.
[ "$(echo "$out" | grep -o 'ns net:\[[0-9]*\]' | sort -u | wc -l)" -eq 3 ] || fail "the 3 ranks did not run in 3 namespaces: $out"
for r in 1 2 3; do echo "$out" | grep -q "10.231.0.$r/24" || fail "no rank has 10.231.0.$r: $out"; done
[ "$(echo "$out" | grep -c 'tbf.*rate 1Gbit')" -eq 3 ] || fail "not every rank's link is shaped by tbf at 1 Gbit/s: $out"

bash "$script" --ranks 2 --rate none --timeout 2 sleep 60 > /dev/null 2>&1 &
runner=$!
wait "$runner"
status=$?
[ "$status" -eq 124 ] || fail "a job past its 2 s limit ended with $status, not 124 (timeout)"
left=$(ip netns list | grep -c "^bptnet-$runner-" || true)
[ "$left" -eq 0 ] || fail "$left namespaces of the timed-out run are left: $(ip netns list)"
echo "netns-mpi: ranks in separate shaped namespaces; a job past its limit is ended and cleaned up"
