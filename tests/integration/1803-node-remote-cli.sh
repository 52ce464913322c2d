#!/usr/bin/env bash
# The remote provider through the CLI: `sbx sandbox create --provider remote --node URL ...` in
# a harness network namespace, an sbx-node daemon in another (made here, joined by a veth
# pair, the daemon's sandboxes in folders of its own). Create with a manifest (materialised
# from the harness, its environment kept on the node), exec with the exit status (a signal's
# and a timeout's as a local sandbox's, compared with one made here), cp both ways,
# ls, a port of the sandbox served to the harness's namespace (`sbx sandbox port`: a relay on
# 127.0.0.1 there, portforward.k8s.io over the daemon), stats, logs, stop and start, then the
# daemon killed in the middle of an exec (the CLI says the node was lost and fails),
# a restarted daemon, rm, and a node of another protocol version (tests/node/other-version.py)
# refused by name. The daemon, its sandboxes and both namespaces are removed on exit.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
NODE=${SBX_NODE:-$(dirname "$SBX")/sbx-node}
[ "$(id -u)" = 0 ] || skip_all "network namespaces need root"
for p in ip nsenter ss; do command -v "$p" >/dev/null || skip_all "no '$p' here"; done
[ -x "$NODE" ] || skip_all "no sbx-node program next to '$SBX'"
tag=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
NS_NODE=sbxn-$tag NS_HARN=sbxh-$tag NODE_PID=
NODE_ENV=(XDG_STATE_HOME="$T/node/state" XDG_RUNTIME_DIR="$T/node/run" SBX_WORKSPACES="$T/node/ws"
    SBX_STOPPED="$T/node/stopped" SBX_SNAPSHOTS="$T/node/snapshots" SBX_RECORDS="$T/node/records")
OTHER_PID=
cleanup() {
    [ -n "$NODE_PID" ] && kill "$NODE_PID" 2>/dev/null && wait "$NODE_PID" 2>/dev/null
    [ -n "$OTHER_PID" ] && kill "$OTHER_PID" 2>/dev/null && wait "$OTHER_PID" 2>/dev/null
    local id rec
    # Port relays left by a failed check (each record holds its relay's pid first).
    for rec in "$RUNBASE"/remote/*/ports/*; do
        [ -f "$rec" ] && kill "$(cut -d' ' -f1 "$rec")" 2>/dev/null
    done
    for id in $(ls "$T/node/run/sbx" 2>/dev/null); do env "${NODE_ENV[@]}" "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    ip netns del "$NS_NODE" 2>/dev/null
    ip netns del "$NS_HARN" 2>/dev/null
    sandbox_cleanup
}
trap cleanup EXIT
net=$(( $(od -An -N1 -tu1 /dev/urandom) ))
ADDR=10.216.$net.1
{ ip netns add "$NS_NODE" && ip netns add "$NS_HARN" &&
    ip link add "sbxnv$tag" type veth peer name "sbxhv$tag" &&
    ip link set "sbxnv$tag" netns "$NS_NODE" && ip link set "sbxhv$tag" netns "$NS_HARN" &&
    ip -n "$NS_NODE" addr add "$ADDR/30" dev "sbxnv$tag" &&
    ip -n "$NS_HARN" addr add "10.216.$net.2/30" dev "sbxhv$tag" &&
    ip -n "$NS_NODE" link set "sbxnv$tag" up && ip -n "$NS_HARN" link set "sbxhv$tag" up &&
    ip -n "$NS_NODE" link set lo up && ip -n "$NS_HARN" link set lo up; } 2>"$T/ip.err" ||
    skip_all "cannot make network namespaces and a veth pair here: $(head -n1 "$T/ip.err")"
mkdir -p -m 0700 "$T/node/run"
cd "$T" || exit 1
{ "$SBX" node ca init ca && "$SBX" node cert issue node-a --ca ca --node --host "$ADDR" &&
    "$SBX" node cert issue h1 --ca ca --harness; } >/dev/null 2>certs.err ||
    { not_ok "certificates"; diag "$(cat certs.err)"; done_testing; exit; }
PORT=$((20000 + RANDOM % 40000))
start_node() {
    env "${NODE_ENV[@]}" nsenter --net="/run/netns/$NS_NODE" "$NODE" --listen "$ADDR:$PORT" \
        --cert node-a.pem --key node-a.key --ca ca/ca.pem --state "$T/node/records-node" \
        --ws-ping 1 >>node.log 2>&1 &
    NODE_PID=$!
    listening() { nsenter --net="/run/netns/$NS_NODE" ss -ltn "sport = :$PORT" | grep -q LISTEN; }
    WAIT_S=20 wait_until listening
}
R=(--node "https://$ADDR:$PORT" --node-ca "$T/ca/ca.pem" --node-cert "$T/h1.pem" --node-key "$T/h1.key")
h() { nsenter --net="/run/netns/$NS_HARN" "$SBX" "$@"; }
start_node || { not_ok "the daemon listens"; diag "$(cat node.log)"; }

cat >m.json <<'JSON'
{"environment": {"GREETING": "hello from the harness"},
 "entries": {"notes": {"type": "dir", "children": {"a.txt": {"type": "file", "content": "made by the manifest\n"}}}}}
JSON
h sandbox create --provider remote "${R[@]}" --memory 300M --manifest m.json >id 2>err
ID=$(tail -n1 id)
[ -n "$ID" ] && [ -d "$T/node/run/sbx/$ID" ] && ok "create --provider remote: a sandbox on the node" ||
    { not_ok "create --provider remote"; diag "$(cat id err node.log)"; }
h sandbox exec "${R[@]}" "$ID" -- sh -c 'cat notes/a.txt; echo "$GREETING"; exit 4' >out 2>err
rc=$?
[ $rc = 4 ] && [ "$(cat out)" = "made by the manifest
hello from the harness" ] && ok "exec: the manifest's file and environment, exit status 4" ||
    { not_ok "exec: the manifest's file and environment"; diag "rc $rc: $(cat out err)"; }
# A command killed by a signal, or by --timeout, ends `sbx sandbox exec` as it does with a
# local sandbox (128+N; 124 and "timed out"): the node's status names the signal and the
# deadline beside the exit code. Streamed and --max-output (one result) both.
LOCAL=$("$SBX" sandbox create 2>lerr | tail -n1)
[ -n "$LOCAL" ] || diag "a local sandbox to compare with: $(cat lerr)"
same_end() { # NAME EXEC-ARGS... : the same status and stderr from both sandboxes
    local name=$1 lrc rrc
    shift
    "$SBX" sandbox exec "$@" "$LOCAL" -- "${CMD[@]}" >l.out 2>l.err
    lrc=$?
    h sandbox exec "${R[@]}" "$@" "$ID" -- "${CMD[@]}" >r.out 2>r.err
    rrc=$?
    sed -i "s/$LOCAL/ID/" l.err
    sed -i "s/$ID/ID/" r.err
    [ -n "$LOCAL" ] && [ $lrc = "$WANT" ] && [ $rrc = $lrc ] && cmp -s l.err r.err && cmp -s l.out r.out &&
        ok "$name: status $WANT and the same stderr as a local sandbox's" ||
        { not_ok "$name"; diag "local $lrc: $(cat l.out l.err); remote $rrc: $(cat r.out r.err)"; }
}
CMD=(sh -c 'kill -KILL $$')
WANT=137 same_end "exec of a command killed by SIGKILL"
CMD=(sh -c 'kill -TERM $$')
WANT=143 same_end "exec --max-output of a command killed by SIGTERM" --max-output 4096
CMD=(sleep 30)
WANT=124 same_end "exec --timeout" --timeout 1
CMD=(sleep 30)
WANT=124 same_end "exec --timeout --max-output" --timeout 1 --max-output 4096
CMD=(sh -c 'exit 137')
WANT=137 same_end "exec of a command exiting 137 (no signal)"
[ -n "$LOCAL" ] && "$SBX" sandbox rm "$LOCAL" >/dev/null 2>&1
# The daemon pings every second and takes 3 s of silence for a lost harness: the remote
# provider's connections answer pings, so quiet commands and relays live on.
h sandbox exec "${R[@]}" "$ID" -- sh -c 'sleep 4; echo still here' >out 2>err
[ "$(cat out)" = "still here" ] && ok "a quiet command outlives the daemon's keep-alive intervals" ||
    { not_ok "a quiet command and the keep-alive"; diag "$(cat out err node.log)"; }
echo "from the harness" >up.txt
h sandbox cp "${R[@]}" up.txt "$ID:up.txt" 2>err && h sandbox cp "${R[@]}" "$ID:up.txt" down.txt 2>>err &&
    cmp -s up.txt down.txt && ok "cp both ways" || { not_ok "cp both ways"; diag "$(cat err)"; }
h sandbox ls "${R[@]}" >out 2>err
grep -q "^$ID  *remote  *live" out && ok "ls lists it as a remote sandbox" || { not_ok "ls"; diag "$(cat out err)"; }

h sandbox port "${R[@]}" "$ID" 8731 >out 2>err
[ $? != 0 ] && grep -q "nothing listens on port 8731" err && ok "port: nothing listens there, said clearly" ||
    { not_ok "port: nothing listens"; diag "$(cat out err)"; }
echo "served from the node" >page.txt
{ h sandbox exec "${R[@]}" "$ID" -- mkdir www && h sandbox cp "${R[@]}" page.txt "$ID:www/page.txt"; } 2>err ||
    diag "$(cat err)"
h sandbox exec "${R[@]}" "$ID" -- python3 -m http.server 8731 --bind 127.0.0.1 --directory www \
    >srv.out 2>srv.err &
SRV=$!
serving() { h sandbox exec "${R[@]}" "$ID" -- python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8731))' 2>/dev/null; }
WAIT_S=20 wait_until serving
h sandbox port "${R[@]}" "$ID" 8731 >url 2>err
URL=$(cat url)
case $URL in http://127.0.0.1:*) ;; *) URL= ;; esac
[ -n "$URL" ] && nsenter --net="/run/netns/$NS_HARN" curl -sf "$URL/page.txt" >got 2>err &&
    [ "$(cat got)" = "served from the node" ] &&
    ok "port: a server in the sandbox answers curl in the harness's namespace" ||
    { not_ok "port: a server in the sandbox answers curl"; diag "url '$URL': $(cat err srv.err node.log)"; }
h sandbox port "${R[@]}" "$ID" 8731 >url2 2>err
[ -n "$URL" ] && cmp -s url url2 && ok "port: resolved again, the same relay" || { not_ok "port: resolved again"; diag "$(cat url2 err)"; }
code=$(nsenter --net="/run/netns/$NS_HARN" curl -s -o /dev/null -w '%{http_code}' "$URL/missing")
[ "$code" = 404 ] && ok "port: a second connection through the relay (404 for a missing page)" ||
    { not_ok "port: a second connection"; diag "code '$code'"; }
# Every command of a harness mints a token and the node keeps a bounded number of them: after
# seventy more are minted the relay's own is gone, and the relay mints a fresh one.
for i in $(seq 70); do
    nsenter --net="/run/netns/$NS_HARN" python3 "$SBX_SRCDIR/tests/node/client.py" \
        "https://$ADDR:$PORT" ca/ca.pem h1.pem h1.key request POST "/v1/sandboxes/$ID/token" >/dev/null 2>&1
done
code=$(nsenter --net="/run/netns/$NS_HARN" curl -s -o /dev/null -w '%{http_code}' "$URL/missing")
[ "$code" = 404 ] && ok "port: the relay goes on when the node has dropped its token" ||
    { not_ok "port: the relay goes on when the node has dropped its token"; diag "code '$code'"; }
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null
h sandbox stats "${R[@]}" --no-stream --json "$ID" >out 2>err
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d[0] if isinstance(d,list) else d
assert d["memory"] > 0 and d["pids"] >= 1 and d["disk"] > 0, d
assert d["memory_limit"] == 300 << 20, d' out 2>>err &&
    ok "stats: the node's figures (memory, processes, the workspace's disk; --memory 300M on the node)" || { not_ok "stats"; diag "$(cat out err)"; }
h sandbox logs "${R[@]}" "$ID" >out 2>err
[ -s out ] && ok "logs: the sandbox's log from the node" || { not_ok "logs"; diag "$(cat out err)"; }
# An interrupted `sbx sandbox exec` (SIGINT, as ^C sends it) ends the command on the node: the
# CLI's connection closes and the daemon ends the command's process group.
h sandbox exec "${R[@]}" "$ID" -- sh -c "echo started; exec sleep 35$net" >int.out 2>int.err &
IPID=$!
int_running() { grep -qx started int.out && pgrep -f "^sleep 35$net\$" >/dev/null; }
WAIT_S=20 wait_until int_running || diag "the command did not start: $(cat int.out int.err)"
CLI=$(pgrep -f "sandbox exec .*exec sleep 35$net")
[ -n "$CLI" ] && kill -INT $CLI
wait "$IPID"
int_gone() { ! pgrep -f "^sleep 35$net\$" >/dev/null; }
[ -n "$CLI" ] && WAIT_S=20 wait_until int_gone && ok "an interrupted exec ends its command on the node" ||
    { not_ok "an interrupted exec ends its command"; diag "cli '$CLI': $(cat int.err node.log)"; }
rm -f got
RELAY=$(cut -d' ' -f1 "$RUNBASE/remote/$ID/ports/8731" 2>/dev/null)
# Gone, or a zombie its new parent has not reaped yet.
relay_gone() { ! kill -0 "$RELAY" 2>/dev/null || grep -q '^[0-9]* (.*) Z' "/proc/$RELAY/stat" 2>/dev/null; }
h sandbox stop "${R[@]}" "$ID" >out 2>err && ! h sandbox exec "${R[@]}" "$ID" -- true 2>/dev/null &&
    h sandbox start "${R[@]}" "$ID" >>out 2>>err && h sandbox exec "${R[@]}" "$ID" -- cat up.txt >got 2>>err &&
    grep -qx "from the harness" got && ok "stop, then start: the workspace is kept" ||
    { not_ok "stop, then start"; diag "$(cat out got err)"; }
[ -n "$RELAY" ] && relay_gone && [ ! -e "$RUNBASE/remote/$ID/ports/8731" ] &&
    ok "stop ends the port relay and removes its record" || { not_ok "stop ends the port relay"; diag "relay '$RELAY'"; }
h sandbox exec "${R[@]}" "$ID" -- sh -c "echo started; exec sleep 32$net" >mid.out 2>mid.err &
CPID=$!
started() { grep -qx started mid.out; }
WAIT_S=20 wait_until started
kill -9 "$NODE_PID" && wait "$NODE_PID" 2>/dev/null
NODE_PID=
wait "$CPID"
rc=$?
[ $rc != 0 ] && grep -q "connection to the node was lost" mid.err && ok "a daemon killed mid-exec: the CLI says the node was lost" ||
    { not_ok "a daemon killed mid-exec"; diag "rc $rc: $(cat mid.out mid.err)"; }
start_node
h sandbox exec "${R[@]}" "$ID" -- cat up.txt >out 2>err
grep -qx "from the harness" out && ok "a restarted daemon serves it again (the CLI mints a fresh token)" ||
    { not_ok "a restarted daemon serves it again"; diag "$(cat out err)"; }
h sandbox exec "${R[@]}" "$ID" -- python3 -m http.server 8731 --bind 127.0.0.1 >srv.out 2>srv.err &
SRV=$!
WAIT_S=20 wait_until serving
h sandbox port "${R[@]}" "$ID" 8731 >url 2>err || diag "$(cat err)"
RELAY=$(cut -d' ' -f1 "$RUNBASE/remote/$ID/ports/8731" 2>/dev/null)
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null
h sandbox rm "${R[@]}" "$ID" >out 2>err && [ ! -e "$T/node/run/sbx/$ID" ] && ok "rm removes it on the node" ||
    { not_ok "rm"; diag "$(cat out err)"; }
[ -n "$RELAY" ] && relay_gone && [ ! -e "$RUNBASE/remote/$ID" ] &&
    ok "rm ends the port relay and removes its record" || { not_ok "rm ends the port relay"; diag "relay '$RELAY'"; }
# A node of another major protocol version (a server answering as one would): the harness
# names both versions and stops; what it sent named its own.
OTHER_PORT=$((PORT + 1))
nsenter --net="/run/netns/$NS_NODE" python3 "$SBX_SRCDIR/tests/node/other-version.py" "$ADDR" \
    "$OTHER_PORT" node-a.pem node-a.key 2 >other.log 2>&1 &
OTHER_PID=$!
other_listening() { nsenter --net="/run/netns/$NS_NODE" ss -ltn "sport = :$OTHER_PORT" | grep -q LISTEN; }
WAIT_S=20 wait_until other_listening || diag "the other version's server did not listen: $(cat other.log)"
h sandbox create --provider remote --node "https://$ADDR:$OTHER_PORT" --node-ca "$T/ca/ca.pem" \
    --node-cert "$T/h1.pem" --node-key "$T/h1.key" >out 2>err
rc=$?
[ $rc != 0 ] && grep -q "node 'https://$ADDR:$OTHER_PORT' speaks sbx-node protocol version 2, this sbx speaks version 1" err &&
    grep -q "^request /v1/sandboxes version 1$" other.log &&
    ok "a node of another protocol version: the harness names both versions (its request named 1)" ||
    { not_ok "a node of another protocol version"; diag "rc $rc: $(cat out err other.log)"; }
kill "$OTHER_PID" 2>/dev/null; wait "$OTHER_PID" 2>/dev/null
OTHER_PID=
done_testing
