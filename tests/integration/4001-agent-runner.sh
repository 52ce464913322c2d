#!/usr/bin/env bash
# The runner through sbx run: handoffs, agents as tools, tool-use behaviours, tool_choice
# reset, YAML agent files, and the offline example.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"

call() {
    printf '{"type":"function_call","id":"fc_%s","call_id":"%s","name":"%s","arguments":%s,"status":"completed"}' "$1" "$1" "$2" "$3"
}
msg() {
    printf '{"type":"message","id":"msg_x","role":"assistant","status":"completed","content":[{"type":"output_text","text":%s,"annotations":[]}]}' "$1"
}
resp() {
    local id=$1; shift
    local IFS=,
    printf '{"response":{"id":"%s","object":"response","status":"completed","output":[%s]}}' "$id" "$*"
}

# --- handoff: the transfer tool, the first one wins, history carried over ---
cat >"$T/triage.yaml" <<'EOF'
name: Triage
instructions: Route the user.
handoffs: [billing.yaml, support.yaml]
EOF
cat >"$T/billing.yaml" <<'EOF'
name: Billing Agent
instructions: You handle invoices.
handoff_description: Questions about invoices and payments.
tools: [add]
handoffs: [triage.yaml]
EOF
cat >"$T/support.yaml" <<'EOF'
name: support
instructions: You fix things.
EOF
cat >"$T/s1.json" <<EOF
{"turns": [$(resp r1 "$(call h1 transfer_to_billing_agent '"{}"')" "$(call h2 transfer_to_support '"{}"')"), $(resp r2 "$(msg '"Your invoice is paid."')")]}
EOF
start_fake "$T/s1.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/triage.yaml" "was my invoice paid?"
expect_rc 0 "handoff run succeeds"
expect_eq "$(cat "$T/out")" "Your invoice is paid." "the target agent answers"
expect_in "$T/err" "handoff Triage -> Billing Agent" "handoff shown on stderr"
expect_eq "$(fake_query '[t["name"] for t in reqs[0]["body"]["tools"]]')" "['transfer_to_billing_agent', 'transfer_to_support']" "one transfer tool per target"
fake_query '[t["description"] for t in reqs[0]["body"]["tools"]][0]' >"$T/d"
expect_in "$T/d" "Questions about invoices and payments." "handoff description offered"
expect_eq "$(fake_query 'reqs[1]["body"]["instructions"]')" "You handle invoices." "next turn runs the target agent"
expect_eq "$(fake_query '[t["name"] for t in reqs[1]["body"]["tools"]]')" "['add', 'transfer_to_triage']" "target agent's tools offered"
expect_eq "$(fake_query '[(i["call_id"], i["output"]) for i in reqs[1]["body"]["input"] if i.get("type")=="function_call_output"]')" "[('h1', '{\"assistant\":\"Billing Agent\"}'), ('h2', 'Multiple handoffs detected, ignoring this one.')]" "first handoff wins, the other is told"
expect_eq "$(fake_query 'reqs[1]["body"]["input"][0]["content"]')" "was my invoice paid?" "history carried over"

# --- an agent as a tool: a nested run whose final output is the tool's output ---
cat >"$T/writer.yaml" <<'EOF'
name: writer
instructions: Write, asking the translator when needed.
agents_as_tools:
  - file: translator.yaml
    name: translate
    description: Translate text to English.
EOF
cat >"$T/translator.yaml" <<'EOF'
name: translator
instructions: Translate to English.
EOF
cat >"$T/s2.json" <<EOF
{"turns": [$(resp r1 "$(call t1 translate '"{\"input\":\"hola mundo\"}"')"), $(resp r2 "$(msg '"hello world"')"), $(resp r3 "$(msg '"It means: hello world."')")]}
EOF
start_fake "$T/s2.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/writer.yaml" "what does hola mundo mean?"
expect_rc 0 "agent-as-tool run succeeds"
expect_eq "$(cat "$T/out")" "It means: hello world." "outer agent's final output"
expect_eq "$(fake_query 'reqs[0]["body"]["tools"][0]["parameters"]["required"]')" "['input']" "agent tool takes one input string"
expect_eq "$(fake_query 'reqs[1]["body"]["instructions"]')" "Translate to English." "nested run uses the inner agent"
expect_eq "$(fake_query 'reqs[1]["body"]["input"]')" "[{'type': 'message', 'role': 'user', 'content': 'hola mundo'}]" "nested run starts from the tool input"
expect_eq "$(fake_query '[i["output"] for i in reqs[2]["body"]["input"] if i.get("type")=="function_call_output"]')" "['hello world']" "nested final output is the tool output"
expect_in "$T/err" 'tool translate({"input":"hola mundo"}) -> hello world' "agent tool shown as one tool line"

# --- stop_on_first_tool and stop_at_tool_names ---
cat >"$T/stop.yaml" <<'EOF'
name: stopper
tools: [add, calculator]
tool_use_behavior: stop_on_first_tool
EOF
cat >"$T/s3.json" <<EOF
{"turns": [$(resp r1 "$(call c1 add '"{\"a\":40,\"b\":2}"')")]}
EOF
start_fake "$T/s3.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/stop.yaml" "add"
expect_rc 0 "stop_on_first_tool ends after the tool"
expect_eq "$(cat "$T/out")" "42" "tool output is the final output"
expect_eq "$(fake_query 'len(reqs)')" 1 "no second model call"
cat >"$T/stopat.yaml" <<'EOF'
name: stopper
tools: [add, calculator]
tool_use_behavior: {stop_at_tool_names: [calculator]}
EOF
cat >"$T/s4.json" <<EOF
{"turns": [$(resp r1 "$(call c1 add '"{\"a\":1,\"b\":2}"')"), $(resp r2 "$(call c2 calculator '"{\"expression\":\"7*6\"}"')")]}
EOF
start_fake "$T/s4.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/stopat.yaml" "go"
expect_rc 0 "stop_at_tool_names run succeeds"
expect_eq "$(cat "$T/out")" "42" "named tool's output is final"
expect_eq "$(fake_query 'len(reqs)')" 2 "other tools let the run go on"

# --- tool_choice is reset after a tool ran ---
cat >"$T/forced.yaml" <<'EOF'
name: forced
tools: [add]
tool_choice: add
EOF
cat >"$T/s5.json" <<EOF
{"turns": [$(resp r1 "$(call c1 add '"{\"a\":1,\"b\":2}"')"), $(resp r2 "$(msg '"3"')")]}
EOF
start_fake "$T/s5.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/forced.yaml" "go"
expect_rc 0 "forced tool run succeeds"
expect_eq "$(fake_query 'reqs[0]["body"]["tool_choice"]')" "{'type': 'function', 'name': 'add'}" "tool_choice forces the tool"
expect_eq "$(fake_query '"tool_choice" in reqs[1]["body"]')" "False" "tool_choice reset after the tool ran"
expect_eq "$(fake_query 'reqs[0]["body"]["parallel_tool_calls"] if "parallel_tool_calls" in reqs[0]["body"] else "unset"')" "unset" "parallel_tool_calls left to the server"

# --- model settings and the agent's model name ---
cat >"$T/settings.yaml" <<'EOF'
name: tuned
model: my-model
model_settings: {temperature: 0.5, max_tokens: 100}
EOF
cat >"$T/s6.json" <<EOF
{"turns": [$(resp r1 "$(msg '"ok"')"), $(resp r2 "$(msg '"ok"')")]}
EOF
start_fake "$T/s6.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/settings.yaml" "go"
expect_eq "$(fake_query '(reqs[0]["body"]["model"], reqs[0]["body"]["temperature"], reqs[0]["body"]["max_output_tokens"])')" "('my-model', 0.5, 100)" "agent model and settings sent"
run "$SBX" run -m other-model --base-url "$FAKE_URL" -a "$T/settings.yaml" "go"
expect_eq "$(fake_query 'reqs[1]["body"]["model"]')" "other-model" "-m overrides the agent's model"
cat >"$T/clash.yaml" <<'EOF'
name: clash
model_settings: {extra_args: {input: "x"}}
EOF
run "$SBX" run --base-url "$FAKE_URL" -a "$T/clash.yaml" "go"
expect_rc 1 "a setting that clashes with a request field fails"
expect_in "$T/err" "model setting 'extra_args': field 'input' is already set" "clashing setting named"

# --- agent file errors ---
printf 'name: a\ntools: [rm_rf]\n' >"$T/badtool.yaml"
run "$SBX" run -m replay:/dev/null -a "$T/badtool.yaml" "x"
expect_rc 1 "unknown built-in tool fails"
expect_in "$T/err" "unknown built-in tool 'rm_rf'" "unknown tool named"
printf 'name: a\nhandoffs: [missing.yaml]\n' >"$T/badhandoff.yaml"
run "$SBX" run -m replay:/dev/null -a "$T/badhandoff.yaml" "x"
expect_rc 1 "missing handoff file fails"
expect_in "$T/err" "missing.yaml" "missing handoff file named"
printf 'instructions: x\n' >"$T/noname.yaml"
run "$SBX" run -m replay:/dev/null -a "$T/noname.yaml" "x"
expect_in "$T/err" "missing required field 'name'" "agent without a name refused"

# --- the offline example ---
cd "$SBX_SRCDIR"
run "$SBX" run -m replay:examples/shopping/run.jsonl -a examples/shopping/agent.yaml "I bought 3 notebooks at 2.49 and 2 pens at 1.15. What do I pay with 8% tax?"
expect_rc 0 "example runs offline"
expect_in "$T/out" "you pay 10.55" "example final output"
expect_in "$T/err" 'tool calculator({"expression":"9.77 * 1.08"}) -> 10.5516' "example tool calls really run"

done_testing
