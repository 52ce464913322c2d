#!/usr/bin/env bash
# One connection per run: the model client keeps its HTTP connection open across the turns of a
# run (both APIs, streamed or not), opens a fresh one when the server closed it between turns
# (saying so, or silently), and the request bodies it builds from its cached history items say
# the same as a from-scratch serialisation of the conversation.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"

cat >"$T/math.json" <<'EOF2'
{"name": "math", "instructions": "You add numbers with tools.", "tools": ["add"]}
EOF2
# keep TURNS-FILE [CLOSE...]: mark the script keep-alive; CLOSE is "N:true" or "N:silent" (turn N,
# 0-based, closes its connection after answering).
keep() {
    python3 - "$@" <<'EOF2'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["keep_alive"] = True
for c in sys.argv[2:]:
    n, how = c.split(":")
    d["turns"][int(n)]["close"] = True if how == "true" else how
json.dump(d, open(p, "w"))
EOF2
}
turns='[resp(1, fcall(1, "add", {"a": 1, "b": 2})), resp(2, fcall(2, "add", {"a": 3, "b": 4})), resp(3, fcall(3, "add", {"a": 5, "b": 6})), resp(4, fcall(4, "add", {"a": 7, "b": 8})), resp(5, msg("done adding"))]'

# --- a five-turn run, streamed and not: five requests on one connection ---
for mode in stream no-stream; do
    mk "$T/s.json" "$turns"
    keep "$T/s.json"
    start_fake "$T/s.json"
    flag=""
    [ "$mode" = no-stream ] && flag=--no-stream
    run "$SBX" run $flag --base-url "$FAKE_URL" -a "$T/math.json" "add things"
    expect_rc 0 "$mode: five-turn run succeeds"
    expect_eq "$(cat "$T/out")" "done adding" "$mode: final output"
    expect_eq "$(fake_query 'len(reqs)')" 5 "$mode: five model calls"
    expect_eq "$(fake_query 'sorted(set(r["conn"] for r in reqs))')" "[1]" "$mode: all on one TCP connection"
done

# --- the chat API keeps its connection too ---
MK_EXTRA="$T/chat.py"
cat >"$MK_EXTRA" <<'EOF2'
def chat_call(i, a, b):
    return {"chat": {"id": "cc%d" % i, "object": "chat.completion",
                     "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                         "role": "assistant", "content": None, "tool_calls": [
                             {"id": "c%d" % i, "type": "function", "function": {
                                 "name": "add", "arguments": json.dumps({"a": a, "b": b})}}]}}]}}
EOF2
mk "$T/c.json" '[chat_call(1, 1, 2), chat_call(2, 3, 4), chat_call(3, 5, 6), chat_msg("chat done")]'
unset MK_EXTRA
keep "$T/c.json"
start_fake "$T/c.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/math.json" "add things"
expect_rc 0 "chat: four-turn run succeeds"
expect_eq "$(cat "$T/out")" "chat done" "chat: final output"
expect_eq "$(fake_query 'sorted(set(r["conn"] for r in reqs))')" "[1]" "chat: all on one TCP connection"
cp "$FAKE_LOG" "$T/chat-requests.jsonl"

# --- the server closes the connection between turns: a fresh one, each turn served once ---
mk "$T/s.json" "$turns"
keep "$T/s.json" 0:true 2:silent
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/math.json" "add things"
expect_rc 0 "closed connections: the run succeeds"
expect_eq "$(cat "$T/out")" "done adding" "closed connections: final output"
expect_eq "$(fake_query 'len(reqs)')" 5 "closed connections: each turn asked once"
expect_eq "$(fake_query '[r["conn"] for r in reqs]')" "[1, 2, 2, 3, 3]" "closed connections: a new connection after each close"

# --- cached serialisation: every request's input is exactly the conversation so far ---
# Request k's input must be request k-1's input followed by what came back (the model's items
# and the tool outputs): compared as parsed JSON, and the tail of each request after the first
# must hold what the server sent (no stale or reordered cached item).
check_history() {
    python3 - "$1" "$2" <<'EOF2'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
key = sys.argv[2]
bad = []
for k in range(1, len(reqs)):
    prev, cur = reqs[k - 1]["body"][key], reqs[k]["body"][key]
    if cur[:len(prev)] != prev:
        bad.append("request %d does not start with request %d's %s" % (k + 1, k, key))
    if len(cur) <= len(prev):
        bad.append("request %d adds nothing" % (k + 1))
if bad:
    print("\n".join(bad))
else:
    print("ok")
EOF2
}
mk "$T/s.json" "$turns"
keep "$T/s.json"
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/math.json" "add things"
expect_rc 0 "history run succeeds"
expect_eq "$(check_history "$FAKE_LOG" input)" ok "responses: each request extends the previous one"
expect_eq "$(fake_query '[(i.get("type"), i.get("call_id")) for i in reqs[4]["body"]["input"]]')" "[('message', None), ('function_call', 'c1'), ('function_call_output', 'c1'), ('function_call', 'c2'), ('function_call_output', 'c2'), ('function_call', 'c3'), ('function_call_output', 'c3'), ('function_call', 'c4'), ('function_call_output', 'c4')]" "responses: the last request carries the whole conversation in order"
expect_eq "$(fake_query '[i["output"] for i in reqs[4]["body"]["input"] if i.get("type") == "function_call_output"]')" "['3', '7', '11', '15']" "responses: every tool output sent"
expect_eq "$(fake_query 'reqs[4]["body"]["input"][3] == {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "add", "arguments": "{\"a\": 3, \"b\": 4}", "status": "completed"}')" True "responses: a model item is sent back as it came"
expect_eq "$(check_history "$T/chat-requests.jsonl" messages)" ok "chat: each request extends the previous one"
FAKE_LOG=$T/chat-requests.jsonl
expect_eq "$(fake_query '[(m["role"], [c["id"] for c in m.get("tool_calls", [])], m.get("tool_call_id")) for m in reqs[3]["body"]["messages"]]')" "[('system', [], None), ('user', [], None), ('assistant', ['c1'], None), ('tool', [], 'c1'), ('assistant', ['c2'], None), ('tool', [], 'c2'), ('assistant', ['c3'], None), ('tool', [], 'c3')]" "chat: the last request carries the whole conversation in order"

done_testing
