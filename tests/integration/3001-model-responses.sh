#!/usr/bin/env bash
# sbx run against a fake Responses API server: tool calls, parallel calls, bad arguments,
# structured output, max turns, retries, cut streams, bad JSON, timeouts, the key's secrecy,
# and record/replay.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"

cat >"$T/math.json" <<'EOF'
{"name": "math", "instructions": "You add numbers with tools.", "tools": ["add", "calculator"]}
EOF
call() { # call ID NAME ARGS_JSON_STRING
    printf '{"type":"function_call","id":"fc_%s","call_id":"%s","name":"%s","arguments":%s,"status":"completed"}' "$1" "$1" "$2" "$3"
}
msg() {
    printf '{"type":"message","id":"msg_x","role":"assistant","status":"completed","content":[{"type":"output_text","text":%s,"annotations":[]}]}' "$1"
}
resp() { # resp ID ITEMS...
    local id=$1; shift
    local IFS=,
    printf '{"response":{"id":"%s","object":"response","status":"completed","output":[%s],"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}}' "$id" "$*"
}

# --- a two-turn tool call, streamed ---
cat >"$T/s1.json" <<EOF
{"turns": [$(resp r1 "$(call c1 add '"{\"a\":2,\"b\":3}"')"), $(resp r2 "$(msg '"The sum is 5."')")]}
EOF
start_fake "$T/s1.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/math.json" "what is 2+3?"
expect_rc 0 "two-turn tool call succeeds"
expect_eq "$(cat "$T/out")" "The sum is 5." "final output on stdout"
expect_in "$T/err" 'tool add({"a":2,"b":3}) -> 5' "tool line on stderr"
expect_in "$T/err" "The sum is 5." "streamed text on stderr"
expect_eq "$(fake_query 'len(reqs)')" 2 "two model calls"
expect_eq "$(fake_query 'reqs[0]["path"]')" "/v1/responses" "POST /v1/responses"
expect_eq "$(fake_query 'reqs[0]["body"]["stream"]')" "True" "asked to stream"
expect_eq "$(fake_query 'reqs[0]["body"]["instructions"]')" "You add numbers with tools." "instructions sent"
expect_eq "$(fake_query '[t["name"] for t in reqs[0]["body"]["tools"]]')" "['add', 'calculator']" "tools offered"
expect_eq "$(fake_query 'reqs[0]["headers"]["authorization"]')" "Bearer sk-test-SECRET-0123456789" "API key sent as bearer"
expect_eq "$(fake_query '[i.get("output") for i in reqs[1]["body"]["input"] if i.get("type")=="function_call_output"]')" "['5']" "tool output sent back"
expect_eq "$(fake_query '[i.get("type") for i in reqs[1]["body"]["input"]]')" "['message', 'function_call', 'function_call_output']" "history carried in order"

# --- the same without streaming ---
start_fake "$T/s1.json"
run "$SBX" run --no-stream --base-url "$FAKE_URL" -a "$T/math.json" "what is 2+3?"
expect_rc 0 "non-streaming run succeeds"
expect_eq "$(cat "$T/out")" "The sum is 5." "non-streaming final output"
expect_eq "$(fake_query '"stream" in reqs[0]["body"]')" "False" "no stream field when not streaming"

# --- two parallel tool calls: outputs in call order ---
cat >"$T/s2.json" <<EOF
{"turns": [$(resp r1 "$(call c1 calculator '"{\"expression\":\"6*7\"}"')" "$(call c2 add '"{\"a\":1,\"b\":1}"')"), $(resp r2 "$(msg '"42 and 2"')")]}
EOF
start_fake "$T/s2.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/math.json" "two things"
expect_rc 0 "parallel tool calls succeed"
expect_eq "$(fake_query '[(i["call_id"], i["output"]) for i in reqs[1]["body"]["input"] if i.get("type")=="function_call_output"]')" "[('c1', '42'), ('c2', '2')]" "parallel outputs kept in call order"

# --- bad arguments reach the model as tool output, the run goes on ---
cat >"$T/s3.json" <<EOF
{"turns": [$(resp r1 "$(call c1 add '"{not json"')" "$(call c2 add '"{\"a\":\"x\",\"b\":1}"')" "$(call c3 calculator '"{\"expression\":\"1/0\"}"')" "$(call c4 nosuch '"{}"')"), $(resp r2 "$(msg '"sorry"')")]}
EOF
start_fake "$T/s3.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/math.json" "break it"
expect_rc 0 "bad tool calls do not end the run"
fake_query '"\n".join(i["output"] for i in reqs[1]["body"]["input"] if i.get("type")=="function_call_output")' >"$T/outs"
expect_in "$T/outs" "error: the arguments are not valid JSON" "invalid JSON reported to the model"
expect_in "$T/outs" 'error: the arguments do not match the tool'"'"'s schema: $.a: expected number, got string' "schema mismatch reported to the model"
expect_in "$T/outs" "error: tool 'calculator' failed: division by zero" "callback failure reported to the model"
expect_in "$T/outs" "error: tool 'nosuch' not found" "unknown tool reported to the model"
expect_in "$T/err" "tool add({not json) failed:" "failed tool call shown on stderr"

# --- structured output ---
cat >"$T/struct.json" <<'EOF'
{"name": "extractor", "instructions": "Extract.", "output_schema": {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}}}}
EOF
cat >"$T/s4.json" <<EOF
{"turns": [$(resp r1 "$(msg '"{\"city\":\"Paris\",\"population\":2100000}"')"), $(resp r2 "$(msg '"{\"city\":\"Paris\"}"')")]}
EOF
start_fake "$T/s4.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/struct.json" "Paris has 2.1M people"
expect_rc 0 "structured output accepted"
expect_eq "$(cat "$T/out")" '{"city":"Paris","population":2100000}' "structured output printed as JSON"
expect_eq "$(fake_query 'reqs[0]["body"]["text"]["format"]["type"]')" "json_schema" "text.format is a JSON schema"
expect_eq "$(fake_query 'reqs[0]["body"]["text"]["format"]["schema"]["additionalProperties"]')" "False" "output schema made strict"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/struct.json" "again"
expect_rc 1 "output not matching the schema is an error"
expect_in "$T/err" "final output of agent 'extractor' does not match its output schema" "schema error names the agent"
expect_in "$T/err" "missing required property 'population'" "schema error names the property"

# --- max turns ---
cat >"$T/s5.json" <<EOF
{"turns": [$(resp r1 "$(call c1 add '"{\"a\":1,\"b\":1}"')"), $(resp r2 "$(call c2 add '"{\"a\":1,\"b\":1}"')"), $(resp r3 "$(call c3 add '"{\"a\":1,\"b\":1}"')")]}
EOF
start_fake "$T/s5.json"
run "$SBX" run --max-turns 2 --base-url "$FAKE_URL" -a "$T/math.json" "loop"
expect_rc 3 "max turns exceeded exits 3"
expect_in "$T/err" "max turns (2) exceeded" "max turns error names the limit"
expect_eq "$(fake_query 'len(reqs)')" 2 "no model call past the limit"

# --- retry then success: 429 with retry-after, then 500, then an answer ---
cat >"$T/s6.json" <<EOF
{"turns": [{"status": 429, "headers": {"retry-after": "0"}, "body": {"error": {"message": "slow down"}}},
           {"status": 500, "headers": {"retry-after-ms": "10"}, "body": {"error": {"message": "oops"}}},
           $(resp r1 "$(msg '"finally"')")]}
EOF
start_fake "$T/s6.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 0 "retries until success"
expect_eq "$(cat "$T/out")" "finally" "answer after retries"
expect_eq "$(fake_query 'len(reqs)')" 3 "three attempts"
expect_in "$T/err" "retrying" "retries are logged"

# --- retry exhausted ---
cat >"$T/s7.json" <<EOF
{"turns": [{"status": 503, "headers": {"retry-after": "0"}, "body": {"error": {"message": "engine overloaded"}}},
           {"status": 503, "headers": {"retry-after": "0"}, "body": {"error": {"message": "engine overloaded"}}},
           $(resp r1 "$(msg '"too late"')")]}
EOF
start_fake "$T/s7.json"
run "$SBX" run --retries 1 --base-url "$FAKE_URL" "hi"
expect_rc 1 "exhausted retries fail"
expect_in "$T/err" "after 2 attempts: model API answered 503: engine overloaded" "last error carries the server message"
expect_eq "$(fake_query 'len(reqs)')" 2 "no attempt past the retry budget"

# --- a 400 is not retried ---
cat >"$T/s8.json" <<EOF
{"turns": [{"status": 400, "body": {"error": {"message": "Invalid value for 'input'"}}}, $(resp r1 "$(msg '"no"')")]}
EOF
start_fake "$T/s8.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 1 "400 fails"
expect_in "$T/err" "model API answered 400: Invalid value for 'input'" "400 message shown"
expect_eq "$(fake_query 'len(reqs)')" 1 "400 not retried"

# --- a stream cut in its first event is retried; one cut after text is an error ---
cat >"$T/s9.json" <<EOF
{"turns": [{"sse": ["event: response.created\ndata: {\"type\":\"response.cre"]},
           $(resp r1 "$(msg '"whole"')")]}
EOF
start_fake "$T/s9.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 0 "stream cut mid-event is retried"
expect_eq "$(cat "$T/out")" "whole" "answer after the cut stream"
cat >"$T/s10.json" <<EOF
{"turns": [{"sse": [{"type": "response.created", "response": {"id": "r"}}, {"type": "response.output_text.delta", "delta": "partial "}, "data: {\"type\":\"response.output_te"]},
           $(resp r1 "$(msg '"whole"')")]}
EOF
start_fake "$T/s10.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 1 "stream cut after text fails"
expect_in "$T/err" "model stream ended in the middle of an event before the response completed" "cut stream named"

# --- invalid JSON from the server ---
cat >"$T/s11.json" <<'EOF'
{"turns": [{"raw": "{\"id\": \"r1\", \"output\": [tru"}]}
EOF
start_fake "$T/s11.json"
run "$SBX" run --no-stream --base-url "$FAKE_URL" "hi"
expect_rc 1 "invalid JSON body fails"
expect_in "$T/err" "model response" "invalid JSON error names the response"

# --- response.failed in the stream ---
cat >"$T/s12.json" <<'EOF'
{"turns": [{"sse": [{"type": "response.created", "response": {"id": "r"}}, {"type": "response.failed", "response": {"id": "r", "status": "failed", "error": {"code": "server_error", "message": "the model broke"}}}]}]}
EOF
start_fake "$T/s12.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 1 "response.failed fails the run"
expect_in "$T/err" "model response failed (server_error): the model broke" "failure message from the stream"

# --- SSE with CRLF, comments and multi-line data ---
cat >"$T/s13.json" <<'EOF'
{"turns": [{"sse": [": keep-alive\r\n\r\n", "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\r\ndata:  \"delta\":\"hel\"}\r\n\r\n", "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hello\"}]}]}}\r\n\r\n"]}]}
EOF
start_fake "$T/s13.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 0 "CRLF, comments and multi-line data parse"
expect_eq "$(cat "$T/out")" "hello" "final output from the CRLF stream"
expect_in "$T/err" "hel" "delta from a multi-line data event"

# --- a slow first byte times out and is retried ---
cat >"$T/s14.json" <<EOF
{"turns": [{"delay_ms": 1500, "response": {"id": "slow", "output": []}}, $(resp r1 "$(msg '"fast"')")]}
EOF
start_fake "$T/s14.json"
run "$SBX" run --timeout 300ms --base-url "$FAKE_URL" "hi"
expect_rc 0 "timeout is retried"
expect_eq "$(cat "$T/out")" "fast" "answer after the timeout"
expect_in "$T/err" "timed out" "timeout logged"

# --- the key stays secret: stdout, stderr, --json, record file, errors ---
cat >"$T/s15.json" <<EOF
{"turns": [{"status": 401, "body": {"error": {"message": "Incorrect API key provided: sk-test-SECRET-0123456789"}}}]}
EOF
start_fake "$T/s15.json"
run "$SBX" run --json --record "$T/rec-secret.jsonl" --base-url "$FAKE_URL" "hi"
expect_rc 1 "401 fails"
expect_not_in "$T/err" "SECRET" "key not in stderr even when the server echoes it"
expect_not_in "$T/out" "SECRET" "key not in --json events"
expect_in "$T/err" "Incorrect API key provided: ***" "echoed key is masked"
cat >"$T/s15b.json" <<EOF
{"turns": [{"status": 429, "headers": {"retry-after": "0"}, "body": {"error": {"message": "rate limit for key sk-test-SECRET-0123456789"}}}, $(resp r1 "$(msg '"fine"')")]}
EOF
start_fake "$T/s15b.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 0 "retry after a 429 that echoes the key"
expect_not_in "$T/err" "SECRET" "key not in the retry log line"
expect_in "$T/err" "rate limit for key ***" "echoed key masked in the retry log"

# --- record a live run, replay it offline: identical events ---
start_fake "$T/s2.json"
run "$SBX" run --json --record "$T/rec.jsonl" --base-url "$FAKE_URL" -a "$T/math.json" "two things"
expect_rc 0 "recorded run succeeds"
cp "$T/out" "$T/live.events"
expect_eq "$(wc -l <"$T/rec.jsonl")" 2 "one recorded response per model call"
expect_not_in "$T/rec.jsonl" "SECRET" "key not in the record file"
stop_fake
run "$SBX" run --json -m "replay:$T/rec.jsonl" -a "$T/math.json" "two things"
expect_rc 0 "replay succeeds offline"
# Streamed deltas of a live run are split differently; compare everything else.
grep -v '"text_delta"' "$T/live.events" >"$T/live.cmp"
grep -v '"text_delta"' "$T/out" >"$T/replay.cmp"
if cmp -s "$T/live.cmp" "$T/replay.cmp"; then ok "replay gives identical events"; else
    not_ok "replay gives identical events"; diag "$(diff "$T/live.cmp" "$T/replay.cmp" | head -20)"; fi
run "$SBX" run -m "replay:$T/rec.jsonl" -a "$T/math.json" "two things"
expect_eq "$(cat "$T/out")" "42 and 2" "replayed final output"
cp "$T/rec.jsonl" "$T/short.jsonl"
sed -i '2d' "$T/short.jsonl"
run "$SBX" run -m "replay:$T/short.jsonl" -a "$T/math.json" "two things"
expect_rc 1 "exhausted replay fails"
expect_in "$T/err" "has no response for model call 2 (it holds 1)" "exhausted replay explained"

# --- previous_response_id: only new items go to the server ---
start_fake "$T/s1.json"
run "$SBX" run --use-previous-response-id --base-url "$FAKE_URL" -a "$T/math.json" "what is 2+3?"
expect_rc 0 "run with previous_response_id succeeds"
expect_eq "$(fake_query '"previous_response_id" in reqs[0]["body"]')" "False" "first call has no previous_response_id"
expect_eq "$(fake_query 'reqs[1]["body"]["previous_response_id"]')" "r1" "second call names the first response"
expect_eq "$(fake_query '[i["type"] for i in reqs[1]["body"]["input"]]')" "['function_call_output']" "second call sends only the new items"

# --- SIGINT stops the run and says where ---
echo '{"turns": [{"delay_ms": 3000, "response": {"id": "late", "output": []}}]}' >"$T/s16.json"
start_fake "$T/s16.json"
"$SBX" run --base-url "$FAKE_URL" "hi" >"$T/out" 2>"$T/err" &
pid=$!
i=0
one_request() { [ "$(fake_query 'len(reqs)' 2>/dev/null)" = 1 ]; }
wait_until one_request
kill -INT $pid
wait $pid
rc=$?
expect_rc 130 "SIGINT ends the run with status 130, as shells and docker say"
expect_in "$T/err" "cancelled" "SIGINT reported as a cancellation"
expect_in "$T/err" "agent 'assistant' turn 1" "cancellation names the agent and turn"

# --- a custom (freeform) tool over the Responses API ---
echo '{"name": "counter", "tools": ["word_count"]}' >"$T/count.json"
cat >"$T/s17.json" <<EOF
{"turns": [$(resp r1 '{"type":"custom_tool_call","id":"ctc_1","call_id":"k1","name":"word_count","input":"a b\nc"}'), $(resp r2 "$(msg '"3 words"')")]}
EOF
start_fake "$T/s17.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/count.json" "count"
expect_rc 0 "custom tool run succeeds"
expect_eq "$(fake_query 'reqs[0]["body"]["tools"][0]["type"]')" "custom" "custom tool offered as type custom"
expect_eq "$(fake_query '[(i["type"], i["output"]) for i in reqs[1]["body"]["input"] if i.get("call_id")=="k1" and "output" in i]')" "[('custom_tool_call_output', '3 words, 1 lines, 5 characters')]" "custom tool output sent back"

# --- usage errors ---
run "$SBX" run --api grpc "x"
expect_rc 2 "bad --api is a usage error"
expect_in "$T/err" "--api must be 'responses' or 'chat', not 'grpc'" "bad --api named"
run "$SBX" run --max-turns 0 "x"
expect_rc 2 "bad --max-turns is a usage error"
run "$SBX" run
expect_rc 2 "missing prompt is a usage error"
run "$SBX" run --base-url ftp://x "hi"
expect_rc 1 "bad base URL fails"
expect_in "$T/err" "base URL 'ftp://x' must start with http:// or https://" "bad base URL named"
echo '{"name": "x", "tols": []}' >"$T/typo.json"
run "$SBX" run -m replay:/dev/null -a "$T/typo.json" "hi"
expect_rc 1 "agent file typo fails"
expect_in "$T/err" "unknown field 'tols'" "agent file typo named"
echo "what is 2+3?" | { "$SBX" run --base-url http://127.0.0.1:1/v1 --retries 0 - >"$T/out" 2>"$T/err"; echo $? >"$T/rc"; }
expect_eq "$(cat "$T/rc")" 1 "connection refused fails"
expect_in "$T/err" "request to 'http://127.0.0.1:1/v1/responses' failed" "connection failure names the URL"

# --- OPENAI_ORG_ID and OPENAI_PROJECT_ID go as OpenAI's clients send them ----------------------------
mk "$T/ids.json" '[resp(1, msg("a")), resp(2, msg("b")), resp(3, msg("c"))]'
start_fake "$T/ids.json"
OPENAI_ORG_ID=org-test123 OPENAI_PROJECT_ID=proj_test456 run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 0 "a run with an organization and a project"
expect_eq "$(fake_query 'reqs[0]["headers"].get("openai-organization")')" "org-test123" "OPENAI_ORG_ID is sent as OpenAI-Organization"
expect_eq "$(fake_query 'reqs[0]["headers"].get("openai-project")')" "proj_test456" "OPENAI_PROJECT_ID is sent as OpenAI-Project"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_eq "$(fake_query '[("openai-organization" in r["headers"], "openai-project" in r["headers"]) for r in reqs][1]')" \
    "(False, False)" "without them, neither header is sent"
printf 'name: a\nmodel_settings: {extra_headers: {openai-organization: org-from-settings}}\n' >"$T/org.yaml"
OPENAI_ORG_ID=org-test123 run "$SBX" run --base-url "$FAKE_URL" -a "$T/org.yaml" "hi"
expect_eq "$(fake_query '[r["headers"].get("openai-organization") for r in reqs][2]')" "org-from-settings" \
    "a model setting's extra_headers naming it wins"
OPENAI_PROJECT_ID=$'proj\r\nX-Evil: 1' run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 1 "a project id with a control character is refused"
expect_in "$T/err" "OPENAI_PROJECT_ID for the 'OpenAI-Project' header has a control character" "naming the variable"

done_testing
