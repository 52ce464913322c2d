#!/usr/bin/env bash
# An agent file's own tools through the real binary and the fake model: a command in the
# sandbox (arguments by $NAME, never through a shell, and as JSON on stdin), a host command
# (refused without --allow-host-tools, approved through a resumed run with it), an HTTP
# endpoint (a python http.server on 127.0.0.1 this test starts; a secret header by reference),
# schema checks before anything runs, timeouts, and the tool spans in the trace.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
HTTP_PID=
stop_http() {
    if [ -n "$HTTP_PID" ]; then
        kill "$HTTP_PID" 2>/dev/null
        wait "$HTTP_PID" 2>/dev/null
        HTTP_PID=
    fi
}
trap 'stop_fake; stop_http; sandbox_cleanup' EXIT

# --- the HTTP tool's server: answers /lookup with what it got, /fail with a 500 ----------------
cat >"$T/srv.py" <<'PY'
import http.server, json, sys
log = open(sys.argv[1], "a")
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        log.write(json.dumps({"path": self.path, "body": body,
                              "auth": self.headers.get("Authorization"),
                              "fixed": self.headers.get("X-Fixed"),
                              "traceparent": self.headers.get("traceparent")}) + "\n")
        log.flush()
        if self.path == "/fail":
            self.send_response(500)
            self.send_header("Content-Length", "13")
            self.end_headers()
            self.wfile.write(b"backend broke")
            return
        out = ("answer for " + json.loads(body)["q"]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$T/srv.py" "$T/http.log" >"$T/http.port" &
HTTP_PID=$!
wait_until test -s "$T/http.port"
HPORT=$(head -n1 "$T/http.port")

mkdir -p "$T/agent/bin"
cat >"$T/agent/bin/upper.sh" <<'SH'
#!/bin/sh
# A host tool: upper-cases its argument, shows what environment it got, leaves a mark.
printf '%s|%s|%s|%s\n' "$(printf '%s' "$1" | tr a-z A-Z)" "${TOOL_TEST_VAR-unset}" "${HOME-nohome}" "$(pwd)"
touch "$MARK"
SH
chmod +x "$T/agent/bin/upper.sh"
cat >"$T/agent/a.yaml" <<YAML
name: Toolsmith
capabilities: []
manifest: {entries: {data.txt: {type: file, content: "one\ntwo\n"}}}
tools:
  - name: count_lines
    description: Counts the lines of a workspace file.
    parameters: {type: object, properties: {path: {type: string}}}
    command: [wc, -l, \$path]
  - name: echo_args
    parameters: {type: object, properties: {word: {type: string}, n: {type: integer}}}
    command: [sh, -c, 'cat; echo; echo "[\$\$1]"', sh, "w=\${word}"]
    stdin: json
  - name: slow
    command: [sleep, "30"]
    timeout: 1
  - name: host_upper
    parameters: {type: object, properties: {text: {type: string}}}
    host_command: [bin/upper.sh, \$text]
    env: [TOOL_TEST_VAR, MARK]
    needs_approval: true
  - name: lookup
    parameters: {type: object, properties: {q: {type: string}}}
    http:
      url: http://127.0.0.1:$HPORT/lookup
      headers: {Authorization: {type: secret, env: TOOL_TOKEN, prefix: "Bearer "}, X-Fixed: fixed-value}
  - name: broken
    http: {url: "http://127.0.0.1:$HPORT/fail"}
YAML
export TOOL_TOKEN=tok-SECRET-4242 TOOL_TEST_VAR=passed MARK="$T/host-ran" HOME=/root

# --- refused without --allow-host-tools, before the model is asked ---------------------------
mk "$T/s.json" '[resp(1, msg("never"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/a.yaml" "go"
expect_rc 1 "an agent file with a host tool is refused without --allow-host-tools"
expect_in "$T/err" "tool 'host_upper' runs '$T/agent/bin/upper.sh' on this machine, outside every sandbox: give --allow-host-tools" \
    "naming the tool, its program and the flag"
expect_eq "$(fake_query 'len(reqs)')" 0 "the model was not asked"
expect_eq "$(live)" 0 "no sandbox was made"

# --- one turn calling every kind; the host tool waits for approval ---------------------------
mk "$T/s.json" '[resp(1, fcall(1, "count_lines", {"path": "data.txt"}),
                         fcall(2, "echo_args", {"word": "a b; touch pwned", "n": 3}),
                         fcall(3, "lookup", {"q": "owls"}),
                         fcall(4, "count_lines", {"path": "data.txt", "extra": 1}),
                         fcall(5, "broken", {}),
                         fcall(6, "slow", {}),
                         fcall(7, "host_upper", {"text": "hi there"})),
                 resp(2, msg("all done"))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/a.yaml" --state "$T/S.json" \
    --trace "$T/t1.jsonl" "go"
expect_rc 4 "the host tool's call waits for approval (needs_approval: true)"
expect_eq "$(fake_query "{t['name']: (t['strict'], t['parameters']) for t in reqs[0]['body']['tools']}['count_lines'] == (True, {'type': 'object', 'properties': {'path': {'type': 'string'}}, 'additionalProperties': False, 'required': ['path']}) and {t['name']: t['parameters'] for t in reqs[0]['body']['tools']}['broken'] == {'type': 'object', 'properties': {}, 'additionalProperties': False, 'required': []}")" \
    True \
    "the model gets strict function tools: closed objects, every property required"
expect_eq "$(fake_query "[t.get('description') for t in reqs[0]['body']['tools'] if t['name'] == 'count_lines']")" \
    "['Counts the lines of a workspace file.']" "with the file's description"
expect_in "$T/err" "warning: host tool 'host_upper' of '$T/agent/a.yaml' runs '$T/agent/bin/upper.sh' on this machine" \
    "--allow-host-tools names each host tool on stderr"
expect_in "$T/err" "  c7  host_upper" "the pending call is the host tool's"
expect_not_in "$T/err" "  c1  count_lines" "the sandbox tool needed no approval"
if [ -e "$T/host-ran" ]; then not_ok "the host command has not run yet"; else ok "the host command has not run yet"; fi

run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/a.yaml" --resume "$T/S.json" \
    --approve c7 --trace "$T/t2.jsonl"
expect_rc 0 "--resume --approve c7 finishes the run"
expect_in "$T/out" "all done" "with the final answer"
if [ -e "$T/host-ran" ]; then ok "the approved host command ran"; else not_ok "the approved host command ran"; fi
# What the model read for each call, from its last request.
out_of() {
    fake_query "[i['output'] for i in reqs[-1]['body']['input'] if i.get('call_id') == '$1' and i['type'] == 'function_call_output'][0]"
}
expect_eq "$(out_of c1)" "2 data.txt" "the sandbox command ran with \$path as one argument"
expect_eq "$(out_of c2)" '{"word":"a b; touch pwned","n":3}
[w=a b; touch pwned]' "stdin: json gets the arguments; a value is one argv element, never shell text"
expect_eq "$(out_of c3)" "answer for owls" "the HTTP tool's output is the response body"
expect_in "$T/http.log" '"body": "{\"q\":\"owls\"}"' "the server got the arguments as a JSON body"
expect_in "$T/http.log" '"auth": "Bearer tok-SECRET-4242"' "the secret header was read from the environment"
expect_in "$T/http.log" '"fixed": "fixed-value"' "a plain header too"
out_of c4 >"$T/o4"
expect_in "$T/o4" "the arguments do not match the tool's schema" "extra arguments are refused (strict schema)"
out_of c5 >"$T/o5"
expect_in "$T/o5" "error: tool 'broken' failed: 'http://127.0.0.1:$HPORT/fail' answered HTTP 500; body: backend broke" \
    "an HTTP error status is the tool's error, with the body"
out_of c6 >"$T/o6"
expect_in "$T/o6" "'sleep' did not finish within 1 s" "the tool's timeout ends the command"
expect_eq "$(out_of c7)" "HI THERE|passed|nohome|$T/agent" \
    "the host command: \$text as one argument, only the listed variables, in the agent file's directory"
expect_eq "$(grep -c '"/lookup"' "$T/http.log")" 1 "the schema-refused call never reached anything"
expect_not_in "$T/S.json" "tok-SECRET-4242" "the header secret is not in the run state"

# --- the spans: one execute_tool span per call, with the tool's kind; traceparent sent --------
span() { python3 -c "
import json,sys
sp=[json.loads(l) for l in open(sys.argv[1])]
print($2)" "$1"; }
expect_eq "$(span "$T/t1.jsonl" "sorted((s['name'][13:], s['attributes'].get('sbx.tool.kind','-')) for s in sp if s['name'].startswith('execute_tool '))")" \
    "[('broken', 'http'), ('count_lines', '-'), ('count_lines', 'command'), ('echo_args', 'command'), ('host_upper', '-'), ('lookup', 'http'), ('slow', 'command')]" \
    "a span per call, with the kind of the tool that ran (none: refused by the schema, waiting)"
expect_eq "$(span "$T/t2.jsonl" "[s['attributes'].get('sbx.tool.kind') for s in sp if s['name'] == 'execute_tool host_upper']")" \
    "['host_command']" "the approved host call has its span"
expect_eq "$(span "$T/t1.jsonl" "[s['attributes'].get('http.response.status_code') for s in sp if s['name'] == 'execute_tool lookup']")" \
    "[200]" "the HTTP span has the status"
TID=$(span "$T/t1.jsonl" "sp[0]['trace_id']")
expect_in "$T/http.log" "\"traceparent\": \"00-$TID-" "the HTTP tool's server joins the run's trace"
expect_not_in "$T/t1.jsonl" "tok-SECRET-4242" "the secret is not in the trace"
expect_eq "$(live)" 0 "the completed run removed its sandbox"

# --- a sandbox command tool makes a plain agent a sandbox agent -------------------------------
cat >"$T/p.yaml" <<'YAML'
name: Plain
capabilities: []
tools:
  - {name: where, command: [pwd]}
YAML
mk "$T/s.json" '[resp(1, fcall(1, "where", {})), resp(2, msg("ok"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/p.yaml" "go"
expect_rc 0 "an agent with only a sandbox command tool runs"
expect_eq "$(out_of c1)" "/workspace" "in a sandbox of its own"
expect_eq "$(live)" 0 "which the run removed"

done_testing
