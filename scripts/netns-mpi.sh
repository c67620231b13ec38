#!/usr/bin/env bash
# Runs an MPI program as 2-4 ranks on emulated network hosts: one network namespace per rank, joined by a
# veth pair (2 ranks) or through a bridge in its own namespace (3-4 ranks), every link shaped with tc tbf,
# MPI over TCP only on those links. Used by the CTest tests across namespaces and by bench/comm-netns.sh.
#
#   scripts/netns-mpi.sh [--ranks 2|3|4] [--rate Ngbit|Nmbit|none] [--timeout S] [--] program [args...]
#
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for `ip netns`); without it exits 77 with "netns-mpi: skipped",
# which CTest reports as a skipped test. Every address lives inside namespaces this script makes (10.231.0.x
# is visible nowhere else), the whole run is bounded by --timeout, and the namespaces, their links and any
# process left inside them are removed on every exit path (trap).
set -euo pipefail

ranks=2 rate=1gbit limit=60
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "netns-mpi: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ]; then echo "netns-mpi: no program given (see the usage at the top of $0)" >&2; exit 2; fi
case "$ranks" in 2|3|4) ;; *) echo "netns-mpi: --ranks must be 2, 3 or 4, not '$ranks'" >&2; exit 2 ;; esac
[[ "$rate" =~ ^([0-9]+(gbit|mbit)|none)$ ]] || { echo "netns-mpi: --rate must be like 1gbit, 100mbit or none, not '$rate'" >&2; exit 2; }
case "$limit" in ''|*[!0-9]*) echo "netns-mpi: --timeout must be whole seconds, not '$limit'" >&2; exit 2 ;; esac

skip() { echo "netns-mpi: skipped: $1" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root, so no network namespaces can be made"
command -v ip > /dev/null || skip "iproute2 (ip) is not installed"
command -v tc > /dev/null || skip "tc (iproute2) is not installed"
mpirun=$(command -v mpirun || true)
[ -n "$mpirun" ] || skip "mpirun is not installed"

# Unique per run (PID + random), so parallel runs never share a namespace; addresses need no uniqueness,
# since each set of namespaces has its own network stacks.
prefix=bptnet-$$-$RANDOM
namespaces=()
work=$(mktemp -d "${TMPDIR:-/tmp}/$prefix.XXXXXX")
cleanup() {
  local ns pid
  for ns in "${namespaces[@]}"; do
    # A rank that outlived mpirun (killed by the timeout) would hold its namespace alive: end it first.
    for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$pid" 2> /dev/null || true; done
    ip netns del "$ns" 2> /dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

make_ns() {
  ip netns add "$1" 2> "$work/err" || skip "cannot make a network namespace ($(cat "$work/err"))"
  namespaces+=("$1")
  ip -n "$1" link set lo up
}
# A kernel without veth, bridge or tbf support is a machine that cannot run these tests, not a failure.
need() { # what, command...
  local what=$1
  shift
  "$@" 2> "$work/err" || skip "cannot make $what ($(cat "$work/err"))"
}

# A run killed outright (SIGKILL: no trap) leaves its namespaces behind; they carry its PID, so those of
# runs whose process is gone are removed here. A live PID is left alone, whoever it is.
for stale in $(ip netns list 2> /dev/null | sed -n 's/^\(bptnet-\([0-9]*\)-[^ ]*\).*/\1 \2/p' | tr ' ' ':'); do
  if ! kill -0 "${stale#*:}" 2> /dev/null; then ip netns del "${stale%:*}" 2> /dev/null || true; fi
done

# tbf's bucket must hold at least one GSO segment (64 KiB on veth) and the bytes of one timer tick; about
# 1 ms of traffic at the given rate does both from 1 Gbit/s up, and keeps short transfers from running
# unshaped for long.
shape() { # namespace device
  [ "$rate" = none ] && return 0
  local bits burst
  case "$rate" in
    *gbit) bits=$((${rate%gbit} * 1000000000)) ;;
    *mbit) bits=$((${rate%mbit} * 1000000)) ;;
  esac
  burst=$((bits / 8 / 1000))
  [ "$burst" -ge 131072 ] || burst=131072
  need "a tbf shaper" ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 50ms
}

hosts=()
for ((r = 0; r < ranks; r++)); do
  make_ns "$prefix-r$r"
  hosts+=("10.231.0.$((r + 1))")
done
if [ "$ranks" = 2 ]; then
  # Both ends are called bptnet0, so one btl_tcp_if_include names the link in every namespace.
  need "a veth pair" ip link add bptnet0 netns "$prefix-r0" type veth peer name bptnet0 netns "$prefix-r1"
  for r in 0 1; do
    ip -n "$prefix-r$r" addr add "${hosts[$r]}/24" dev bptnet0
    ip -n "$prefix-r$r" link set bptnet0 up
    shape "$prefix-r$r" bptnet0
  done
else
  make_ns "$prefix-sw"
  need "a bridge" ip -n "$prefix-sw" link add sw type bridge
  ip -n "$prefix-sw" link set sw up
  for ((r = 0; r < ranks; r++)); do
    need "a veth pair" ip link add bptnet0 netns "$prefix-r$r" type veth peer name "port$r" netns "$prefix-sw"
    ip -n "$prefix-sw" link set "port$r" master sw
    ip -n "$prefix-sw" link set "port$r" up
    ip -n "$prefix-r$r" addr add "${hosts[$r]}/24" dev bptnet0
    ip -n "$prefix-r$r" link set bptnet0 up
    shape "$prefix-r$r" bptnet0 # what the rank sends
    shape "$prefix-sw" "port$r" # what it receives
  done
fi

# mpirun runs in rank 0's namespace, where 10.231.0.1 is a local address; it starts the daemons of the other
# "hosts" through this agent (in place of ssh), which enters the namespace owning the address and runs the
# command through a shell, as ssh would.
# Each remote daemon gets its own session-directory base (orte_tmpdir_base, set in the agent's environment
# only, so the program's TMPDIR is untouched): the namespaces share one hostname and one /tmp, so the daemons
# would build their session directories (/tmp/ompi.<host>.<uid>/jf.<job>/0/<vpid>) in one tree at the same
# moment, and Open MPI 4.1 fails a daemon whose mkdir of a shared parent loses that race ("File exists"),
# after which mpirun never exits: the 3-rank stalls of issue 31, about 1 launch in 40 here.
agent="$work/agent"
for ((r = 1; r < ranks; r++)); do mkdir -p "$work/tmp$r"; done
{
  echo '#!/bin/sh'
  echo 'while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done'
  echo 'host=$1; shift'
  echo 'rank=$((${host##*.} - 1))'
  echo "OMPI_MCA_orte_tmpdir_base=\"$work/tmp\$rank\" exec ip netns exec \"$prefix-r\$rank\" /bin/sh -c \"\$*\""
} > "$agent"
chmod +x "$agent"
hostlist=$(printf '%s:1,' "${hosts[@]}")

# More ranks than CPUs (3 ranks on a 2-core machine): each host has one slot, so Open MPI does not know it is
# oversubscribed and its ranks busy-poll; a rank descheduled behind two spinning peers then stalls the ring
# (seen: 1.5 s alone, past 50 s beside other work). Idle ranks yield the CPU instead.
oversubscribed=()
if [ "$ranks" -gt "$(nproc)" ]; then oversubscribed=(--mca mpi_yield_when_idle 1); fi

# TERM at the limit; KILL 10 s later if the job is still tearing down (mpirun ends the remote daemons
# first, slow on loaded cores). The exit status is the program's, or 124 for a job past its limit either way.
status=0
timeout --kill-after=10 "$limit" ip netns exec "$prefix-r0" \
  "$mpirun" --allow-run-as-root --host "${hostlist%,}" -n "$ranks" \
  --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl tcp,self --mca btl_tcp_if_include bptnet0 --mca oob_tcp_if_include bptnet0 "${oversubscribed[@]}" \
  "$@" || status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "netns-mpi: the job ran past its ${limit} s limit and was ended" >&2
  status=124
fi
exit "$status"
