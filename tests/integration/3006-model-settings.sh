#!/usr/bin/env bash
# ModelSettings under the Agents SDK's names: each field reaches the request as the SDK sends
# it on the API in use (max_tokens is max_output_tokens on Responses and max_tokens on Chat,
# reasoning.effort is reasoning_effort on Chat, ...), extra_query and extra_headers reach the
# HTTP request, retry bounds the attempts, and a key that is no ModelSettings field is refused
# naming the field to use. 3007 holds the same bodies to the API's own schemas.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"

# The agent file with every ModelSettings field, shared with 3007.
. "$(dirname "$0")/settings-agent.sh"
settings_agent "$T/agent.yaml"

mk "$T/resp.json" '[resp(1, fcall(1, "calculator", {"expression": "1+1"})), resp(2, msg("two"))]'
start_fake "$T/resp.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent.yaml" "add"
expect_rc 0 "a run with every ModelSettings field succeeds (Responses)"
q() { fake_query "$1"; }
expect_eq "$(q '(reqs[0]["body"].get("max_output_tokens"), "max_tokens" in reqs[0]["body"])')" "(2000, False)" \
    "max_tokens is max_output_tokens on Responses"
expect_eq "$(q 'reqs[0]["body"]["text"]')" "{'verbosity': 'low'}" "verbosity is text.verbosity"
expect_eq "$(q 'sorted(reqs[0]["body"]["include"])')" "['message.output_text.logprobs', 'reasoning.encrypted_content']" \
    "response_include, and top_logprobs asks for the logprobs"
expect_eq "$(q '[reqs[0]["body"].get(k) for k in ("temperature", "top_p", "truncation", "store", "top_logprobs", "prompt_cache_retention")]')" \
    "[0.2, 0.9, 'auto', False, 3, '24h']" "the fields of the same name are sent as they are"
expect_eq "$(q '[reqs[0]["body"].get(k) for k in ("reasoning", "metadata", "prompt_cache_options", "context_management")]')" \
    "[{'effort': 'high', 'summary': 'auto'}, {'team': 'sbx'}, {'mode': 'explicit', 'ttl': '30m'}, [{'type': 'compaction', 'compact_threshold': 100000}]]" \
    "object fields are sent as they are"
expect_eq "$(q '[k for k in ("frequency_penalty", "presence_penalty", "stream_options", "include_usage", "verbosity", "timeout", "retry") if k in reqs[0]["body"]]')" \
    "[]" "fields Responses lacks are not sent there"
expect_eq "$(q '(reqs[0]["body"]["tool_choice"], reqs[0]["body"]["parallel_tool_calls"])')" \
    "({'type': 'function', 'name': 'calculator'}, False)" "tool_choice names the tool; parallel_tool_calls is sent with tools"
expect_eq "$(q '"tool_choice" in reqs[1]["body"]')" "False" "tool_choice is reset after the tool ran, as the SDK does"
expect_eq "$(q '(reqs[0]["body"].get("safety_identifier"), reqs[0]["body"].get("service_tier"))')" "('user-1', 'auto')" \
    "extra_args and extra_body are merged as they are"
expect_eq "$(q 'reqs[0]["path"]')" "/v1/responses?api-version=2025-01-01" "extra_query is the URL's query"
expect_eq "$(q '(reqs[0]["headers"].get("x-team"), reqs[0]["headers"].get("user-agent","").startswith("sbx/"))')" "('sbx', True)" \
    "extra_headers are sent beside sbx's own"

mk "$T/chat.json" '[{"chat": {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}}]}, "finish_reason": "tool_calls"}]}}, chat_msg("two")]'
start_fake "$T/chat.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/agent.yaml" "add"
expect_rc 0 "a run with every ModelSettings field succeeds (Chat)"
expect_eq "$(q '[reqs[0]["body"].get(k) for k in ("max_tokens", "reasoning_effort", "verbosity", "logprobs", "top_logprobs", "frequency_penalty", "presence_penalty")]')" \
    "[2000, 'high', 'low', True, 3, 0.1, 0.2]" "Chat: max_tokens, reasoning_effort, verbosity, logprobs with top_logprobs, penalties"
expect_eq "$(q 'reqs[0]["body"]["stream_options"]')" "{'include_usage': True}" "Chat: include_usage is stream_options"
expect_eq "$(q '[k for k in ("max_output_tokens", "reasoning", "truncation", "include", "text", "context_management") if k in reqs[0]["body"]]')" \
    "[]" "Chat: fields Chat lacks are not sent there"
expect_eq "$(q 'reqs[0]["body"]["tool_choice"]')" "{'type': 'function', 'function': {'name': 'calculator'}}" \
    "Chat: tool_choice in Chat's form"

# include_usage false is the user's to give.
printf 'name: a\nmodel_settings: {include_usage: false}\n' >"$T/nousage.yaml"
mk "$T/chat1.json" '[chat_msg("ok")]'
start_fake "$T/chat1.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/nousage.yaml" "hi"
expect_eq "$(q 'reqs[0]["body"]["stream_options"]')" "{'include_usage': False}" "Chat: include_usage false is sent"

# retry.max_retries bounds the attempts (the default would try 4 times).
printf 'name: a\nmodel_settings: {retry: {max_retries: 1, backoff: {initial_delay: 0.01}}}\n' >"$T/retry.yaml"
cat >"$T/fail.json" <<'JSON'
{"turns": [{"status": 500, "body": {"error": {"message": "down"}}}, {"status": 500, "body": {"error": {"message": "down"}}}, {"status": 500, "body": {"error": {"message": "down"}}}]}
JSON
start_fake "$T/fail.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/retry.yaml" "hi"
expect_rc 1 "a failing server fails the run"
expect_eq "$(q 'len(reqs)')" "2" "retry.max_retries 1: two attempts"

# --- refused settings name the field to use ---
refused() { # YAML-SETTINGS WANT DESC
    printf 'name: a\nmodel_settings: %s\n' "$1" >"$T/bad.yaml"
    run "$SBX" run --base-url "$FAKE_URL" -a "$T/bad.yaml" "hi"
    expect_rc 1 "$3 is refused"
    expect_in "$T/err" "$2" "$3: the message says what to use"
}
refused '{max_output_tokens: 10}' "unknown model setting 'max_output_tokens': its ModelSettings name is max_tokens" "an API field name"
refused '{reasoning_effort: low}' "its ModelSettings name is reasoning (as {effort: ...})" "Chat's reasoning_effort"
refused '{maxTokens: 10}' "its ModelSettings name is max_tokens" "the JS SDK's camelCase name"
refused '{temprature: 1}' "unknown model setting 'temprature': not a ModelSettings field (a request field the API takes as it is goes under extra_args)" "a misspelt field"
refused '{truncation: sometimes}' "model setting 'truncation' must be one of 'auto' 'disabled'" "a bad truncation"
refused '{max_tokens: 0}' "model setting 'max_tokens' must be a whole number, 1 or more" "max_tokens 0"
refused '{extra_headers: {"X-A": "a\r\nX-B: b"}}' "header 'X-A' has a bad name or value" "a header with a line break"
refused '{extra_args: {model: other}}' "model setting 'extra_args': field 'model' is already set" "extra_args overriding the model"
printf 'name: a\nmodel_settings: {temperature: null, max_tokens: null}\n' >"$T/nulls.yaml"
mk "$T/one.json" '[resp(1, msg("ok"))]'
start_fake "$T/one.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/nulls.yaml" "hi"
expect_rc 0 "null fields are unset fields"
expect_eq "$(q '[k for k in ("temperature", "max_output_tokens", "max_tokens") if k in reqs[0]["body"]]')" "[]" "and are not sent"
done_testing
