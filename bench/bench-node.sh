#!/usr/bin/env bash
# Sandboxes through sbx-node daemons: two daemons, each in a network namespace of its own
# ("hosts" with addresses only inside them), and the harness (bench-node) in a third joined to
# each by a veth pair; mutual TLS with certificates made here. Runs `bench-node pair` (exec
# round trip and a 200-file create via the first node against the local provider in the
# harness's namespace, interleaved) and `bench-node spread` (N sandboxes over both nodes at
# once). Removes the daemons, their sandboxes and the namespaces on exit. Needs root.
#
#   bench/bench-node.sh [SBX [REPS [EXECS [N [THREADS]]]]]   (defaults: $SBX, 5 20 100 8;
#                                                             SBX_BENCH_QUICK=1: 2 10 20 4)
set -u
SBX=${1:-${SBX:?bench-node.sh: give the sbx program or set SBX}}
if [ "${SBX_BENCH_QUICK:-0}" = 1 ]; then d=(2 10 20 4); else d=(5 20 100 8); fi
REPS=${2:-${d[0]}} EXECS=${3:-${d[1]}} N=${4:-${d[2]}} THREADS=${5:-${d[3]}}
BUILD=$(cd "$(dirname "$SBX")" && pwd)
SBX=$BUILD/$(basename "$SBX")
NODE=$BUILD/sbx-node BENCH=$BUILD/bench/bench-node
[ "$(id -u)" = 0 ] || { echo "bench-node.sh: skipped (network namespaces need root)"; exit 0; }
for p in ip nsenter ss; do command -v "$p" >/dev/null || { echo "bench-node.sh: skipped (no $p)"; exit 0; }; done
[ -x "$NODE" ] && [ -x "$BENCH" ] || { echo "bench-node.sh: no sbx-node or bench-node in $BUILD" >&2; exit 1; }
export SBX_SUPERVISOR=${SBX_SUPERVISOR:-$BUILD/sbx-supervisor}

T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-bench-node.XXXXXX")
tag=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
NS_H=sbxh-$tag PIDS=()
dirs() { # WHO: the state directories of one side, under $T/WHO
    echo XDG_STATE_HOME="$T/$1/state" XDG_RUNTIME_DIR="$T/$1/run" SBX_WORKSPACES="$T/$1/ws" \
        SBX_STOPPED="$T/$1/stopped" SBX_SNAPSHOTS="$T/$1/snapshots" SBX_RECORDS="$T/$1/records"
}
cleanup() {
    local p who id
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    for who in a b h; do
        for id in $(ls "$T/$who/run/sbx" 2>/dev/null); do
            env $(dirs $who) "$SBX" sandbox rm "$id" >/dev/null 2>&1
        done
        ip netns del "sbxn$who-$tag" 2>/dev/null
    done
    ip netns del "$NS_H" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
net=$(( $(od -An -N1 -tu1 /dev/urandom) ))
ip netns add "$NS_H" || exit 1
ip -n "$NS_H" link set lo up
cd "$T" || exit 1
"$SBX" node ca init ca >/dev/null && "$SBX" node cert issue harness --ca ca --harness >/dev/null || exit 1
PORT=$((20000 + RANDOM % 40000))
opts="["
i=0
for who in a b; do
    ns=sbxn$who-$tag addr=10.217.$net.$((i * 4 + 1)) peer=10.217.$net.$((i * 4 + 2))
    { ip netns add "$ns" && ip link add "sbx${who}v$tag" type veth peer name "sbxh${who}$tag" &&
        ip link set "sbx${who}v$tag" netns "$ns" && ip link set "sbxh${who}$tag" netns "$NS_H" &&
        ip -n "$ns" addr add "$addr/30" dev "sbx${who}v$tag" &&
        ip -n "$NS_H" addr add "$peer/30" dev "sbxh${who}$tag" &&
        ip -n "$ns" link set "sbx${who}v$tag" up && ip -n "$NS_H" link set "sbxh${who}$tag" up &&
        ip -n "$ns" link set lo up; } || { echo "bench-node.sh: cannot make the namespaces" >&2; exit 1; }
    "$SBX" node cert issue "node-$who" --ca ca --node --host "$addr" >/dev/null || exit 1
    mkdir -p -m 0700 "$T/$who/run"
    env $(dirs $who) nsenter --net="/run/netns/$ns" "$NODE" --listen "$addr:$PORT" \
        --cert "node-$who.pem" --key "node-$who.key" --ca ca/ca.pem --state "$T/$who/records-node" \
        --name "node-$who" >"node-$who.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do
        nsenter --net="/run/netns/$ns" ss -ltn "sport = :$PORT" | grep -q LISTEN && break
        sleep 0.1
    done
    opts="$opts$([ $i = 1 ] && echo ,){\"node\":\"https://$addr:$PORT\",\"node_ca\":\"$T/ca/ca.pem\",\"node_cert\":\"$T/harness.pem\",\"node_key\":\"$T/harness.key\"}"
    i=$((i + 1))
done
opts="$opts]"
mkdir -p -m 0700 "$T/h/run"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
rc=0
env $(dirs h) SBX_BENCH_NODES="$opts" nsenter --net="/run/netns/$NS_H" "$BENCH" pair "$REPS" "$EXECS" || rc=1
env $(dirs h) SBX_BENCH_NODES="$opts" nsenter --net="/run/netns/$NS_H" "$BENCH" spread "$N" "$THREADS" || rc=1
[ $rc = 0 ] || { echo "# the daemons' logs:"; tail -n 20 node-a.log node-b.log; }
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
