#!/usr/bin/env bash
# Prompts and variables through `sbx run` and the fake model server: instruction templates
# filled from --var, --vars-file and SBX_VAR_<NAME> in their precedence, missing and unused
# variables, the Responses API prompt object as the request carries it, its refusal on the
# Chat Completions API; --workflow, --group-id and --trace-metadata in every exporter (the
# JSONL file, OTLP decoded from its protobuf, the OpenAI traces payload, `sbx trace show`); a
# resumed run keeps the variables and the trace identity, never a secret variable.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/npm-lib.sh"
COL_PID=
stop_collector() {
    if [ -n "$COL_PID" ]; then
        kill "$COL_PID" 2>/dev/null
        wait "$COL_PID" 2>/dev/null
        COL_PID=
    fi
}
trap 'stop_fake; stop_collector; rm -rf "$T"' EXIT
start_collector() {
    COL="$T/col"
    mkdir -p "$COL"
    python3 "$SBX_SRCDIR/tests/fake-model/otlp-collector.py" ok "$COL" >"$T/cport" &
    COL_PID=$!
    wait_until test -s "$T/cport"
    COL_URL="http://127.0.0.1:$(head -n1 "$T/cport")"
}
body() { fake_query "reqs[$1]['body']$2"; }
unset $(env | sed -n 's/^\(SBX_VAR_[^=]*\)=.*/\1/p')

cat >"$T/desk.yaml" <<'EOF'
name: Desk
model: gpt-4.1
instructions: "Serve {{customer}} in {{ lang }}. Write \\{{customer}} for the form; {{.ID}} stays."
tools: [add]
needs_approval: [add]
prompt:
  id: pmpt_desk
  version: "7"
  variables:
    customer: null
    greeting: "Dear {{customer}}"
    note: {type: input_text, text: "reply in {{lang}}"}
    guide: {type: input_file, file_id: file-abc}
EOF

# --- templates, precedence, the prompt object --------------------------------------------------
mk "$T/s1.json" '[resp(1, msg("done"))]'
start_fake "$T/s1.json"
printf 'customer: from-file\nlang: Welsh\nzip: 12345\n' >"$T/vars.yaml"
SBX_VAR_customer=from-env SBX_VAR_lang=from-env SBX_VAR_unused_env=x run "$SBX" run \
    --base-url "$FAKE_URL" -a "$T/desk.yaml" --vars-file "$T/vars.yaml" \
    --var 'customer=Ann {{lang}}' "hello"
expect_rc 0 "a run with variables from the command line, a file and the environment"
expect_eq "$(body 0 "['instructions']")" "Serve Ann {{lang}} in Welsh. Write {{customer}} for the form; {{.ID}} stays." \
    "--var over --vars-file over SBX_VAR_; a value is never expanded again; escapes and non-variables stay"
expect_eq "$(body 0 "['prompt']")" "{'id': 'pmpt_desk', 'version': '7', 'variables': {'customer': 'Ann {{lang}}', 'greeting': 'Dear Ann {{lang}}', 'note': {'type': 'input_text', 'text': 'reply in Welsh'}, 'guide': {'type': 'input_file', 'file_id': 'file-abc'}}}" \
    "the request carries the prompt object, its variables filled"
expect_in "$T/err" "warning: variable 'zip' (--vars-file) is used by no agent's instructions or prompt" "an unused file value is warned of"
expect_in "$T/err" "warning: variable 'unused_env' (environment) is used by no agent" "an unused SBX_VAR_ value is warned of"
expect_not_in "$T/err" "variable 'customer' (" "a used variable is not"

# The body, prompt object included, held to the OpenAI client library's request type (generated
# from the API's OpenAPI document), when the pinned npm packages can be had (npm-lib.sh); and the
# check fails on a variable item the API does not take there.
cp "$FAKE_LOG" "$T/prompt-req.jsonl"
(agents_js) >/dev/null 2>&1
AJ="${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/agents-js-$AGENTS_JS_VERSION"
tsc_check() { # LOG OUT: 0 when every body types
    python3 "$SBX_SRCDIR/tests/integration/request-types.py" "$1" >"$T/bodies.ts" &&
        ln -sfn "$AJ/node_modules" "$T/node_modules" &&
        "$AJ/node_modules/.bin/tsc" --noEmit --strict --skipLibCheck --target es2022 \
            --module nodenext --moduleResolution nodenext "$T/bodies.ts" >"$2" 2>&1
}
if [ -x "$AJ/node_modules/.bin/tsc" ]; then
    if tsc_check "$T/prompt-req.jsonl" "$T/tsc.out"; then ok "the request with its prompt object types with the OpenAI library's"
    else not_ok "the request with its prompt object types with the OpenAI library's"; diag "$(head -c 3000 "$T/tsc.out")"; fi
    python3 -c 'import json,sys
r = json.loads(open(sys.argv[1]).readline())
r["body"]["prompt"]["variables"]["guide"] = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
print(json.dumps(r))' "$T/prompt-req.jsonl" >"$T/bad-req.jsonl"
    tsc_check "$T/bad-req.jsonl" "$T/tsc-bad.out"
    expect_in "$T/tsc-bad.out" "input_audio" "the type check refuses a variable item the API does not take"
else
    echo "# the pinned npm packages (npm-lib.sh) are not available: the request type check is not run"
fi

# --- a variable nobody gives: refused before the model is asked -------------------------------
run "$SBX" run --base-url "$FAKE_URL" -a "$T/desk.yaml" --var lang=Welsh "hello"
expect_rc 1 "a missing variable stops the run"
expect_in "$T/err" "agent 'Desk': instructions: variable 'customer' is not given (give --var NAME=VALUE, --vars-file FILE or SBX_VAR_NAME)" \
    "the error names the variable and the agent"
expect_eq "$(fake_query 'len(reqs)')" "1" "no model request was made"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/desk.yaml" --var 'bad-name=x' "hello"
expect_rc 2 "a bad variable name is a usage error"
expect_in "$T/err" "--var wants NAME=VALUE" "and says the form"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/desk.yaml" --var a=1 --var a=2 "hello"
expect_rc 2 "a variable given twice is a usage error"
printf -- '- a\n' >"$T/list.yaml"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/desk.yaml" --vars-file "$T/list.yaml" "hello"
expect_rc 1 "a vars file that is no mapping is refused"
expect_in "$T/err" "must hold a mapping of names to values" "and says so"

# --- the Chat Completions API has no prompt object ---------------------------------------------
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/desk.yaml" --var customer=a --var lang=b "hello"
expect_rc 1 "a stored prompt on --api chat is refused"
expect_in "$T/err" "agent 'Desk' names a stored prompt ('prompt'), which only the Responses API has" "with the reason"
expect_eq "$(fake_query 'len(reqs)')" "1" "before any request"

# --- the trace identity in every exporter ------------------------------------------------------
start_collector
mk "$T/s2.json" '[resp(1, msg("traced"))]'
start_fake "$T/s2.json"
SBX_TRACE_OPENAI_URL="$COL_URL/v1/traces/ingest" run "$SBX" run --base-url "$FAKE_URL" \
    -a "$T/desk.yaml" --var customer=Bo --var lang=Welsh --trace "$T/t.jsonl" \
    --trace-otlp "$COL_URL" --trace-openai --workflow "Support desk" --group-id thread-42 \
    --trace-metadata team=billing --trace-metadata 'tier=gold plus' "hello"
expect_rc 0 "a traced run with a workflow, a group and metadata"
runattrs() { python3 -c 'import json,sys
for l in open(sys.argv[1]):
    s = json.loads(l)
    if s["name"] == "run": print(sorted((k, v) for k, v in s["attributes"].items() if k.startswith(("sbx.workflow", "sbx.trace."))))' "$1"; }
WANT="[('sbx.trace.group_id', 'thread-42'), ('sbx.trace.metadata.team', 'billing'), ('sbx.trace.metadata.tier', 'gold plus'), ('sbx.workflow.name', 'Support desk')]"
expect_eq "$(runattrs "$T/t.jsonl")" "$WANT" "the JSONL file: the run span's attributes"
run "$SBX" trace show "$T/t.jsonl"
expect_in "$T/out" "run workflow 'Support desk' group thread-42 team=billing tier=gold plus" "sbx trace show names them on the run line"
# OTLP: the ExportTraceServiceRequest's run span, read from the protobuf wire format.
cat >"$T/otlp.py" <<'PY'
import glob, sys
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, t = key >> 3, key & 7
        if t == 0:
            v, i = varint(b, i)
        elif t == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        elif t == 1:
            v = b[i:i + 8]; i += 8
        elif t == 5:
            v = b[i:i + 4]; i += 4
        else:
            raise SystemExit("bad wire type %d" % t)
        yield f, v
def varint(b, i):
    s = r = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if not c & 0x80: return r, i
out = []
for p in sorted(glob.glob(sys.argv[1] + "/*.bin")):
    if open(p[:-4] + ".meta").read().split()[0] != "/v1/traces": continue
    for f1, rs in fields(open(p, "rb").read()):
        for f2, ss in fields(rs):
            if f2 != 2: continue
            for f3, sp in fields(ss):
                if f3 != 2: continue
                d = dict(); attrs = []
                for f4, v in fields(sp):
                    if f4 == 5: d["name"] = v.decode()
                    if f4 == 9:
                        kv = dict(fields(v)); val = dict(fields(kv.get(2, b"")))
                        if 1 in val: attrs.append((kv[1].decode(), val[1].decode()))
                if d.get("name") == "run":
                    out.append(sorted(a for a in attrs if a[0].startswith(("sbx.workflow", "sbx.trace."))))
print(out[0] if len(out) == 1 else out)
PY
wait_until python3 -c 'import glob,sys; sys.exit(0 if any(open(m).read().startswith("/v1/traces ") for m in glob.glob(sys.argv[1]+"/*.meta")) else 1)' "$COL"
expect_eq "$(python3 "$T/otlp.py" "$COL")" "$WANT" "OTLP: the run span's attributes"
oai() { python3 -c 'import glob,json,sys
items = []
for p in sorted(glob.glob(sys.argv[1] + "/*.bin")):
    if open(p[:-4] + ".meta").read().split()[0] == "/v1/traces/ingest":
        items += json.load(open(p))["data"]
print(eval(sys.argv[2]))' "$COL" "$1"; }
expect_eq "$(oai '[(t["workflow_name"], t["group_id"], t["metadata"]) for t in items if t["object"] == "trace"]')" \
    "[('Support desk', 'thread-42', {'team': 'billing', 'tier': 'gold plus'})]" "OpenAI traces: the trace object's workflow_name, group_id and metadata"
expect_eq "$(oai '[s["span_data"]["data"]["name"] for s in items if s["object"] == "trace.span" and s["span_data"].get("name") == "task"]')" \
    "['Support desk']" "OpenAI traces: the task span is named after the workflow"
# A secret the run knows never leaves in the trace identity either.
mk "$T/s2b.json" '[resp(1, msg("traced"))]'
start_fake "$T/s2b.json"
SBX_TRACE_OPENAI_URL="$COL_URL/v1/traces/ingest" run "$SBX" run --base-url "$FAKE_URL" \
    -a "$T/desk.yaml" --var customer=Bo --var lang=Welsh --trace "$T/t-leak.jsonl" --trace-openai \
    --workflow "wf $OPENAI_API_KEY" --trace-metadata "leak=$OPENAI_API_KEY" "hello"
expect_rc 0 "a run whose trace identity holds the API key"
expect_eq "$(oai '[(t["workflow_name"], t["metadata"]) for t in items if t["object"] == "trace"][-1]')" \
    "('wf [redacted]', {'leak': '[redacted]'})" "OpenAI traces: the key is redacted from the trace object"
expect_not_in "$T/t-leak.jsonl" "$OPENAI_API_KEY" "and from the run span's attributes"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/desk.yaml" --workflow "" "hello"
expect_rc 2 "an empty workflow name is a usage error"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/desk.yaml" --trace-metadata novalue "hello"
expect_rc 2 "metadata without a value is a usage error"

# --- a resumed run keeps the variables and the trace identity, not a secret ---------------------
cat >"$T/sec.yaml" <<'EOF'
name: Desk
model: gpt-4.1
instructions: "Serve {{customer}} with key {{token}}."
tools: [add]
needs_approval: [add]
EOF
mk "$T/s3.json" '[resp(1, fcall(1, "add", {"a": 1, "b": 2})), resp(2, msg("three"))]'
start_fake "$T/s3.json"
MYTOK=tok-SECRET-4711 run "$SBX" run --base-url "$FAKE_URL" -a "$T/sec.yaml" --state "$T/st.json" \
    --var customer=Cy --var-secret token=env:MYTOK --workflow "Resumable" --group-id g-1 \
    --trace-metadata k=v "add them"
expect_rc 4 "the run stops for approval"
expect_eq "$(body 0 "['instructions']")" "Serve Cy with key tok-SECRET-4711." "a secret variable fills the instructions"
expect_not_in "$T/st.json" "tok-SECRET-4711" "the run state holds no secret value"
expect_eq "$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["meta"]["cli"]; print(c["variables"], c["secret_variables"], c["workflow"], c["group_id"], c["trace_metadata"])' "$T/st.json")" \
    "{'customer': 'Cy'} ['token'] Resumable g-1 {'k': 'v'}" "the state keeps the other variables and the trace identity"
run "$SBX" state show "$T/st.json"
expect_in "$T/out" "workflow: Resumable  group g-1  k=v" "sbx state show names the trace identity"
expect_in "$T/out" "variables: customer token (secret: give it again)" "and the variables a resume takes"
run "$SBX" state show --json "$T/st.json"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["workflow"], s["group_id"], s["trace_metadata"], s["variables"], s["secret_variables"])' "$T/out")" \
    "Resumable g-1 {'k': 'v'} {'customer': 'Cy'} ['token']" "sbx state show --json holds them"
run "$SBX" run --base-url "$FAKE_URL" --resume "$T/st.json" -a "$T/sec.yaml" --approve c1
expect_rc 1 "a resume without the secret variable stops"
expect_in "$T/err" "variable 'token' is not given: it was a --var-secret of the saved run, and secret values are never saved" "and says why"
MYTOK=tok-SECRET-4711 run "$SBX" run --base-url "$FAKE_URL" --resume "$T/st.json" -a "$T/sec.yaml" \
    --var-secret token=env:MYTOK --approve c1 --trace "$T/t2.jsonl"
expect_rc 0 "the resumed run completes"
expect_eq "$(body 1 "['instructions']")" "Serve Cy with key tok-SECRET-4711." "the resumed run's instructions are filled from the saved variables"
expect_eq "$(runattrs "$T/t2.jsonl")" "[('sbx.trace.group_id', 'g-1'), ('sbx.trace.metadata.k', 'v'), ('sbx.workflow.name', 'Resumable')]" \
    "the resumed run's trace keeps the workflow, group and metadata"
expect_not_in "$T/t2.jsonl" "tok-SECRET-4711" "the trace holds no secret value"

# --- an older state (no variables saved) still resumes ------------------------------------------
mk "$T/s4.json" '[resp(1, fcall(1, "add", {"a": 1, "b": 2})), resp(2, msg("three"))]'
start_fake "$T/s4.json"
MYTOK=t run "$SBX" run --base-url "$FAKE_URL" -a "$T/sec.yaml" --state "$T/old.json" \
    --var customer=Di --var-secret token=env:MYTOK "add them"
expect_rc 4 "another run stops for approval"
python3 - "$T/old.json" <<'PY'
import hashlib, json, sys
p = sys.argv[1]
s = json.load(open(p))
for k in ("variables", "secret_variables", "workflow", "group_id", "trace_metadata"):
    s["meta"]["cli"].pop(k)
s.pop("digest", None)
canon = json.dumps(s, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
s["digest"] = "sha256:" + hashlib.sha256(canon.encode()).hexdigest()
json.dump(s, open(p, "w"), indent=2, sort_keys=True)
PY
MYTOK=t run "$SBX" run --base-url "$FAKE_URL" --resume "$T/old.json" -a "$T/sec.yaml" \
    --var customer=Di --var-secret token=env:MYTOK --approve c1 --trace "$T/t3.jsonl"
expect_rc 0 "a state written before variables were saved resumes"
expect_eq "$(body 1 "['instructions']")" "Serve Di with key t." "with the variables given again"
expect_eq "$(runattrs "$T/t3.jsonl")" "[]" "and the default trace identity"


# --- an Agents SDK run state's trace identity: imported, kept by the resume ---------------------
python3 - "$T/py.json" <<'PY'
import json, sys
call = {"type": "function_call", "call_id": "call_py", "name": "add",
        "arguments": "{\"a\": 1, \"b\": 2}", "id": "fc_py", "status": "completed"}
agent = {"name": "Desk"}
json.dump({"$schemaVersion": "1.17", "current_turn": 1, "current_agent": agent,
           "original_input": "add", "model_responses": [],
           "context": {"usage": {"requests": 1, "input_tokens": 5, "output_tokens": 3,
                                 "total_tokens": 8}, "approvals": {}, "context": {}},
           "tool_use_tracker": {"Desk": ["add"]}, "max_turns": 8,
           "no_active_agent_run": True, "input_guardrail_results": [],
           "output_guardrail_results": [], "conversation_id": None,
           "generated_items": [{"type": "tool_call_item", "raw_item": call, "agent": agent}],
           "current_step": {"type": "next_step_interruption", "data": {"interruptions": [
               {"type": "tool_approval_item", "raw_item": call, "agent": agent,
                "tool_name": "add"}]}},
           "trace": {"object": "trace", "id": "trace_0123456789abcdef0123456789abcdef",
                     "workflow_name": "Py desk", "group_id": "thread-py",
                     "metadata": {"team": "py", "n": 3}},
           "sandbox": None}, open(sys.argv[1], "w"))
PY
run "$SBX" state import "$T/py.json" -a "$T/sec.yaml" -o "$T/pst.json"
expect_rc 0 "a Python SDK run state with a trace imports"
expect_in "$T/err" "the run state's trace metadata 'n' is not imported" "metadata sbx cannot keep is named"
run "$SBX" state show "$T/pst.json"
expect_in "$T/out" "workflow: Py desk  group thread-py  team=py" "its workflow, group and metadata are kept"
mk "$T/s5.json" '[resp(2, msg("three"))]'
start_fake "$T/s5.json"
MYTOK=t run "$SBX" run --base-url "$FAKE_URL" --resume "$T/pst.json" -a "$T/sec.yaml" \
    --var customer=Ed --var-secret token=env:MYTOK --approve call_py --trace "$T/t4.jsonl"
expect_rc 0 "the imported run resumes"
expect_eq "$(runattrs "$T/t4.jsonl")" "[('sbx.trace.group_id', 'thread-py'), ('sbx.trace.metadata.team', 'py'), ('sbx.workflow.name', 'Py desk')]" \
    "and its trace has the SDK run's workflow, group and metadata"

done_testing
