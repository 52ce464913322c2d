#!/usr/bin/env bash
# An incomplete model response (output limit, content filter) fails the run with exit 1 and
# the reason on stderr, through every transport: Responses streaming and JSON, Chat streaming
# and JSON, and a replay of a recording. A reasoning-only truncation is not re-sent.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"

partial='{"type":"message","id":"msg_p","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"The answer is forty","annotations":[]}]}'
reasoning='{"type":"reasoning","id":"rs_1","summary":[]}'
incomplete() { # incomplete ID REASON ITEMS
    printf '{"id":"%s","object":"response","status":"incomplete","incomplete_details":{"reason":"%s"},"output":[%s],"usage":{"input_tokens":10,"output_tokens":16,"total_tokens":26}}' "$1" "$2" "$3"
}

# --- Responses streaming: the response.incomplete event ---
cat >"$T/s1.json" <<EOF
{"turns": [{"sse": [
  {"type": "response.created", "response": {"id": "r1", "status": "in_progress", "output": []}},
  {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "The answer is forty"},
  {"type": "response.output_item.done", "output_index": 0, "item": $partial},
  {"type": "response.incomplete", "response": $(incomplete r1 max_output_tokens "$partial")}
]}]}
EOF
start_fake "$T/s1.json"
run "$SBX" run --record "$T/rec.jsonl" --base-url "$FAKE_URL" "what is 6*7?"
expect_rc 1 "responses stream: an incomplete response fails the run"
expect_in "$T/err" "model response is incomplete: max_output_tokens" "responses stream: the reason on stderr"
expect_eq "$(cat "$T/out")" "" "responses stream: no final output on stdout"
expect_eq "$(fake_query 'len(reqs)')" 1 "responses stream: one model call"

# --- the recording of it replays the same way ---
run "$SBX" run -m "replay:$T/rec.jsonl" "what is 6*7?"
expect_rc 1 "replay: a recorded incomplete response fails the run"
expect_in "$T/err" "model response is incomplete: max_output_tokens" "replay: the reason on stderr"
expect_eq "$(cat "$T/out")" "" "replay: no final output on stdout"

# --- the event type decides even when the response object has no status ---
cat >"$T/s1b.json" <<EOF
{"turns": [{"sse": [
  {"type": "response.incomplete", "response": {"id": "r1", "incomplete_details": {"reason": "max_output_tokens"}, "output": [$partial]}}
]}]}
EOF
start_fake "$T/s1b.json"
run "$SBX" run --base-url "$FAKE_URL" "what is 6*7?"
expect_rc 1 "responses stream: response.incomplete without a status fails the run"
expect_in "$T/err" "model response is incomplete: max_output_tokens" "responses stream: reason named without a status"

# --- Responses JSON: status "incomplete"; the partial text stays visible in --json ---
cat >"$T/s2.json" <<EOF
{"turns": [{"response": $(incomplete r1 content_filter "$partial")}]}
EOF
start_fake "$T/s2.json"
run "$SBX" run --no-stream --json --base-url "$FAKE_URL" "what is 6*7?"
expect_rc 1 "responses json: an incomplete response fails the run"
expect_in "$T/err" "model response is incomplete: content_filter" "responses json: the reason on stderr"
expect_in "$T/out" '"type":"message"' "responses json: the partial message is reported as an event"
expect_in "$T/out" "The answer is forty" "responses json: the partial text is in the event"
expect_in "$T/out" '"type":"error"' "responses json: an error event ends the stream"
expect_not_in "$T/out" '"type":"final"' "responses json: no final event"

# --- reasoning-only truncation: one request, not max_turns of them ---
r=$(incomplete r1 max_output_tokens "$reasoning")
cat >"$T/s3.json" <<EOF
{"turns": [{"response": $r}, {"response": $r}, {"response": $r}, {"response": $r}]}
EOF
for mode in stream no-stream; do
    flag=
    [ $mode = no-stream ] && flag=--no-stream
    start_fake "$T/s3.json"
    run "$SBX" run $flag --max-turns 4 --base-url "$FAKE_URL" "think hard"
    expect_rc 1 "reasoning only ($mode): the run fails"
    expect_in "$T/err" "model response is incomplete: max_output_tokens" "reasoning only ($mode): the reason on stderr"
    expect_not_in "$T/err" "max turns" "reasoning only ($mode): not a max-turns failure"
    expect_eq "$(fake_query 'len(reqs)')" 1 "reasoning only ($mode): exactly one model call"
done

# --- the same from a replay file: the second recorded response is never asked for ---
printf '%s\n%s\n' "$r" "$r" >"$T/reasoning.jsonl"
run "$SBX" run -m "replay:$T/reasoning.jsonl" --max-turns 2 "think hard"
expect_rc 1 "replay reasoning only: the run fails"
expect_in "$T/err" "model response is incomplete: max_output_tokens" "replay reasoning only: the reason on stderr"
expect_not_in "$T/err" "max turns" "replay reasoning only: not a max-turns failure"

# --- Chat Completions: finish_reason "length" and "content_filter" ---
chatc() { # chatc FINISH_REASON
    printf '{"chat":{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"The answer is forty"},"finish_reason":"%s"}],"usage":{"prompt_tokens":7,"completion_tokens":16}}}' "$1"
}
cat >"$T/c1.json" <<EOF
{"turns": [$(chatc length)]}
EOF
start_fake "$T/c1.json"
run "$SBX" run --api chat --no-stream --base-url "$FAKE_URL" "what is 6*7?"
expect_rc 1 "chat json: finish_reason length fails the run"
expect_in "$T/err" "model response is incomplete: max_output_tokens" "chat json: the reason on stderr"
expect_eq "$(cat "$T/out")" "" "chat json: no final output on stdout"

cat >"$T/c2.json" <<EOF
{"turns": [$(chatc content_filter)]}
EOF
start_fake "$T/c2.json"
run "$SBX" run --api chat --no-stream --base-url "$FAKE_URL" "what is 6*7?"
expect_rc 1 "chat json: finish_reason content_filter fails the run"
expect_in "$T/err" "model response is incomplete: content_filter" "chat json: content_filter named"

chunk() { # chunk DELTA_JSON FINISH_REASON_JSON
    printf '"data: {\\"id\\":\\"c1\\",\\"object\\":\\"chat.completion.chunk\\",\\"choices\\":[{\\"index\\":0,\\"delta\\":%s,\\"finish_reason\\":%s}]}\\n\\n"' "$1" "$2"
}
cat >"$T/c3.json" <<EOF
{"turns": [{"sse": [$(chunk '{\"content\":\"The answer is forty\"}' null), $(chunk '{}' '\"length\"'), "data: [DONE]\n\n"]}]}
EOF
start_fake "$T/c3.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" "what is 6*7?"
expect_rc 1 "chat stream: finish_reason length fails the run"
expect_in "$T/err" "model response is incomplete: max_output_tokens" "chat stream: the reason on stderr"
expect_eq "$(cat "$T/out")" "" "chat stream: no final output on stdout"
expect_eq "$(fake_query 'len(reqs)')" 1 "chat stream: one model call"

# --- a whole Chat answer ("stop") still succeeds through the same path ---
cat >"$T/c4.json" <<EOF
{"turns": [$(chatc stop)]}
EOF
start_fake "$T/c4.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" "what is 6*7?"
expect_rc 0 "chat stream: finish_reason stop succeeds"
expect_eq "$(cat "$T/out")" "The answer is forty" "chat stream: the whole answer on stdout"

done_testing
