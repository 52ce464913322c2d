#!/usr/bin/env bash
# Tracing through `sbx run` and the fake model server (docs/internals/tracing.md): the span tree
# of a sandbox agent run with a shell call in the JSONL file and, decoded by protoc with the
# OpenTelemetry .proto files, in what an OTLP collector received; traceparent to the model
# server and from the caller; content only when asked, secrets never; `sbx trace show`; a
# collector that is down, slow or failing costs the run nothing but its spans.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
COL_PID=
stop_collector() {
    if [ -n "$COL_PID" ]; then
        kill "$COL_PID" 2>/dev/null
        wait "$COL_PID" 2>/dev/null
        COL_PID=
    fi
}
trap 'stop_fake; stop_collector; sandbox_cleanup' EXIT
CHECK="$SBX_SRCDIR/tests/integration/trace-check.py"

# start_collector MODE: a test collector on 127.0.0.1 saving what it gets in $T/col-MODE.
start_collector() {
    stop_collector
    COL="$T/col-$1"
    rm -rf "$COL"
    mkdir -p "$COL"
    rm -f "$T/cport"
    python3 "$SBX_SRCDIR/tests/fake-model/otlp-collector.py" "$1" "$COL" >"$T/cport" &
    COL_PID=$!
    wait_until test -s "$T/cport"
    COL_URL="http://127.0.0.1:$(head -n1 "$T/cport")"
}

cat >"$T/a.yaml" <<'EOF'
name: Worker
model: gpt-4.1
instructions: Do the work.
manifest:
  entries:
    notes.txt: {type: file, content: "alpha\n"}
EOF
echo 'USAGE = {"input_tokens": 11, "output_tokens": 5, "total_tokens": 16, "input_tokens_details": {"cached_tokens": 2}}' >"$T/usage.py"
export MK_EXTRA="$T/usage.py"
mk "$T/s.json" '[resp(1, fcall(1, "exec_command", {"cmd": "cat notes.txt; echo key=sk-test-SECRET-0123456789; exit 3"})), resp(2, msg("done"))]'

# --- JSONL: the span tree -------------------------------------------------------------------
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace "$T/t.jsonl" "go"
expect_rc 0 "a traced sandbox agent run completes"
expect_eq "$(stat -c %a "$T/t.jsonl")" 600 "the trace file is private (0600)"
python3 "$CHECK" tree "$T/t.jsonl" >"$T/bad"
expect_eq "$(cat "$T/bad")" "" "run > agent > turn > model call / tool call > sandbox.exec, create, rm"
python3 "$CHECK" semconv "$T/t.jsonl" >"$T/bad"
expect_eq "$(cat "$T/bad")" "" "span names and attributes follow the OpenTelemetry GenAI conventions"
expect_not_in "$T/t.jsonl" '"name":"sandbox.read"' "no sandbox.read span for the AGENTS.md probe (there is none)"
python3 -c '
import json, sys
need = {"trace_id", "span_id", "parent_span_id", "name", "kind", "start_unix_nano",
        "end_unix_nano", "status", "attributes"}
for l in open(sys.argv[1]):
    o = json.loads(l)
    assert need <= set(o), sorted(need - set(o))
print("fields ok")' "$T/t.jsonl" >"$T/f" 2>&1
expect_in "$T/f" "fields ok" "every line has the documented fields"
expect_not_in "$T/t.jsonl" "cat notes.txt" "no tool arguments without --trace-content"
expect_not_in "$T/t.jsonl" "Do the work" "no prompts without --trace-content"
expect_not_in "$T/t.jsonl" "SECRET-0123456789" "the API key is in no span"

# The model server got a traceparent naming each turn's model call span.
fake_query "'\n'.join(r['headers'].get('traceparent', '-') for r in reqs)" >"$T/tp"
python3 -c '
import json, sys
spans = [json.loads(l) for l in open(sys.argv[1])]
calls = sorted((s for s in spans if s["name"].startswith("chat ")), key=lambda s: s["start_unix_nano"])
print("\n".join("00-%s-%s-01" % (s["trace_id"], s["span_id"]) for s in calls))' "$T/t.jsonl" >"$T/tp-want"
expect_eq "$(cat "$T/tp")" "$(cat "$T/tp-want")" "each model request carries its model call's traceparent"

# --- sbx trace show --------------------------------------------------------------------------
run "$SBX" trace show "$T/t.jsonl"
expect_rc 0 "sbx trace show renders the file"
expect_in "$T/out" "run  " "the run is the root"
expect_in "$T/out" "|  |- turn # 1" "turns nest under the agent"
expect_in "$T/out" "chat gpt-4.1  " "model calls show their model (once, in their name)"
expect_in "$T/out" "in 11 out 5 cached 2" "and their token counts"
expect_in "$T/out" "execute_tool exec_command  " "tool calls show their tool"
expect_in "$T/out" "exit 3" "and the exit code"
expect_in "$T/out" "22 input tokens, 10 output tokens" "the totals"

# A hostile file: bad lines are reported by number, escapes never reach the terminal.
{
    head -n 2 "$T/t.jsonl"
    echo 'not json'
    printf '{"trace_id":"%s","span_id":"00000000000000aa","parent_span_id":null,"name":"evil\\u001b]0;pwned\\u0007","kind":"internal","start_unix_nano":1,"end_unix_nano":2,"status":"unset","attributes":{}}\n' "$(head -c 32 <<<"$(sed -n 's/.*"trace_id":"\([0-9a-f]*\)".*/\1/p' "$T/t.jsonl" | head -n1)")"
    echo '{"span_id": 5}'
    echo '[1,2'
    printf '{"trace_id":"%032d","span_id":"00000000000000b1","parent_span_id":"00000000000000b2","name":"x","kind":"internal","start_unix_nano":1,"end_unix_nano":2,"status":"unset","attributes":{}}\n' 1
    printf '{"trace_id":"%032d","span_id":"00000000000000b2","parent_span_id":"00000000000000b1","name":"y","kind":"internal","start_unix_nano":1,"end_unix_nano":2,"status":"unset","attributes":{}}\n' 1
    head -c 1100000 /dev/zero | tr '\0' 'a'
    echo
} >"$T/bad.jsonl"
run "$SBX" trace show "$T/bad.jsonl"
expect_rc 1 "a garbled file fails"
expect_in "$T/err" "line 3: " "naming the line that is not JSON"
expect_in "$T/err" "line 5: \"trace_id\" is not 32 lowercase hex digits" "a line that is not a span"
expect_in "$T/err" "line 6: " "a cut line"
expect_in "$T/err" "line 9: line longer than 1 MiB" "an overlong line"
expect_in "$T/err" "2 spans not shown: their parent links form a cycle" "a parent cycle"
expect_in "$T/out" 'evil\x1b]0;pwned\x07' "a name's escape sequence is shown, not sent"
if grep -q $'\x1b' "$T/out" "$T/err"; then not_ok "no raw escape in the output"; else ok "no raw escape in the output"; fi
run "$SBX" trace show "$T/nope.jsonl"
expect_rc 1 "a missing file fails"
expect_in "$T/err" "cannot open trace file" "and says so"

# Times and token counts at the ends of int64 (issue 27): a negative time or count is refused,
# durations and sums never wrap (UBSan stops an overflow in the ASan pass). The totals count
# model calls (gen_ai.operation.name chat): the turn and run spans repeat them.
span() { # span ID START END INPUT_TOKENS
    printf '{"trace_id":"%032d","span_id":"%016d","parent_span_id":null,"name":"s%s","start_unix_nano":%s,"end_unix_nano":%s,"attributes":{"gen_ai.operation.name":"chat","gen_ai.usage.input_tokens":%s}}\n' 7 "$1" "$1" "$2" "$3" "$4"
}
{
    span 1 -9223372036854775807 9223372036854775807 1
    span 2 0 1 9223372036854775807
    span 3 0 9223372036854775807 9223372036854775807
    span 4 5 6 -3
} >"$T/ovf.jsonl"
run "$SBX" trace show "$T/ovf.jsonl"
expect_rc 1 "a trace with a negative time fails"
expect_in "$T/err" 'line 1: "start_unix_nano" is negative' "naming the negative start time"
expect_in "$T/err" "line 4: a token count is not an integer of at least 0" "and the negative token count"
expect_in "$T/out" "s3  9223372036.85s" "a duration of the whole int64 range is shown as it is"
expect_in "$T/out" "2 spans, at least 9223372036854775807 input tokens" "a token total too big for int64 is held, not wrapped"
expect_not_in "$T/out" "-" "nothing negative is printed"

# --- --trace-content, bounded and scrubbed; --trace-parent and TRACEPARENT ---------------------
start_fake "$T/s.json"
TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace "$T/c.jsonl" --trace-content \
    --trace-parent "$TP" "go"
expect_rc 0 "a run with --trace-content and --trace-parent"
expect_in "$T/c.jsonl" "cat notes.txt" "tool arguments recorded with --trace-content"
expect_in "$T/c.jsonl" "Do the work" "instructions recorded with --trace-content"
expect_in "$T/c.jsonl" "key=[redacted]" "secrets redacted from content"
expect_not_in "$T/c.jsonl" "SECRET-0123456789" "the API key is in no span"
python3 -c '
import json, sys
spans = [json.loads(l) for l in open(sys.argv[1])]
run = [s for s in spans if s["name"] == "run"][0]
print(run["trace_id"], run["parent_span_id"], len({s["trace_id"] for s in spans}))' "$T/c.jsonl" >"$T/p"
expect_eq "$(cat "$T/p")" "4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 1" "the run joins the caller's trace under its span"
expect_in "$FAKE_LOG" '"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-' "and the model server sees that trace"
start_fake "$T/s.json"
TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-00 \
    run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace "$T/e.jsonl" "go"
expect_rc 0 "TRACEPARENT from the environment"
expect_in "$T/e.jsonl" '"parent_span_id":"2222222222222222"' "is the run's parent"
for bad in 00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01 \
    00-00000000000000000000000000000000-00f067aa0ba902b7-01 01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 x; do
    run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace "$T/x.jsonl" --trace-parent "$bad" "go"
    expect_rc 1 "a bad --trace-parent '$bad' is refused"
    expect_in "$T/err" "--trace-parent: bad traceparent '$bad'" "naming the value"
done
TRACEPARENT=garbage run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace "$T/x.jsonl" "go"
expect_rc 1 "a bad TRACEPARENT is refused"
expect_in "$T/err" "TRACEPARENT: bad traceparent 'garbage'" "naming the variable"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace-content "go"
expect_rc 1 "--trace-content alone is refused"
expect_in "$T/err" "--trace-content needs --trace FILE, --trace-otlp URL or --trace-openai" "and says why"

# --- retries and failures: a plain agent, a 429 first; then a run whose model always fails -------
cat >"$T/r.json" <<'EOF'
{"turns": [{"status": 429, "headers": {"retry-after": "0"}, "body": {"error": {"message": "slow down"}}},
           {"response": {"id": "r1", "object": "response", "status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "fine"}]}]}}]}
EOF
start_fake "$T/r.json"
run "$SBX" run --base-url "$FAKE_URL" -m gpt-4.1 --trace "$T/r.jsonl" "hi"
expect_rc 0 "a plain agent's traced run with a retried model call"
python3 -c '
import json, sys
spans = {s["name"]: s for s in map(json.loads, open(sys.argv[1]))}
m = spans["chat gpt-4.1"]["attributes"]
print(sorted(spans), m["sbx.model.retries"], spans["invoke_agent assistant"]["parent_span_id"] == spans["run"]["span_id"])' "$T/r.jsonl" >"$T/p"
expect_eq "$(cat "$T/p")" "['chat gpt-4.1', 'invoke_agent assistant', 'run', 'turn'] 1 True" "run > agent > turn > model call, one retry"
fake_query "len({r['headers']['traceparent'] for r in reqs})" >"$T/n"
expect_eq "$(cat "$T/n")" 1 "the retry carries the same traceparent"
cat >"$T/f.json" <<'EOF'
{"turns": [{"status": 500, "headers": {"retry-after": "0"}, "body": {"error": {"message": "down"}}},
           {"status": 500, "headers": {"retry-after": "0"}, "body": {"error": {"message": "down"}}}]}
EOF
start_fake "$T/f.json"
run "$SBX" run --base-url "$FAKE_URL" -m gpt-4.1 --retries 1 --trace "$T/f.jsonl" "hi"
expect_rc 1 "a run whose model fails"
python3 -c '
import json, sys
spans = {s["name"]: s for s in map(json.loads, open(sys.argv[1]))}
print(" ".join("%s=%s" % (n.split()[0], spans[n]["status"]) for n in ("run", "invoke_agent assistant", "turn", "chat gpt-4.1")),
      spans["chat gpt-4.1"]["attributes"].get("http.response.status_code"),
      "down" in spans["chat gpt-4.1"].get("status_message", ""))' "$T/f.jsonl" >"$T/p"
expect_eq "$(cat "$T/p")" "run=error invoke_agent=error turn=error chat=error 500 True" "still writes every span, with the error"

# --- the trace file is never written through a symlink ----------------------------------------
ln -s "$T/target" "$T/link.jsonl"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace "$T/link.jsonl" "go"
expect_rc 1 "--trace onto a symlink is refused"
expect_in "$T/err" "cannot create trace file '$T/link.jsonl'" "naming the file"
[ -e "$T/target" ] && not_ok "nothing written through the symlink" || ok "nothing written through the symlink"

# --- OTLP: the same tree as the JSONL file, decoded with the OpenTelemetry protos ------------
start_fake "$T/s.json"
start_collector ok
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace "$T/o.jsonl" --trace-otlp "$COL_URL" "go"
expect_rc 0 "a run with --trace and --trace-otlp"
expect_not_in "$T/err" "dropped" "no span dropped"
expect_eq "$(cat "$COL"/*.meta | sort -u)" "/v1/traces application/x-protobuf" "POST URL/v1/traces as application/x-protobuf"
PROTOS=
if command -v protoc >/dev/null && command -v npm >/dev/null; then
    # Fetched at test time, never committed: a package that ships opentelemetry-proto's files.
    (cd "$T" && npm_config_cache="$T/npm-cache" timeout 120 npm pack --silent @opentelemetry/exporter-collector-proto@0.25.0 >/dev/null 2>&1 &&
        mkdir -p npm && tar xzf opentelemetry-exporter-collector-proto-0.25.0.tgz -C npm) &&
        PROTOS="$T/npm/package/build/protos"
fi
if [ -n "$PROTOS" ] && [ -f "$PROTOS/opentelemetry/proto/collector/trace/v1/trace_service.proto" ]; then
    for f in "$COL"/*.bin; do
        protoc -I "$PROTOS" --decode opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest \
            opentelemetry/proto/collector/trace/v1/trace_service.proto <"$f" >"$f.txt" 2>"$T/protoc.err" ||
            not_ok "protoc decodes $(basename "$f")"
    done
    python3 "$CHECK" decode "$COL"/*.bin.txt >"$T/otlp.jsonl"
    python3 "$CHECK" same "$T/o.jsonl" "$T/otlp.jsonl" >"$T/diff"
    expect_eq "$(cat "$T/diff")" "" "the collector got the same spans (ids, parents, names, kinds, times, attributes, status)"
    python3 "$CHECK" tree "$T/otlp.jsonl" >"$T/bad"
    expect_eq "$(cat "$T/bad")" "" "and the same tree"
    python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())["resource"]
print(r["service.name"], r["telemetry.sdk.name"], bool(r["service.version"]))' "$T/otlp.jsonl" >"$T/res"
    expect_eq "$(cat "$T/res")" "sbx sbx True" "resource: service.name, service.version, telemetry.sdk.*"
else
    ok "# SKIP protoc or the npm package with the OpenTelemetry protos is not available"
fi
stop_collector

# --- a collector that is down, failing or slow: the run completes, drops are counted ----------
start_fake "$T/s.json"
start_collector ok
DOWN="$COL_URL"
stop_collector
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace "$T/d.jsonl" --trace-otlp "$DOWN" "go"
expect_rc 0 "a collector that is down does not fail the run"
expect_in "$T/err" "spans dropped (exporter=count): otlp=" "the dropped spans are reported"
expect_eq "$(grep -c dropped "$T/err")" 1 "on one line"
expect_eq "$(python3 "$CHECK" tree "$T/d.jsonl")" "" "the file still has the whole tree"
expect_eq "$(grep -o 'otlp=[0-9]*' "$T/err")" "otlp=$(wc -l <"$T/d.jsonl")" "every span is counted"

start_fake "$T/s.json"
start_collector 500
OTEL_EXPORTER_OTLP_ENDPOINT="$COL_URL" run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_rc 0 "a collector answering 500 does not fail the run (OTEL_EXPORTER_OTLP_ENDPOINT)"
expect_in "$T/err" "otlp=" "its spans are counted as dropped"
[ -n "$(ls "$COL"/*.bin 2>/dev/null)" ] && ok "the environment's endpoint was used" || not_ok "the environment's endpoint was used"
stop_collector

start_fake "$T/s.json"
start_collector slow
OTEL_EXPORTER_OTLP_TIMEOUT=300 run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace-otlp "$COL_URL" "go"
expect_rc 0 "a collector slower than the timeout does not fail the run"
expect_in "$T/err" "otlp=" "its spans are counted as dropped"
# The bound is the drain time (2 s) plus one request's timeout; the collector answers only
# after 100 s, and says so in a file: the run ended before that.
[ ! -e "$COL/answered" ] && ok "the run does not wait for the slow collector" || not_ok "the run does not wait for the slow collector"
stop_collector

# --- --trace-openai: the OpenAI traces ingest format, with the same API key ---------------------
start_fake "$T/s.json"
start_collector ok
SBX_TRACE_OPENAI_URL="$COL_URL/v1/traces/ingest" run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" \
    --trace "$T/oa.jsonl" --trace-openai "go"
expect_rc 0 "a run with --trace-openai"
expect_not_in "$T/err" "dropped" "no span dropped"
expect_eq "$(cat "$COL"/*.meta | sort -u)" "/v1/traces/ingest application/json" "POST JSON to the ingest endpoint"
python3 -c '
import glob, json, sys
hs = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/*.headers")]
print(sorted({(h.get("authorization"), h.get("openai-beta")) for h in hs}))' "$COL" >"$T/h"
expect_eq "$(cat "$T/h")" "[('Bearer sk-test-SECRET-0123456789', 'traces=v1')]" "with the API key and OpenAI-Beta: traces=v1"
python3 "$CHECK" openai "$T/oa.jsonl" "$COL"/*.bin >"$T/bad"
expect_eq "$(cat "$T/bad")" "" "the trace and every span, with parents and the SDK's span types and data"
python3 - "$COL" >"$T/types" <<'PY'
import glob, json, sys
items = [i for f in glob.glob(sys.argv[1] + "/*.bin") for i in json.load(open(f))["data"]]
# The exporter may send the spans in several batches, which the collector keeps as files in
# no particular order: every response span, sorted by its id.
rs = sorted(i["span_data"].get("response_id") or "" for i in items if i.get("span_data", {}).get("type") == "response")
print(",".join(rs),
      sorted({i["span_data"]["name"] for i in items if i.get("span_data", {}).get("type") == "custom"} & {"task", "turn"}))
PY
expect_eq "$(cat "$T/types")" "r1,r2 ['task', 'turn']" "Responses calls are response spans with their id; the run and turns are the SDK's task and turn spans"
if grep -q "SECRET-0123456789" "$COL"/*.bin; then not_ok "the key is in no span"; else ok "the key is in no span"; fi
stop_collector
# Chat Completions calls are the SDK's generation spans (with the messages as lists).
mk "$T/chat.json" '[chat_msg("hello")]'
start_fake "$T/chat.json"
start_collector ok
SBX_TRACE_OPENAI_URL="$COL_URL/v1/traces/ingest" run "$SBX" run --api chat --base-url "$FAKE_URL" \
    -m gpt-4.1 --trace "$T/oc.jsonl" --trace-openai --trace-content "hi"
expect_rc 0 "a Chat Completions run with --trace-openai"
python3 "$CHECK" openai "$T/oc.jsonl" "$COL"/*.bin >"$T/bad"
expect_eq "$(cat "$T/bad")" "" "its spans as the SDK exports them"
python3 - "$COL" >"$T/gen" <<'PY'
import glob, json, sys
items = [i for f in glob.glob(sys.argv[1] + "/*.bin") for i in json.load(open(f))["data"]]
g = [i["span_data"] for i in items if i.get("span_data", {}).get("type") == "generation"][0]
print(g["model"], type(g["input"]).__name__, type(g["output"]).__name__, g["usage"])
PY
expect_eq "$(cat "$T/gen")" "gpt-4.1 list list {'input_tokens': 7, 'output_tokens': 3}" \
    "a generation span with the model, input and output as lists, and usage"
python3 "$CHECK" semconv "$T/oc.jsonl" | grep -v "no execute_tool span" >"$T/bad"
expect_eq "$(cat "$T/bad")" "" "and the conventions (openai.api.type chat_completions)"
stop_collector
OPENAI_API_KEY= run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --trace-openai "go"
expect_rc 1 "--trace-openai without a key is refused"
expect_in "$T/err" "--trace-openai needs an API key" "and says why"

nothing_left "no sandbox left"
done_testing
