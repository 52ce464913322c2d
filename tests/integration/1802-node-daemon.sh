#!/usr/bin/env bash
# The sbx-node daemon for real across a network: the daemon in a network namespace made here
# ("the compute host", started with nsenter --net=), the harness in another, joined by a veth
# pair with addresses only inside them. The harness is tests/node/client.py, a client of the
# protocol written with Python's standard library from docs/internals/node.md. Checked: mutual
# TLS (a harness certificate opens; a node certificate as a client and a certificate of another
# CA do not), a sandbox made with the local provider, exec with stdout, stderr, stdin and its
# end, and the exit status; the capability token (a wrong one and another sandbox's refused,
# kept nowhere in clear and out of the sandbox), minting only by the owner's certificate,
# listing per owner, the protocol version a request names (Sbx-Node-Version), a daemon killed in the middle of a command (no status for the harness, the
# command ended, the sandbox kept), a restart finding its sandboxes again, and removal. Everything made is removed on exit: the daemon, the sandboxes, both namespaces.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
NODE=${SBX_NODE:-$(dirname "$SBX")/sbx-node}
CLIENT="$SBX_SRCDIR/tests/node/client.py"
. "$SBX_SRCDIR/tests/node/lib.sh"
command -v python3 >/dev/null || skip_all "no 'python3' here"
NODE_B_PID= HOLD=
cleanup() {
    [ -n "$NODE_B_PID" ] && kill "$NODE_B_PID" 2>/dev/null && wait "$NODE_B_PID" 2>/dev/null
    local p
    for p in $HOLD; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
    node_cleanup
    sandbox_cleanup
}
trap cleanup EXIT
node_setup || skip_all "$NODE_WHY"
node_add node-a || skip_all "$NODE_WHY"
cd "$T" || exit 1
{ "$SBX" node cert issue h2 --ca ca --harness && "$SBX" node ca init other &&
    "$SBX" node cert issue stranger --ca other --harness; } >/dev/null 2>certs.err ||
    { not_ok "certificates"; diag "$(cat certs.err)"; done_testing; exit; }
# The daemon node-a (tests/node/lib.sh): its sandboxes under NRUN, its records in node-state.
NS_NODE=${NODE_NS[node-a]} ADDR=${NODE_ADDR[node-a]} PORT=${NODE_PORT[node-a]} net=$NODE_NET
URL=$(node_url node-a)
NRUN=$T/nodes/node-a/run/sbx
ln -s nodes/node-a/records-node node-state
ln -s nodes/node-a/node.log node.log
harness() { # CERT VERB ARGS... (in the harness's namespace)
    local who=$1
    shift
    nsenter --net="/run/netns/$NS_HARN" python3 "$CLIENT" "$URL" ca/ca.pem "$who.pem" "$who.key" "$@"
}
json() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read().split(" ", 1)[1])[sys.argv[1]])' "$1"; }

node_start node-a && ok "the daemon listens in its namespace" || { not_ok "the daemon listens"; diag "$(cat node.log)"; }
harness h1 request GET /v1/node >out 2>err
grep -q '^200 .*"name":"node-a"' out && ok "a harness certificate reaches it from the other namespace" ||
    { not_ok "a harness certificate reaches it"; diag "$(cat out err node.log)"; }
harness node-a request GET /v1/node >out 2>err
[ $? != 0 ] && ! grep -q '^200' out && ok "a node certificate is refused as a client" ||
    { not_ok "a node certificate is refused as a client"; diag "$(cat out err)"; }
harness stranger request GET /v1/node >out 2>err
[ $? != 0 ] && ! grep -q '^200' out && ok "a certificate of another ca is refused" ||
    { not_ok "a certificate of another ca is refused"; diag "$(cat out err)"; }

harness h1 request POST /v1/sandboxes >c1 2>err
ID=$(json id <c1) TOK=$(json token <c1)
if grep -q '^201 ' c1 && [ ${#TOK} = 43 ] && [ -d "$NRUN/$ID" ]; then
    ok "create: a local sandbox on the node, a 43-character token"
else not_ok "create"; diag "$(cat c1 err node.log)"; fi
if [ -s "$T/node-state/$ID.json" ] && ! grep -rq -- "$TOK" "$T/node-state/" "$NRUN/" 2>/dev/null; then
    ok "the token is stored nowhere in clear (the node keeps its hash)"
else not_ok "the token is stored nowhere in clear"; fi

harness h1 exec "$ID" "$TOK" sh -c 'echo out; echo err >&2; exit 7' >out 2>err
[ "$(cat out)" = out ] && grep -qx err err && grep -qx "exit 7" err && ! grep -q '^cause' err &&
    ok "exec: stdout, stderr and exit status 7 over the websocket" ||
    { not_ok "exec: stdout, stderr and exit status"; diag "$(cat out err node.log)"; }
harness h1 exec "$ID" "$TOK" --stdin "line one
line two" sh -c 'wc -l; cat >/dev/null; echo done' >out 2>err
[ "$(tr -d ' ' <out | head -n1)" = 1 ] && grep -qx done out && grep -qx "exit 0" err &&
    ok "exec: stdin reaches the command and its close ends it" ||
    { not_ok "exec: stdin and its close"; diag "$(cat out err node.log)"; }
head -c 3145728 /dev/zero >big.in
harness h1 exec "$ID" "$TOK" --stdin-file big.in wc -c >out 2>err
[ "$(tr -d ' ' <out)" = 3145728 ] && grep -qx "exit 0" err && ok "exec: 3 MiB of stdin arrive whole" ||
    { not_ok "exec: 3 MiB of stdin arrive whole"; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK" --stdin-file big.in sh -c 'echo ignored' >out 2>err
grep -qx ignored out && grep -qx "exit 0" err && ok "exec: stdin a command never reads does not hold the relay" ||
    { not_ok "exec: unread stdin"; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK" --query env=GREETING=hello --query merge=1 sh -c 'echo "$GREETING"; echo to-err >&2' >out 2>err
[ "$(cat out)" = "hello
to-err" ] && grep -qx "exit 0" err && ok "exec: env= and merge= reach the command" ||
    { not_ok "exec: env= and merge="; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK" --query timeout_ms=300 sleep 30 >out 2>err
grep -qx "exit 143" err && grep -qx "cause Signal 15" err && grep -qx "cause TimedOut" err &&
    ok "exec: timeout_ms ends the command (SIGTERM, 128+15; the causes Signal 15 and TimedOut)" ||
    { not_ok "exec: timeout_ms"; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK" sh -c 'kill -KILL $$' >out 2>err
grep -qx "exit 137" err && grep -qx "cause Signal 9" err && ! grep -q "cause TimedOut" err &&
    ok "exec: a command killed by SIGKILL: 128+9 and the cause Signal 9" ||
    { not_ok "exec: a command killed by a signal"; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK" sh -c 'exit 137' >out 2>err
grep -qx "exit 137" err && ! grep -q '^cause' err &&
    ok "exec: an exit with status 137 carries no Signal cause" ||
    { not_ok "exec: an exit with status 137"; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK" --query timeout_ms=300 sh -c 'trap "exit 0" TERM; echo ready; while :; do sleep 0.1; done' >out 2>err
grep -qx ready out && grep -qx "exit 0" err && grep -qx "cause TimedOut" err && ! grep -q "cause Signal" err &&
    ok "exec: a command that exits 0 on its deadline's SIGTERM: a success with the cause TimedOut" ||
    { not_ok "exec: a command that exits 0 on its deadline"; diag "$(cat out err node.log)"; }
# Sbx-Node-Version on requests: this major version (with a minor) is served, another major or
# a value that is no version is refused naming what was sent (an upgrade too, before it runs
# anything); a request without it is served (every request above: older harnesses).
harness h1 send GET /v1/node "" --header "Sbx-Node-Version: 1.4" >out 2>err
grep -q '^200 .*"name":"node-a"' out && grep -qx "sbx-node-version: 1" err &&
    ok "a request naming version 1.4 is served (and the answer names version 1)" ||
    { not_ok "a request naming version 1.4"; diag "$(cat out err)"; }
harness h1 send GET /v1/node "" --header "Sbx-Node-Version: 2" >out 2>err
grep -q '^400 {"code":"inval","message":"the request speaks sbx-node protocol version 2, this node speaks version 1' out &&
    ok "a request naming version 2 is refused (400) naming both versions" ||
    { not_ok "a request naming version 2"; diag "$(cat out err)"; }
harness h1 send GET /v1/node "" --header "Sbx-Node-Version: two" >out 2>err
grep -q "^400 .*header 'sbx-node-version' is 'two', not a version" out &&
    ok "a version that is no number is refused (400) naming it" || { not_ok "a version that is no number"; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK" --header "Sbx-Node-Version: 2" sh -c 'echo ran >ran.txt' >out 2>err
harness h1 exec "$ID" "$TOK" --header "Sbx-Node-Version: 1" cat ran.txt >out2 2>err2
grep -q '^http 400 .*protocol version 2, this node speaks version 1' out && ! grep -q ran out2 &&
    grep -qx "exit 1" err2 && ok "an exec naming version 2 is refused before it runs; one naming 1 runs" ||
    { not_ok "an exec naming version 2"; diag "$(cat out err out2 err2)"; }
harness h1 bighead 20000 >out 2>err
grep -qx 413 out && ok "a request head over 16 KiB is refused (413)" || { not_ok "a request head over 16 KiB"; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK" sh -c 'env; ls -a /' >out 2>err
if grep -qx "exit 0" err && grep -q '^PATH=' out && ! grep -q -- "$TOK" out; then
    ok "the token is not in a command's environment"
else not_ok "the token is not in a command's environment"; diag "$(cat err)"; fi

# Its first character changed (to one it is not: a token may begin with any base64url digit).
wrong=x; [ "${TOK:0:1}" = x ] && wrong=y
harness h1 exec "$ID" "$wrong${TOK:1}" echo no >out 2>err
grep -q '^http 403 .*does not open sandbox' out && ok "a wrong token is refused (403)" ||
    { not_ok "a wrong token is refused"; diag "$(cat out err)"; }
harness h1 request POST /v1/sandboxes >c2 2>err
ID2=$(json id <c2)
harness h1 exec "$ID2" "$TOK" echo no >out 2>err
grep -q "^http 403 .*sandbox '$ID2'" out && ok "the token of one sandbox does not open another" ||
    { not_ok "the token of one sandbox does not open another"; diag "$(cat out err)"; }

harness h2 request GET /v1/sandboxes >out 2>err
grep -q '^200 {"sandboxes":\[\]}' out && ok "another harness lists none of them" || { not_ok "another harness lists none"; diag "$(cat out)"; }
harness h2 request POST "/v1/sandboxes/$ID/token" >out 2>err
grep -q '^403 ' out && ok "another harness cannot mint a token for it" || { not_ok "another harness cannot mint"; diag "$(cat out)"; }
harness h1 request POST "/v1/sandboxes/$ID/token" >t2 2>err
TOK2=$(json token <t2)
[ -n "$TOK2" ] && [ "$TOK2" != "$TOK" ] && ok "the owner mints a new token" || { not_ok "the owner mints a new token"; diag "$(cat t2)"; }
# Every command of a harness mints a token: twenty more minted meanwhile (twenty commands at
# once) leave this one valid.
for i in $(seq 20); do harness h1 request POST "/v1/sandboxes/$ID/token" >/dev/null 2>&1; done
harness h1 exec "$ID" "$TOK2" echo still >out 2>err
grep -qx still out && ok "a token still opens its sandbox after twenty more are minted" ||
    { not_ok "a token still opens its sandbox after twenty more are minted"; diag "$(cat out err)"; }

# The daemon killed in the middle of a command: the harness sees the stream end without a
# status, the command ends with the daemon's connection to its supervisor, the sandbox stays.
mark="sleep 31$net"
harness h1 exec "$ID" "$TOK2" sh -c "echo started; exec $mark" >mid.out 2>mid.err &
CPID=$!
running() { grep -qx started mid.out && pgrep -f "^$mark\$" >/dev/null; }
WAIT_S=20 wait_until running || diag "the command did not start: $(cat mid.out mid.err)"
node_kill node-a
wait "$CPID"
crc=$?
[ "$crc" = 4 ] && grep -qx "exit None" mid.err && ok "a daemon killed mid-command: the harness gets no status" ||
    { not_ok "a daemon killed mid-command: the harness gets no status"; diag "rc $crc: $(cat mid.err)"; }
gone() { ! pgrep -f "^$mark\$" >/dev/null; }
WAIT_S=20 wait_until gone && ok "and the command ends with it" || not_ok "and the command ends with it"
[ -d "$NRUN/$ID" ] && ok "the sandbox outlives the daemon" || not_ok "the sandbox outlives the daemon"
node_start node-a
harness h1 exec "$ID" "$TOK2" echo again >out 2>err
grep -qx again out && grep -q "2 sandboxes known" node.log && ok "a restarted daemon serves it again with the new token" ||
    { not_ok "a restarted daemon serves it again"; diag "$(cat out err node.log)"; }

harness h1 request DELETE "/v1/sandboxes/$ID" "$TOK2" >out 2>err
harness h1 request DELETE "/v1/sandboxes/$ID2" "$(json token <c2)" >>out 2>>err
[ "$(grep -c '^200 {"removed"' out)" = 2 ] && [ ! -e "$NRUN/$ID" ] && [ -z "$(ls node-state)" ] &&
    ok "remove: both sandboxes and their records are gone" || { not_ok "remove"; diag "$(cat out err)"; }
harness h1 exec "$ID" "$TOK2" echo no >out 2>err
grep -q '^http 403' out && ok "a removed sandbox's token opens nothing" || { not_ok "a removed sandbox's token"; diag "$(cat out)"; }

# Create options: the local provider's limits and network, checked on the node.
harness h1 request POST /v1/sandboxes "" '{"options": {"ro": "/etc"}}' >out 2>err
grep -q "^400 .*not 'ro'" out && ok "create options: a host path grant is refused, naming it" ||
    { not_ok "create options: a grant is refused"; diag "$(cat out err)"; }
harness h1 request POST /v1/sandboxes "" '{"options": {"memory": "lots"}}' >out 2>err
grep -q "^400 .*memory" out && ok "create options: a bad memory size is refused, naming it" ||
    { not_ok "create options: a bad memory size"; diag "$(cat out err)"; }
harness h1 request POST /v1/sandboxes "" '{"options": {"network": "full"}}' >out 2>err
grep -q "^403 .*allow-network-full" out && ok "create options: the node's whole network only where the daemon allows it" ||
    { not_ok "create options: network full"; diag "$(cat out err)"; }
[ -z "$(ls node-state)" ] && ok "no refused create left a sandbox or a record" || not_ok "a refused create left a record"
harness h1 request POST /v1/sandboxes "" '{"options": {"memory": 268435456, "pids": 50}}' >c3 2>err
ID3=$(json id <c3) TOK3=$(json token <c3)
harness h1 request GET "/v1/sandboxes/$ID3/stats" "$TOK3" >out 2>err
# (the local provider adds room for its own processes to the pids limit: far below the default)
pl=$(sed -n 's/.*"pids_limit":\([0-9]*\).*/\1/p' out)
grep -q '^200 .*"memory_limit":268435456' out && [ -n "$pl" ] && [ "$pl" -ge 50 ] && [ "$pl" -lt 200 ] &&
    ok "create options: memory and pids limits reach the sandbox (its stats say so)" ||
    { not_ok "create options: limits"; diag "$(cat c3 out err)"; }
harness h1 request DELETE "/v1/sandboxes/$ID3" "$TOK3" >/dev/null 2>&1

# A second daemon with tight bounds: a keep-alive ping every second (lost after 3 s of
# silence), 2 connections at once, 1 per certificate.
PORT_B=$((PORT + 1))
nsenter --net="/run/netns/$NS_NODE" "$NODE" --listen "$ADDR:$PORT_B" --cert node-a.pem --key node-a.key \
    --ca ca/ca.pem --state "$T/node-state-b" --name node-b --ws-ping 1 --max-conns 2 \
    --max-conns-per-cert 1 >>node-b.log 2>&1 &
NODE_B_PID=$!
listening_b() { nsenter --net="/run/netns/$NS_NODE" ss -ltn "sport = :$PORT_B" | grep -q LISTEN; }
WAIT_S=20 wait_until listening_b || diag "node-b does not listen: $(cat node-b.log)"
harness_b() {
    local who=$1; shift
    nsenter --net="/run/netns/$NS_HARN" python3 "$CLIENT" "https://$ADDR:$PORT_B" ca/ca.pem "$who.pem" "$who.key" "$@"
}
harness_b h1 request POST /v1/sandboxes >c4 2>err
harness_b h2 request POST /v1/sandboxes >c5 2>>err
ID4=$(json id <c4) TOK4=$(json token <c4) ID5=$(json id <c5) TOK5=$(json token <c5)
harness_b h1 exec "$ID4" "$TOK4" sh -c 'sleep 4; echo quiet' >out 2>err
grep -qx quiet out && grep -qx "exit 0" err &&
    ok "keep-alive: a quiet command outlives several ping intervals (the harness answers pings)" ||
    { not_ok "keep-alive: a quiet command"; diag "$(cat out err node-b.log)"; }
harness_b h1 exec "$ID4" "$TOK4" --stdin-file big.in sh -c 'sleep 4; echo slept' >out 2>err
grep -qx slept out && grep -qx "exit 0" err &&
    ok "keep-alive: a harness held back by unread stdin is not taken for lost" ||
    { not_ok "keep-alive: unread stdin"; diag "$(cat out err node-b.log)"; }
markb="sleep 33$net"
harness_b h1 exec "$ID4" "$TOK4" sh -c "echo started; exec $markb" >held.out 2>held.err &
J1=$!
runningb() { grep -qx started held.out && pgrep -f "^$markb\$" >/dev/null; }
WAIT_S=20 wait_until runningb || diag "the held command did not start: $(cat held.out held.err)"
harness_b h1 request GET /v1/node >out 2>err
grep -q "^503 .*most connections of one certificate (1)" out && grep -qx "retry-after 1" out &&
    ok "a certificate over its connection bound: 503 with Retry-After" ||
    { not_ok "the per-certificate bound"; diag "$(cat out err)"; }
harness_b h2 exec "$ID5" "$TOK5" sh -c "echo started; exec sleep 34$net" >held2.out 2>held2.err &
J2=$!
running2() { grep -qx started held2.out; }
WAIT_S=20 wait_until running2 || diag "the second held command did not start: $(cat held2.out held2.err)"
harness_b h2 request GET /v1/node >out 2>err
grep -q "^503 .*serves its most connections (2)" out && grep -qx "retry-after 1" out &&
    ok "a full daemon: 503 with Retry-After instead of a closed socket" ||
    { not_ok "a full daemon answers 503"; diag "$(cat out err)"; }
# The harness of the first command stops (SIGSTOP): no pong, no frame: lost, its command ends.
HOLD=$(pgrep -f "client.py.*$markb")
[ -n "$HOLD" ] && kill -STOP $HOLD
goneb() { ! pgrep -f "^$markb\$" >/dev/null; }
WAIT_S=30 wait_until goneb && grep -q "sent nothing for 3 s" node-b.log &&
    ok "keep-alive: a harness that answers nothing is lost and its command ends" ||
    { not_ok "keep-alive: a silent harness is lost"; diag "$(cat node-b.log)"; }
for p in $HOLD; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
HOLD=$(pgrep -f "client.py.*sleep 34$net")
for p in $HOLD; do kill "$p" 2>/dev/null; done
wait "$J1" "$J2" 2>/dev/null
HOLD=
kill "$NODE_B_PID" 2>/dev/null && wait "$NODE_B_PID" 2>/dev/null
NODE_B_PID=

# A revoked harness certificate (--revoked FILE, in the form `openssl x509 -fingerprint -sha256`
# prints), read again when the file changes; a file with a line that is not a fingerprint is
# refused at start, naming the line.
printf '# revoked harnesses\n%s\n' "$(openssl x509 -noout -fingerprint -sha256 -in h2.pem)" >revoked
printf '%s\nnot-a-fingerprint\n' "$(openssl x509 -noout -fingerprint -sha256 -in h2.pem)" >revoked.bad
if nsenter --net="/run/netns/$NS_NODE" "$NODE" --listen "$ADDR:$((PORT + 2))" --cert node-a.pem \
    --key node-a.key --ca ca/ca.pem --state "$T/node-state-c" --revoked revoked.bad >out 2>err; then
    not_ok "a bad --revoked file is refused"
else
    grep -q "revoked 'revoked.bad': line 2 is not a SHA-256 fingerprint" err &&
        ok "a bad --revoked file is refused, naming its line" || { not_ok "bad --revoked"; diag "$(cat err)"; }
fi
PORT_B=$((PORT + 2))
nsenter --net="/run/netns/$NS_NODE" "$NODE" --listen "$ADDR:$PORT_B" --cert node-a.pem --key node-a.key \
    --ca ca/ca.pem --state "$T/node-state-c" --name node-c --revoked revoked >>node-c.log 2>&1 &
NODE_B_PID=$!
WAIT_S=20 wait_until listening_b || diag "node-c does not listen: $(cat node-c.log)"
harness_b h1 request GET /v1/node >out 2>err
grep -q '^200 ' out && ok "--revoked: a harness not listed is served" || { not_ok "--revoked: h1"; diag "$(cat out err)"; }
if harness_b h2 request GET /v1/node >out 2>err || grep -q '^200 ' out; then
    not_ok "--revoked: the listed harness certificate is refused"; diag "$(cat out err)"
else
    ok "--revoked: the listed harness certificate is refused at the handshake"
fi
grep -qi "revoked" err && ok "and the harness is told it is revoked" || { not_ok "told revoked"; diag "$(cat err)"; }
echo "# nothing revoked now" >revoked
harness_b h2 request GET /v1/node >out 2>err
grep -q '^200 ' out && ok "--revoked is read again when the file changes: h2 is served again" ||
    { not_ok "--revoked re-read"; diag "$(cat out err node-c.log)"; }
kill "$NODE_B_PID" 2>/dev/null && wait "$NODE_B_PID" 2>/dev/null
NODE_B_PID=
# Their sandboxes go with the test's cleanup (sandbox_cleanup removes every local sandbox).
done_testing
