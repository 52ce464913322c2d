#!/usr/bin/env bash
# The request bodies sbx sends, held to the OpenAI API's own schemas: an agent file with every
# ModelSettings field (3006's) and a tool call, over Responses (streaming and plain) and Chat
# Completions. Two checks, each able to fail on one wrong field:
#  - TypeScript types every body with the request type of the official OpenAI client library
#    (npm 'openai', whose types are generated from the API's OpenAPI document); an object
#    literal with a field its type lacks, or a value of the wrong type, fails `tsc`;
#  - when SBX_OPENAI_OPENAPI names the API's openapi.json (the openai-openapi repository), each
#    body is validated against its request schema (JSON Schema 2020-12) and walked for fields
#    the schema does not declare (tests/integration/openapi-check.py).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/npm-lib.sh"
. "$(dirname "$0")/settings-agent.sh"
agents_js
settings_agent "$T/agent.yaml"
# A plain agent too: the bodies without any setting must pass as well.
printf 'name: Plain\ninstructions: Answer.\ntools: [calculator]\noutput_schema: {type: object, properties: {n: {type: integer}}, required: [n], additionalProperties: false}\n' >"$T/plain.yaml"

LOG="$T/all.jsonl"
: >"$LOG"
collect() { cat "$FAKE_LOG" >>"$LOG"; }
mk "$T/resp.json" '[resp(1, fcall(1, "calculator", {"expression": "1+1"})), resp(2, msg("{\"n\": 2}"))]'
for agent in agent plain; do
    for stream in "" --no-stream; do
        start_fake "$T/resp.json"
        run "$SBX" run $stream --base-url "$FAKE_URL" -a "$T/$agent.yaml" "add"
        expect_rc 0 "responses ${stream:-streaming}, $agent agent"
        collect
    done
    mk "$T/chat.json" '[{"chat": {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}}]}, "finish_reason": "tool_calls"}]}}, chat_msg("{\"n\": 2}")]'
    start_fake "$T/chat.json"
    run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/$agent.yaml" "add"
    expect_rc 0 "chat, $agent agent"
    collect
done
expect_eq "$(FAKE_LOG=$LOG fake_query 'len(reqs)')" "12" "twelve request bodies"

tsc_check() { # LOG OUT: 0 when every body types
    python3 "$SBX_SRCDIR/tests/integration/request-types.py" "$1" >"$T/bodies.ts" &&
        ln -sfn "$AGENTS_JS_DIR/node_modules" "$T/node_modules" &&
        "$AGENTS_JS_DIR/node_modules/.bin/tsc" --noEmit --strict --skipLibCheck --target es2022 \
            --module nodenext --moduleResolution nodenext "$T/bodies.ts" >"$2" 2>&1
}
if tsc_check "$LOG" "$T/tsc.out"; then ok "every body types with the OpenAI library's request types"
else not_ok "every body types with the OpenAI library's request types"; diag "$(head -c 3000 "$T/tsc.out")"; fi

# The check fails on one misplaced field: max_tokens on Responses (what sbx sent before it
# mapped ModelSettings), max_output_tokens on Chat.
python3 - "$LOG" >"$T/bad.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["path"].split("?")[0].endswith("/responses"):
        r["body"]["max_tokens"] = r["body"].pop("max_output_tokens", 5)
    else:
        r["body"]["max_output_tokens"] = 5
    print(json.dumps(r))
PY
tsc_check "$T/bad.jsonl" "$T/tsc-bad.out"
expect_in "$T/tsc-bad.out" "'\"max_tokens\"' does not exist in type 'ResponseCreateParamsStreaming'" "the check finds max_tokens on Responses"
expect_in "$T/tsc-bad.out" "'\"max_output_tokens\"' does not exist in type 'ChatCompletionCreateParamsStreaming'" "the check finds max_output_tokens on Chat"

if [ -n "${SBX_OPENAI_OPENAPI:-}" ]; then
    if python3 -c 'import jsonschema, referencing' 2>/dev/null; then
        python3 "$SBX_SRCDIR/tests/integration/openapi-check.py" "$SBX_OPENAI_OPENAPI" "$LOG" >"$T/spec.out" 2>&1
        expect_eq "$?" 0 "every body is valid against the OpenAPI document's request schemas"
        [ "$(grep -c '^ok ' "$T/spec.out")" = 12 ] || diag "$(cat "$T/spec.out")"
        python3 "$SBX_SRCDIR/tests/integration/openapi-check.py" "$SBX_OPENAI_OPENAPI" "$T/bad.jsonl" >"$T/spec-bad.out" 2>&1
        expect_in "$T/spec-bad.out" "unknown field \$.max_tokens" "the OpenAPI check finds max_tokens on Responses"
    else
        echo "# SBX_OPENAI_OPENAPI is set but python3 lacks jsonschema/referencing: OpenAPI check not run"
    fi
else
    echo "# SBX_OPENAI_OPENAPI not set: the OpenAPI document check is not run (the type check is)"
fi
done_testing
