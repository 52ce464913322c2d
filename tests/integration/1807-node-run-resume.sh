#!/usr/bin/env bash
# A harness that dies with sandboxes on two nodes: two runs (`sbx run --state`, a replayed
# model), one with its sandbox on each of two sbx-node daemons (each in a network namespace of
# its own, tests/node/lib.sh), the harness process in a third namespace. Both are SIGKILLed while
# their tool call runs; new harness processes continue them with `sbx run --resume`, find each
# sandbox on its node with the files written before the kill, finish, and remove the sandboxes;
# one is resumed without the provider's options (taken from the saved state and its record).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
NODE=${SBX_NODE:-$(dirname "$SBX")/sbx-node}
. "$SBX_SRCDIR/tests/node/lib.sh"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; node_cleanup; sandbox_cleanup' EXIT
node_setup || skip_all "$NODE_WHY"
node_add a && node_add b || skip_all "$NODE_WHY"
for n in a b; do
    node_start "$n" || { not_ok "daemon $n listens"; diag "$(cat "$T/nodes/$n/node.log")"; done_testing; exit; }
done
cd "$T" || exit 1
cat >w.yaml <<'YAML'
name: Worker
capabilities: [shell]
manifest: {entries: {}}
YAML
# The first time the call writes a file and sleeps far longer than any wait below; run again,
# it reports what it finds. --resume is given the options the run started with.
NAP="sleep 35.$$"
CMD="if [ -e started ]; then echo again; cat before.txt; else echo before > before.txt; touch started; exec $NAP; fi"
python3 - "$CMD" >replay.jsonl <<'PY'
import json, sys
def resp(n, output):
    return {"id": "resp_%d" % n, "object": "response", "created_at": 1796200000 + n,
            "status": "completed", "model": "gpt-4.1", "output": output,
            "usage": {"input_tokens": 10, "output_tokens": 10, "total_tokens": 20}}
call = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "exec_command",
        "arguments": json.dumps({"cmd": sys.argv[1], "yield_time_ms": 30000}), "status": "completed"}
msg = {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
       "content": [{"type": "output_text", "text": "finished after the crash", "annotations": []}]}
print(json.dumps(resp(1, [call])))
print(json.dumps(resp(2, [msg])))
PY
for n in a b; do
    node_flags "$n"
    node_h "$SBX" run --provider remote "${R[@]}" -m replay:replay.jsonl -a w.yaml --state "$T/$n.state" \
        "go" >"run-$n.out" 2>"run-$n.err" &
    PIDS+=($!)
done
napping() { [ "$(pgrep -fxc "$NAP")" = 2 ]; }
WAIT_S=60 wait_until napping && ok "both runs are in their tool call, one sandbox on each node" ||
    { not_ok "both runs are in their tool call"; diag "$(cat run-a.err run-b.err)"; }
[ "$(node_live a | wc -l)" = 1 ] && [ "$(node_live b | wc -l)" = 1 ] && ok "each node holds one sandbox" ||
    not_ok "each node holds one sandbox"
kill -KILL "${PIDS[@]}"
wait "${PIDS[@]}" 2>/dev/null
PIDS=()
[ "$(node_live a | wc -l)" = 1 ] && [ "$(node_live b | wc -l)" = 1 ] && ok "the sandboxes outlive the killed harness" ||
    not_ok "the sandboxes outlive the killed harness"
# Node a's run is resumed with the options it started with; node b's with none: the provider,
# the node and the certificates' paths come from the run state's sandbox and this user's
# record of it (the state holds no certificate path).
KEYLINE=$(sed -n 2p "$T/h1.key")
[ -s b.state ] && [ -n "$KEYLINE" ] && ! grep -qF -e "$KEYLINE" -e h1.key b.state &&
    ok "the run state holds neither the harness's key nor its path" ||
    { not_ok "the run state holds neither the harness's key nor its path"; diag "$(grep -o '"node[^,]*' b.state)"; }
# Without the record (another user's records, say) nothing names the certificates: the run
# stops before anything is made, saying what to give, and the state is kept as it was.
mkdir -p norecords
cp b.state b.state.before
SBX_RECORDS="$T/norecords" node_h "$SBX" run -m replay:replay.jsonl -a w.yaml --resume "$T/b.state" >nr.out 2>nr.err
rc=$?
[ $rc != 0 ] && grep -q "the remote provider needs --node https://HOST:PORT" nr.err && cmp -s b.state b.state.before &&
    ok "node b: a resume without options or record says the node must be given" ||
    { not_ok "node b: a resume without options or record"; diag "rc $rc: $(cat nr.out nr.err)"; }
for n in a b; do
    node_flags "$n"
    [ "$n" = b ] && R=() && PROVIDER=() || PROVIDER=(--provider remote)
    node_h "$SBX" run --json "${PROVIDER[@]}" "${R[@]}" -m replay:replay.jsonl -a w.yaml --resume "$T/$n.state" >"res-$n.out" 2>"res-$n.err"
    rc=$?
    [ $rc = 0 ] && grep -q "finished after the crash" "res-$n.out" &&
        grep -q '"type":"sandbox".*"provider":"remote","source":"resumed"' "res-$n.out" &&
        grep -q "tool call c1 (exec_command) was running when the run stopped; running it again" "res-$n.out" &&
        ok "node $n: --resume in a new harness process continues the run in its remote sandbox" ||
        { not_ok "node $n: --resume continues the run"; diag "rc $rc: $(cat "res-$n.out" "res-$n.err")"; }
done
for n in a b; do
    python3 -c 'import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("\n".join(e["item"].get("output", "") for e in events if e.get("type") == "tool_output"))' "res-$n.out" >"outs-$n" 2>&1
    grep -q '^again$' "outs-$n" && grep -q '^before$' "outs-$n" && ok "node $n: the call ran again in the same sandbox, its file from before the kill intact" ||
        { not_ok "node $n: the call ran again in the same sandbox"; diag "$(cat "outs-$n")"; }
done
[ -z "$(node_live a)" ] && [ -z "$(node_live b)" ] && ok "the finished runs removed their sandboxes on both nodes" ||
    { not_ok "the finished runs removed their sandboxes"; diag "a: $(node_live a) b: $(node_live b)"; }
gone() { ! pgrep -fx "$NAP" >/dev/null; }
WAIT_S=30 wait_until gone && ok "no command of theirs runs" || not_ok "no command of theirs runs"
done_testing
