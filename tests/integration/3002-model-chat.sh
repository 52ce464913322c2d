#!/usr/bin/env bash
# sbx run --api chat against a fake Chat Completions server: the same scenarios as the
# Responses tests, through the conversion layer.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"

cat >"$T/math.json" <<'EOF'
{"name": "math", "instructions": "You add numbers with tools.", "tools": ["add", "calculator"]}
EOF
tc() { # tc ID NAME ARGS_JSON_STRING
    printf '{"id":"%s","type":"function","function":{"name":"%s","arguments":%s}}' "$1" "$2" "$3"
}
chat() { # chat ID CONTENT_JSON TOOL_CALLS...
    local id=$1 content=$2; shift 2
    local IFS=,
    local calls="null"
    [ $# -gt 0 ] && calls="[$*]"
    printf '{"chat":{"id":"%s","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%s,"tool_calls":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3}}}' "$id" "$content" "$calls"
}

cat >"$T/s1.json" <<EOF
{"turns": [$(chat c1 null "$(tc k1 add '"{\"a\":2,\"b\":3}"')"), $(chat c2 '"The sum is 5."')]}
EOF
for mode in stream no-stream; do
    flag=
    [ $mode = no-stream ] && flag=--no-stream
    start_fake "$T/s1.json"
    run "$SBX" run --api chat $flag --base-url "$FAKE_URL" -a "$T/math.json" "what is 2+3?"
    expect_rc 0 "chat ($mode): two-turn tool call succeeds"
    expect_eq "$(cat "$T/out")" "The sum is 5." "chat ($mode): final output"
    expect_eq "$(fake_query 'reqs[0]["path"]')" "/v1/chat/completions" "chat ($mode): POST /v1/chat/completions"
    expect_eq "$(fake_query 'reqs[0]["body"]["messages"][0]')" "{'role': 'system', 'content': 'You add numbers with tools.'}" "chat ($mode): instructions as the system message"
    expect_eq "$(fake_query '[t["function"]["name"] for t in reqs[0]["body"]["tools"]]')" "['add', 'calculator']" "chat ($mode): tools as functions"
    expect_eq "$(fake_query '[(m["role"], m.get("tool_call_id"), m.get("content")) for m in reqs[1]["body"]["messages"][1:]]')" "[('user', None, 'what is 2+3?'), ('assistant', None, None), ('tool', 'k1', '5')]" "chat ($mode): history converted to messages"
    expect_eq "$(fake_query 'reqs[1]["body"]["messages"][2]["tool_calls"][0]["function"]')" "{'name': 'add', 'arguments': '{\"a\":2,\"b\":3}'}" "chat ($mode): tool call carried back"
done
expect_eq "$(fake_query '"stream" in reqs[0]["body"]')" "False" "chat no-stream sends no stream flag"

# --- parallel calls in one message ---
cat >"$T/s2.json" <<EOF
{"turns": [$(chat c1 null "$(tc k1 calculator '"{\"expression\":\"6*7\"}"')" "$(tc k2 add '"{\"a\":1,\"b\":1}"')"), $(chat c2 '"42 and 2"')]}
EOF
start_fake "$T/s2.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/math.json" "two things"
expect_rc 0 "chat: parallel tool calls succeed"
expect_eq "$(fake_query '[(m["tool_call_id"], m["content"]) for m in reqs[1]["body"]["messages"] if m["role"]=="tool"]')" "[('k1', '42'), ('k2', '2')]" "chat: parallel outputs in call order"
expect_eq "$(fake_query 'len(reqs[1]["body"]["messages"][2]["tool_calls"])')" 2 "chat: both calls in one assistant message"

# --- bad arguments go back to the model ---
cat >"$T/s3.json" <<EOF
{"turns": [$(chat c1 null "$(tc k1 add '"{\"a\":true}"')"), $(chat c2 '"ok"')]}
EOF
start_fake "$T/s3.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/math.json" "bad"
expect_rc 0 "chat: bad arguments do not end the run"
fake_query '[m["content"] for m in reqs[1]["body"]["messages"] if m["role"]=="tool"][0]' >"$T/o"
expect_in "$T/o" "error: the arguments do not match the tool's schema" "chat: schema error sent as tool message"

# --- structured output via response_format ---
cat >"$T/struct.json" <<'EOF'
{"name": "extractor", "output_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
EOF
cat >"$T/s4.json" <<EOF
{"turns": [$(chat c1 '"{\"city\":\"Oslo\"}"')]}
EOF
start_fake "$T/s4.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/struct.json" "Oslo"
expect_rc 0 "chat: structured output accepted"
expect_eq "$(cat "$T/out")" '{"city":"Oslo"}' "chat: structured output printed"
expect_eq "$(fake_query 'reqs[0]["body"]["response_format"]["type"]')" "json_schema" "chat: response_format is a JSON schema"

# --- max turns ---
cat >"$T/s5.json" <<EOF
{"turns": [$(chat c1 null "$(tc k1 add '"{\"a\":1,\"b\":1}"')"), $(chat c2 null "$(tc k2 add '"{\"a\":1,\"b\":1}"')")]}
EOF
start_fake "$T/s5.json"
run "$SBX" run --api chat --max-turns 1 --base-url "$FAKE_URL" -a "$T/math.json" "loop"
expect_rc 3 "chat: max turns exits 3"
expect_in "$T/err" "max turns (1) exceeded" "chat: max turns named"

# --- retry then success, and retry exhausted ---
cat >"$T/s6.json" <<EOF
{"turns": [{"status": 429, "headers": {"retry-after": "0"}, "body": {"error": {"message": "slow down"}}}, $(chat c1 '"done"')]}
EOF
start_fake "$T/s6.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" "hi"
expect_rc 0 "chat: retry then success"
expect_eq "$(cat "$T/out")" "done" "chat: answer after retry"
cat >"$T/s7.json" <<'EOF'
{"turns": [{"status": 502, "headers": {"retry-after": "0"}, "body": {"error": {"message": "bad gateway"}}}, {"status": 502, "headers": {"retry-after": "0"}, "body": {"error": {"message": "bad gateway"}}}]}
EOF
start_fake "$T/s7.json"
run "$SBX" run --api chat --retries 1 --base-url "$FAKE_URL" "hi"
expect_rc 1 "chat: retries exhausted"
expect_in "$T/err" "after 2 attempts: model API answered 502: bad gateway" "chat: last error carries the server message"

# --- a custom (freeform) tool is offered as a function taking {"input": string} ---
echo '{"name": "counter", "tools": ["word_count"]}' >"$T/count.json"
cat >"$T/s8.json" <<EOF
{"turns": [$(chat c1 null "$(tc k1 word_count '"{\"input\":\"one two three\"}"')"), $(chat c2 '"three words"')]}
EOF
start_fake "$T/s8.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/count.json" "count"
expect_rc 0 "chat: custom tool run succeeds"
expect_eq "$(fake_query 'reqs[0]["body"]["tools"][0]["function"]["parameters"]["required"]')" "['input']" "chat: custom tool offered with one string input"
expect_eq "$(fake_query '[m["content"] for m in reqs[1]["body"]["messages"] if m["role"]=="tool"]')" "['3 words, 0 lines, 13 characters']" "chat: custom tool got the raw input"
expect_eq "$(fake_query '[m for m in reqs[1]["body"]["messages"] if m.get("tool_calls")][0]["tool_calls"][0]["function"]["arguments"]')" '{"input":"one two three"}' "chat: custom call sent back as function arguments"

# --- record a chat run, replay it: same events ---
start_fake "$T/s2.json"
run "$SBX" run --api chat --json --record "$T/rec.jsonl" --base-url "$FAKE_URL" -a "$T/math.json" "two things"
expect_rc 0 "chat: recorded run"
grep -v '"text_delta"' "$T/out" >"$T/live.cmp"
stop_fake
run "$SBX" run --json -m "replay:$T/rec.jsonl" -a "$T/math.json" "two things"
grep -v '"text_delta"' "$T/out" >"$T/replay.cmp"
if cmp -s "$T/live.cmp" "$T/replay.cmp"; then ok "chat: replay gives identical events"; else
    not_ok "chat: replay gives identical events"; diag "$(diff "$T/live.cmp" "$T/replay.cmp" | head -20)"; fi

done_testing
