#!/usr/bin/env bash
# The provider conformance suite (tests/conformance/test-provider.c, given as $1) against the
# remote provider: an sbx-node daemon in a network namespace made here ("the compute host",
# started with nsenter --net=, its sandboxes in folders of its own), the suite in another
# namespace ("the harness"), joined by a veth pair, mutual TLS with certificates made by
# `sbx node` here. Prints the suite's TAP; removes the daemon, its sandboxes and both
# namespaces on exit. Needs root; skips without it or without ip/nsenter.
set -u
PROG=$1
BUILD=$(dirname "$SBX_SUPERVISOR")
SBX=${SBX:-$BUILD/sbx}
NODE=$BUILD/sbx-node
skip() { echo "1..0 # SKIP $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
for p in ip nsenter ss; do command -v "$p" >/dev/null || skip "no '$p' here"; done
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-conform-remote.XXXXXX")
tag=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
NS_NODE=sbxn-$tag NS_HARN=sbxh-$tag NODE_PID=
# env execs the program: a daemon started through it in the background is that process, so
# its PID is the daemon's (a shell function would leave a subshell between them).
node_env() {
    env XDG_STATE_HOME="$T/node/state" XDG_RUNTIME_DIR="$T/node/run" SBX_WORKSPACES="$T/node/ws" \
        SBX_STOPPED="$T/node/stopped" SBX_SNAPSHOTS="$T/node/snapshots" \
        SBX_RECORDS="$T/node/records" "$@"
}
cleanup() {
    [ -n "$NODE_PID" ] && kill "$NODE_PID" 2>/dev/null && wait "$NODE_PID" 2>/dev/null
    local id
    for id in $(ls "$T/node/run/sbx" 2>/dev/null); do node_env "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    ip netns del "$NS_NODE" 2>/dev/null
    ip netns del "$NS_HARN" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
net=$(( $(od -An -N1 -tu1 /dev/urandom) ))
ADDR=10.215.$net.1
{ ip netns add "$NS_NODE" && ip netns add "$NS_HARN" &&
    ip link add "sbxnv$tag" type veth peer name "sbxhv$tag" &&
    ip link set "sbxnv$tag" netns "$NS_NODE" && ip link set "sbxhv$tag" netns "$NS_HARN" &&
    ip -n "$NS_NODE" addr add "$ADDR/30" dev "sbxnv$tag" &&
    ip -n "$NS_HARN" addr add "10.215.$net.2/30" dev "sbxhv$tag" &&
    ip -n "$NS_NODE" link set "sbxnv$tag" up && ip -n "$NS_HARN" link set "sbxhv$tag" up &&
    ip -n "$NS_NODE" link set lo up && ip -n "$NS_HARN" link set lo up; } 2>"$T/ip.err" ||
    skip "cannot make network namespaces and a veth pair here: $(head -n1 "$T/ip.err")"
mkdir -p -m 0700 "$T/node/run" "$T/harness/run"
cd "$T" || exit 1
{ "$SBX" node ca init ca && "$SBX" node cert issue node-a --ca ca --node --host "$ADDR" &&
    "$SBX" node cert issue harness --ca ca --harness; } >/dev/null 2>certs.err ||
    { echo "Bail out! cannot make the certificates: $(head -n1 certs.err)"; exit 1; }
PORT=$((20000 + RANDOM % 40000))
env XDG_STATE_HOME="$T/node/state" XDG_RUNTIME_DIR="$T/node/run" SBX_WORKSPACES="$T/node/ws" \
    SBX_STOPPED="$T/node/stopped" SBX_SNAPSHOTS="$T/node/snapshots" SBX_RECORDS="$T/node/records" \
    nsenter --net="/run/netns/$NS_NODE" "$NODE" --listen "$ADDR:$PORT" --cert node-a.pem \
    --key node-a.key --ca ca/ca.pem --state "$T/node/records-node" --name node-a >node.log 2>&1 &
NODE_PID=$!
for _ in $(seq 100); do
    nsenter --net="/run/netns/$NS_NODE" ss -ltn "sport = :$PORT" | grep -q LISTEN && break
    sleep 0.1
done
export SBX_CONFORM_PROVIDER=remote
export SBX_CONFORM_OPTIONS="{\"node\":\"https://$ADDR:$PORT\",\"node_ca\":\"$T/ca/ca.pem\",\"node_cert\":\"$T/harness.pem\",\"node_key\":\"$T/harness.key\"}"
XDG_STATE_HOME=$T/harness/state XDG_RUNTIME_DIR=$T/harness/run SBX_WORKSPACES=$T/harness/ws \
    SBX_STOPPED=$T/harness/stopped SBX_SNAPSHOTS=$T/harness/snapshots SBX_RECORDS=$T/harness/records \
    nsenter --net="/run/netns/$NS_HARN" "$PROG"
rc=$?
[ $rc = 0 ] || { echo "# the daemon's log:"; sed 's/^/#   /' node.log; }
exit $rc
