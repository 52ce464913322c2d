#!/usr/bin/env bash
# Faults between a harness and two sbx-node daemons, each daemon in a network namespace of its
# own and the harness (the sbx CLI) in a third, joined by veth pairs (tests/node/lib.sh):
# - a daemon killed in the middle of an exec: the CLI says the node was lost, the other node's
#   command goes on, the restarted daemon finds the sandbox;
# - the link cut in the middle of an exec: the CLI ends by itself with an error that says the
#   node went silent (the harness's keep-alive), and once the link is back a new exec on the
#   same sandbox works and the old command is gone;
# - expired certificates, the harness's and the node's, refused with an error saying "expired";
# - certificates of another CA, the harness's and the node's;
# - the token of one sandbox used on another (403; the other untouched);
# - a harness SIGKILLed with sandboxes on both nodes, and a new harness process resuming both
#   from their saved session states.
# Everything made is removed on exit: daemons, sandboxes, namespaces, veth pairs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
NODE=${SBX_NODE:-$(dirname "$SBX")/sbx-node}
CLIENT="$SBX_SRCDIR/tests/node/client.py"
. "$SBX_SRCDIR/tests/node/lib.sh"
command -v openssl >/dev/null || skip_all "no 'openssl' here"
command -v python3 >/dev/null || skip_all "no 'python3' here"
trap 'node_cleanup; sandbox_cleanup' EXIT
node_setup || skip_all "$NODE_WHY"
node_add a && node_add b || skip_all "$NODE_WHY"
cd "$T" || exit 1
node_start a && node_start b && ok "two daemons listen, each in its own namespace" ||
    { not_ok "two daemons listen"; diag "$(cat nodes/*/node.log)"; done_testing; exit; }
node_flags a
RA=("${R[@]}")
node_flags b
RB=("${R[@]}")
h() { node_h "$SBX" "$@"; }

h sandbox create --provider remote "${RA[@]}" >ida 2>err && h sandbox create --provider remote "${RB[@]}" >idb 2>>err
A=$(tail -n1 ida) B=$(tail -n1 idb)
[ -n "$A" ] && [ -n "$B" ] && node_live a | grep -qx "$A" && node_live b | grep -qx "$B" &&
    ok "one sandbox on each node" || { not_ok "one sandbox on each node"; diag "$(cat ida idb err)"; }

# --- the link cut in the middle of a command -------------------------------------------------
# Meanwhile a command on node b stays silent for longer than the keep-alive's bound: the node's
# answers to the pings keep it.
h sandbox exec "${RB[@]}" "$B" -- sh -c 'sleep 40; echo slept' >quiet.out 2>quiet.err &
QPID=$!
mark="sleep 33$NODE_NET"
h sandbox exec "${RA[@]}" "$A" -- sh -c "echo started; exec $mark" >cut.out 2>cut.err &
CPID=$!
started() { grep -qx started cut.out; }
WAIT_S=30 wait_until started || diag "the command did not start: $(cat cut.err)"
node_link a down
ended() { ! kill -0 "$CPID" 2>/dev/null; }
# The keep-alive gives up after 30 s of silence; the bound here is a safety net.
if WAIT_S=120 wait_until ended; then
    wait "$CPID"
    rc=$?
    [ $rc != 0 ] && grep -q "connection to the node was lost while" cut.err &&
        grep -q "sent nothing for .* not even an answer to a ping" cut.err &&
        ok "a cut link: the exec ends by itself, the node taken as lost after its silence" ||
        { not_ok "a cut link: the exec's error"; diag "rc $rc: $(cat cut.err)"; }
else
    not_ok "a cut link: the exec ends by itself (it still waits)"
    kill "$CPID" 2>/dev/null
fi
node_link a up
h sandbox exec "${RA[@]}" "$A" -- echo after >out 2>err
grep -qx after out && ok "the link back: a new exec on the same sandbox works" ||
    { not_ok "the link back: a new exec works"; diag "$(cat out err)"; }
gone() { ! pgrep -f "^$mark\$" >/dev/null; }
WAIT_S=120 wait_until gone && ok "and the command of the lost exec ended on the node" ||
    not_ok "the command of the lost exec ended on the node"
wait "$QPID"
rc=$?
[ $rc = 0 ] && grep -qx slept quiet.out && ok "a command silent for 40 s on the other node lives on the node's pongs" ||
    { not_ok "a silent command lives on the pongs"; diag "rc $rc: $(cat quiet.out quiet.err)"; }

# --- a daemon killed in the middle of a command, the other node's command going on -------------
mark="sleep 36$NODE_NET"
h sandbox exec "${RA[@]}" "$A" -- sh -c "echo started; exec $mark" >ka.out 2>ka.err &
KA=$!
mkfifo kb.in.fifo
h sandbox exec -i "${RB[@]}" "$B" -- sh -c 'echo started; read line; echo "b got $line"' >kb.out 2>kb.err <kb.in.fifo &
KB=$!
exec 7>kb.in.fifo
both() { grep -qx started ka.out && grep -qx started kb.out; }
WAIT_S=30 wait_until both || diag "the commands did not start: $(cat ka.err kb.err)"
node_kill a KILL
wait "$KA"
rc=$?
[ $rc != 0 ] && grep -q "connection to the node was lost while" ka.err &&
    ok "daemon a killed mid-exec: the CLI fails saying the connection to the node was lost" ||
    { not_ok "daemon a killed mid-exec: the CLI's error"; diag "rc $rc: $(cat ka.out ka.err)"; }
echo hello >&7
exec 7>&-
wait "$KB"
rc=$?
[ $rc = 0 ] && grep -qx "b got hello" kb.out && ok "node b's command went on and ended normally" ||
    { not_ok "node b's command went on"; diag "rc $rc: $(cat kb.out kb.err)"; }
gone() { ! pgrep -f "^$mark\$" >/dev/null; }
WAIT_S=60 wait_until gone && ok "the command of the killed daemon's exec ended" || not_ok "the command of the killed daemon's exec ended"
node_start a || { not_ok "daemon a restarts"; diag "$(cat nodes/a/node.log)"; }
h sandbox exec "${RA[@]}" "$A" -- echo back >out 2>err
grep -qx back out && grep -q "(1 sandboxes known)" nodes/a/node.log && ok "the restarted daemon found the sandbox and it works" ||
    { not_ok "the restarted daemon found the sandbox"; diag "$(cat out err nodes/a/node.log)"; }

# --- certificates ----------------------------------------------------------------------------
# issue NAME OU EKU [SAN]: a certificate of the test CA that expired yesterday, signed by the
# openssl CLI with the CA's key.
issue_expired() {
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" \
        -subj "/O=sbx-node/OU=$2/CN=$1" -out "$1.csr" 2>/dev/null &&
        printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n%s' \
            "$3" "${4:+subjectAltName=$4
}" >"$1.ext" &&
        openssl x509 -req -in "$1.csr" -CA ca/ca.pem -CAkey ca/ca.key -CAcreateserial -days -1 \
            -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
issue_expired old-h harness clientAuth || not_ok "openssl issues an expired harness certificate"
h sandbox exec --node "$(node_url a)" --node-ca "$T/ca/ca.pem" --node-cert "$T/old-h.pem" --node-key "$T/old-h.key" \
    "$A" -- echo no >out 2>err
rc=$?
[ $rc != 0 ] && grep -qi "expired" err && ! grep -qx no out &&
    ok "an expired harness certificate is refused, the error says expired" ||
    { not_ok "an expired harness certificate"; diag "rc $rc: $(cat out err)"; }
"$SBX" node ca init other >/dev/null 2>&1 && (cd "$T" && "$SBX" node cert issue stranger --ca other --harness) >/dev/null 2>&1
h sandbox exec --node "$(node_url a)" --node-ca "$T/ca/ca.pem" --node-cert "$T/stranger.pem" --node-key "$T/stranger.key" \
    "$A" -- echo no >out 2>err
rc=$?
[ $rc != 0 ] && ! grep -qx no out && [ -s err ] && ok "a harness certificate of another ca is refused" ||
    { not_ok "a harness certificate of another ca"; diag "rc $rc: $(cat out err)"; }
diag "its error: $(head -n1 err)"
h sandbox exec --node "$(node_url a)" --node-ca "$T/other/ca.pem" --node-cert "$T/h1.pem" --node-key "$T/h1.key" \
    "$A" -- echo no >out 2>err
rc=$?
[ $rc != 0 ] && ! grep -qx no out && grep -qi "certificate" err && ok "a node whose certificate is of another ca is refused" ||
    { not_ok "a node of another ca"; diag "rc $rc: $(cat out err)"; }
diag "its error: $(head -n1 err)"
# The node with an expired certificate of its own: daemon b restarted with it.
issue_expired old-b node serverAuth "IP:${NODE_ADDR[b]}" || not_ok "openssl issues an expired node certificate"
node_kill b TERM
cp b.pem b.pem.good && cp old-b.pem b.pem && cp old-b.key b.key.old && cp b.key b.key.good && cp old-b.key b.key
if node_start b; then
    h sandbox exec "${RB[@]}" "$B" -- echo no >out 2>err
    rc=$?
    [ $rc != 0 ] && grep -qi "expired" err && ! grep -qx no out &&
        ok "a node with an expired certificate is refused, the error says expired" ||
        { not_ok "a node with an expired certificate"; diag "rc $rc: $(cat out err)"; }
else
    ok "a node with an expired certificate is refused (it does not start with it: $(tail -n1 nodes/b/node.log))"
fi
node_kill b TERM
cp b.pem.good b.pem && cp b.key.good b.key
node_start b || { not_ok "daemon b restarts with its good certificate"; diag "$(cat nodes/b/node.log)"; }

# --- a token for another sandbox -------------------------------------------------------------
h sandbox create --provider remote "${RA[@]}" >idc 2>err
C=$(tail -n1 idc)
json() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read().split(" ", 1)[1])[sys.argv[1]])' "$1"; }
client() { # NODE VERB ARGS...
    local n=$1
    shift
    node_h python3 "$CLIENT" "$(node_url "$n")" ca/ca.pem h1.pem h1.key "$@"
}
client a request POST "/v1/sandboxes/$A/token" >ta 2>err
TA=$(json token <ta 2>/dev/null)
client a exec "$C" "$TA" sh -c 'echo intruder >/tmp/mark-of-a' >out 2>err
grep -q "^http 403 .*sandbox '$C'" out && ok "sandbox A's token on sandbox C of the same node: 403" ||
    { not_ok "A's token on C"; diag "$(cat ta out err)"; }
client b exec "$B" "$TA" sh -c 'echo intruder >/tmp/mark-of-a' >out 2>err
grep -q "^http 403" out && ok "sandbox A's token on node b's sandbox B: 403" || { not_ok "A's token on B"; diag "$(cat out err)"; }
h sandbox exec "${RA[@]}" "$C" -- sh -c 'test ! -e /tmp/mark-of-a && echo untouched' >out 2>err
h sandbox exec "${RB[@]}" "$B" -- sh -c 'test ! -e /tmp/mark-of-a && echo untouched' >>out 2>>err
[ "$(grep -cx untouched out)" = 2 ] && ok "and neither was touched" || { not_ok "neither was touched"; diag "$(cat out err)"; }

# --- a harness killed, a new one resuming from saved states ----------------------------------
h sandbox exec "${RA[@]}" "$A" -- sh -c 'echo from-a >kept.txt' 2>err &&
    h sandbox exec "${RB[@]}" "$B" -- sh -c 'echo from-b >kept.txt' 2>>err &&
    h sandbox state --no-snapshot "$A" >a.state 2>>err && h sandbox state --no-snapshot "$B" >b.state 2>>err &&
    ok "session states of both saved" || { not_ok "session states of both saved"; diag "$(cat err)"; }
h sandbox exec "${RA[@]}" "$A" -- sh -c "echo started; exec sleep 34$NODE_NET" >ka.out 2>&1 &
KA=$!
h sandbox exec "${RB[@]}" "$B" -- sh -c "echo started; exec sleep 34$NODE_NET" >kb.out 2>&1 &
KB=$!
both() { grep -qx started ka.out && grep -qx started kb.out; }
WAIT_S=30 wait_until both || diag "the harness's commands did not start: $(cat ka.out kb.out)"
kill -9 "$KA" "$KB" 2>/dev/null
wait "$KA" "$KB" 2>/dev/null
# The new harness keeps its state elsewhere: it has none of the first one's records, only the
# saved session states (a harness restarted on another machine).
mkdir -p -m 0700 h2/run
h2() { node_h env XDG_STATE_HOME="$T/h2/state" XDG_RUNTIME_DIR="$T/h2/run" SBX_RECORDS="$T/h2/records" "$SBX" "$@"; }
h2 sandbox resume "${RA[@]}" a.state >ra 2>err && h2 sandbox resume "${RB[@]}" b.state >rb 2>>err
rc=$?
[ $rc = 0 ] && [ "$(tail -n1 ra)" = "$A" ] && [ "$(tail -n1 rb)" = "$B" ] &&
    ok "a new harness process resumes both from their states" || { not_ok "resume both"; diag "rc $rc: $(cat ra rb err)"; }
h2 sandbox exec "${RA[@]}" "$A" -- cat kept.txt >out 2>err && h2 sandbox exec "${RB[@]}" "$B" -- cat kept.txt >>out 2>>err
[ "$(cat out)" = "from-a
from-b" ] && ok "and uses both: their files are there" || { not_ok "uses both"; diag "$(cat out err)"; }
rm -rf h2/records
h2 sandbox ls "${RA[@]}" >la 2>err
h2 sandbox ls "${RB[@]}" >lb 2>>err
grep -q "^$A  *remote  *live" la && grep -q "^$C  *remote  *live" la && grep -q "^$B  *remote  *live" lb &&
    ! grep -q "^$B" la && ok "without any record, ls --node lists that node's sandboxes" ||
    { not_ok "ls --node without records"; diag "$(cat la lb err)"; }
# With a kubernetes cluster configured too (a kubeconfig of its own here), whose provider reads
# --node as its node mode: it steps aside for the remote provider.
cat >kubeconfig <<'EOF'
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]
current-context: x
users: [{name: u, user: {token: t}}]
EOF
KUBECONFIG=$PWD/kubeconfig h2 sandbox exec "${RB[@]}" "$B" -- cat kept.txt >out 2>err
grep -qx from-b out && ok "and exec --node finds a sandbox by its id alone (a kubernetes cluster configured too)" ||
    { not_ok "exec --node without a record"; diag "$(cat out err)"; }
# The first harness's records name both nodes: listing through one node forgets none of them.
h sandbox ls "${RB[@]}" >/dev/null 2>&1
h sandbox ls "${RA[@]}" >la 2>err
h sandbox ls "${RB[@]}" >lb 2>>err
grep -q "^$A  *remote  *live" la && grep -q "^$B  *remote  *live" lb && [ -s "$SBX_RECORDS/$A.json" ] &&
    ok "ls through one node keeps the records of the other's sandboxes" || { not_ok "ls through each node"; diag "$(cat la lb err; ls "$SBX_RECORDS")"; }
h sandbox exec "${RB[@]}" "$A" -- true >out 2>err
[ -s "$SBX_RECORDS/$A.json" ] && ok "an exec pointed at the wrong node keeps the record" ||
    { not_ok "an exec pointed at the wrong node keeps the record"; diag "$(cat err)"; }

# --- nothing left ----------------------------------------------------------------------------
h sandbox rm "${RA[@]}" "$A" "$C" >out 2>err && h sandbox rm "${RB[@]}" "$B" >>out 2>>err
rc=$?
[ $rc = 0 ] && [ -z "$(node_live a)" ] && [ -z "$(node_live b)" ] && [ -z "$(find nodes/a/records-node nodes/b/records-node -type f)" ] &&
    ok "rm: no sandbox and no record left on either node" || { not_ok "rm leaves nothing"; diag "rc $rc: $(cat out err)" "live: $(node_live a) $(node_live b)" "records: $(ls nodes/a/records-node nodes/b/records-node)"; }
sups() { pgrep -f -- "__supervise ($A|$B|$C)" >/dev/null; }
nosups() { ! sups; }
WAIT_S=30 wait_until nosups && ok "and no supervisor of theirs runs" || not_ok "no supervisor left"
node_cleanup
left=$(ip netns list | grep -c -- "$NODE_TAG"; ip -o link | grep -c -- "$NODE_TAG")
[ "$(echo $left)" = "0 0" ] && ok "no namespace or veth of this test is left" || { not_ok "namespaces left"; diag "$left"; }
done_testing
