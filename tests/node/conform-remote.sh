#!/usr/bin/env bash
# The provider conformance suite (tests/conformance/test-provider.c, given as $1) against the
# remote provider on two nodes at once: two sbx-node daemons, each in a network namespace made
# here ("compute hosts", started with nsenter --net=, their sandboxes in folders of their own),
# and the suite run against each of them at the same time from a third namespace ("the
# harness"), mutual TLS with certificates made by `sbx node` (tests/node/lib.sh). Prints one
# TAP stream: the two runs' checks, numbered in turn, each named with its node. Removes the
# daemons, their sandboxes and the namespaces on exit. Needs root; skips without it or without
# ip/nsenter.
set -u
PROG=$1
BUILD=$(dirname "$SBX_SUPERVISOR")
SBX=${SBX:-$BUILD/sbx}
NODE=$BUILD/sbx-node
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-conform-remote.XXXXXX")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
trap 'node_cleanup; rm -rf "$T"' EXIT
skip() { echo "1..0 # SKIP $*"; exit 0; }
node_setup || skip "$NODE_WHY"
node_add a && node_add b || skip "$NODE_WHY"
cd "$T" || exit 1
# Daemon b's tokens live 4 s: the suite's one session outlives many of them and must renew its
# token whenever the node refuses it, on every kind of request (exec, files, ports, stats, logs,
# removal); before the files case the suite waits past a token's life, so that its first
# request, a 5 MiB upload, is refused and sent again whole. On daemon a (tokens of an hour) the
# session's token is dropped instead, after the streams case, by seventy tokens minted behind
# its back (the node keeps 64).
node_start a || { echo "Bail out! daemon a does not listen: $(tail -n1 "nodes/a/node.log")"; exit 1; }
node_start b --token-ttl 4 ||
    { echo "Bail out! daemon b does not listen: $(tail -n1 "nodes/b/node.log")"; exit 1; }
# One harness process per node, both at once; each with sbx state of its own.
suite() {
    local n=$1 h=$T/harness-$1
    mkdir -p -m 0700 "$h/run"
    local hook="sleep 5" after=pty
    [ "$n" = a ] && after=streams hook="python3 '$HERE/client.py' '$(node_url a)' '$T/ca/ca.pem' \
        '$T/h1.pem' '$T/h1.key' mint \"\$1\" 70"
    SBX_CONFORM_HOOK=$hook SBX_CONFORM_HOOK_AFTER=$after SBX_CONFORM_PROVIDER=remote \
        SBX_CONFORM_OPTIONS="{\"node\":\"$(node_url "$n")\",\"node_ca\":\"$T/ca/ca.pem\",\"node_cert\":\"$T/h1.pem\",\"node_key\":\"$T/h1.key\"}" \
        XDG_STATE_HOME=$h/state XDG_RUNTIME_DIR=$h/run SBX_WORKSPACES=$h/ws SBX_STOPPED=$h/stopped \
        SBX_SNAPSHOTS=$h/snapshots SBX_RECORDS=$h/records node_h "$PROG" >"$T/tap-$n" 2>&1
    echo $? >"$T/rc-$n"
}
suite a &
SA=$!
suite b &
SB=$!
wait "$SA" "$SB"
# The two streams as one: plans summed, checks renumbered and named with their node.
awk -v a="$T/tap-a" -v b="$T/tap-b" '
    function plan(f,   l, n) { n = 0; while ((getline l < f) > 0) if (l ~ /^1\.\.[0-9]+/) n = substr(l, 4) + 0; close(f); return n }
    function copy(f, name,   l, rest) {
        while ((getline l < f) > 0) {
            if (l ~ /^1\.\.[0-9]+/) continue
            if (match(l, /^(not )?ok [0-9]+/)) {
                rest = substr(l, RLENGTH + 1)
                sub(/^ *-? */, "", rest)
                k++
                print (l ~ /^not / ? "not ok " : "ok ") k " - node " name ": " rest
            } else print l
        }
        close(f)
    }
    BEGIN { print "1.." plan(a) + plan(b); k = 0; copy(a, "a"); copy(b, "b") }'
rc=0
for n in a b; do
    [ "$(cat "$T/rc-$n")" = 0 ] && continue
    rc=1
    echo "# node $n: the suite failed; its daemon's log:"
    sed 's/^/#   /' "nodes/$n/node.log"
done
exit $rc
