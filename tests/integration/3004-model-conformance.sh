#!/usr/bin/env bash
# Model transport conformance through the real binary: a streaming request answered with one
# plain JSON body (Responses and Chat), a server that never answers (--deadline), and a missing
# API key named at once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"

msg() {
    printf '{"type":"message","id":"msg_x","role":"assistant","status":"completed","content":[{"type":"output_text","text":%s,"annotations":[]}]}' "$1"
}

# --- a streaming request answered with plain JSON (Responses) -----------------------------------
cat >"$T/p1.json" <<EOF
{"turns": [{"plain": true, "response": {"id": "r1", "object": "response", "status": "completed", "output": [$(msg '"plain answer"')], "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}}]}
EOF
start_fake "$T/p1.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 0 "a plain JSON answer to a streaming request is accepted"
expect_eq "$(cat "$T/out")" "plain answer" "its text is the final output"
expect_eq "$(fake_query 'len(reqs)')" "1" "it is not retried"
expect_eq "$(fake_query 'reqs[0]["body"]["stream"]')" "True" "the request did ask to stream"
expect_not_in "$T/err" "stream ended" "no cut-stream message"

# The same with --json: the events a stream would have given are still reported.
start_fake "$T/p1.json"
run "$SBX" run --json --base-url "$FAKE_URL" "hi"
expect_rc 0 "plain answer with --json"
expect_in "$T/out" '"type":"text_delta"' "text deltas are reported for a plain answer"
expect_in "$T/out" '"output":"plain answer"' "final event carries the answer"

# --- the same over Chat Completions --------------------------------------------------------------
cat >"$T/p2.json" <<'EOF'
{"turns": [{"plain": true, "chat": {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "chat plain"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}}]}
EOF
start_fake "$T/p2.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" "hi"
expect_rc 0 "chat: a plain JSON answer to a streaming request is accepted"
expect_eq "$(cat "$T/out")" "chat plain" "chat: its text is the final output"
expect_eq "$(fake_query 'len(reqs)')" "1" "chat: it is not retried"

# A real event stream still streams, and a plain body that is not JSON is a parse error, once.
cat >"$T/p3.json" <<'EOF'
{"turns": [{"raw": "{\"id\": \"r1\", \"output\": [tru"}]}
EOF
start_fake "$T/p3.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 1 "a broken plain body to a streaming request fails"
expect_in "$T/err" "model response" "the error names the response"
expect_eq "$(fake_query 'len(reqs)')" "1" "a broken plain body is not retried"

# --- a server that never answers: --deadline bounds the call, all attempts together ----------
cat >"$T/p6.json" <<'EOF'
{"turns": [{"delay_ms": 30000, "response": {"id": "late", "output": []}}, {"delay_ms": 30000, "response": {"id": "late", "output": []}}]}
EOF
start_fake "$T/p6.json"
run "$SBX" run --deadline 2s --base-url "$FAKE_URL" "hi"
expect_rc 1 "a model that never answers fails at the deadline"
expect_in "$T/err" "model call deadline (2000 ms) passed" "the error names the deadline"
run "$SBX" run --deadline soon "hi"
expect_rc 2 "a bad --deadline is a usage error"
expect_in "$T/err" "--deadline must be a duration like 5m, not 'soon'" "the usage error names the value"

# --- on a terminal a slow model shows a waiting line, erased when the answer starts; a pipe
# shows nothing ----------------------------------------------------------------------------------
cat >"$T/p7.json" <<EOF
{"turns": [{"delay_ms": 3500, "response": {"id": "r1", "object": "response", "status": "completed", "output": [$(msg '"slow answer"')]}}]}
EOF
start_fake "$T/p7.json"
on_tty "$T/tty" "$SBX" run --base-url "$FAKE_URL" "hi"
expect_eq "$?" 0 "a slow answer on a terminal succeeds"
expect_in "$T/tty" "waiting for the model: 2s" "the terminal shows how long the model has been waited for"
expect_in "$T/tty" "slow answer" "and then the answer"
start_fake "$T/p7.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 0 "a slow answer on a pipe succeeds"
expect_not_in "$T/err" "waiting for the model" "a pipe gets no waiting line"

# --- no API key ----------------------------------------------------------------------------------
unset OPENAI_API_KEY OPENAI_BASE_URL
run "$SBX" run "hi"
expect_rc 1 "no key for the OpenAI API fails"
expect_in "$T/err" "OPENAI_API_KEY" "the message names OPENAI_API_KEY"
expect_in "$T/err" "--base-url" "the message names --base-url for keyless servers"
expect_not_in "$T/err" "retrying" "it fails at once, without retries"

# A keyless local server is fine.
cat >"$T/p4.json" <<EOF
{"turns": [{"response": {"id": "r1", "object": "response", "status": "completed", "output": [$(msg '"keyless"')]}}]}
EOF
start_fake "$T/p4.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 0 "a server given by --base-url needs no key"
expect_eq "$(fake_query '"authorization" in {k.lower() for k in reqs[0]["headers"]}')" "False" \
    "no Authorization header is sent without a key"
# ... and when such a server wants one, the 401 says that none was sent.
cat >"$T/p5.json" <<'EOF'
{"turns": [{"status": 401, "body": {"error": {"message": "missing credentials"}}}]}
EOF
start_fake "$T/p5.json"
run "$SBX" run --base-url "$FAKE_URL" "hi"
expect_rc 1 "401 from a keyless request fails"
expect_in "$T/err" "no API key was sent: set OPENAI_API_KEY" "the 401 says no key was sent"
done_testing
