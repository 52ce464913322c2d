#!/usr/bin/env bash
# An agent file with every kind of tool, end to end through the real binary and the fake
# model: a sandbox command, a host command (allowed on the command line), an HTTP endpoint, and
# two real MCP servers from npm — @modelcontextprotocol/server-filesystem on stdio inside the
# sandbox and @modelcontextprotocol/server-everything on Streamable HTTP. One turn calls them
# all; the MCP and host calls that need approval wait, the run resumes approved; the trace has
# each call's span and one mcp_tools span per server.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
. "$SBX_SRCDIR/tests/mcp/lib.sh"
HTTP_PID=
stop_http() {
    if [ -n "$HTTP_PID" ]; then
        kill "$HTTP_PID" 2>/dev/null
        wait "$HTTP_PID" 2>/dev/null
        HTTP_PID=
    fi
}
trap 'stop_fake; stop_http; stop_everything_http; sandbox_cleanup' EXIT
mcp_servers_dir
start_everything_http || { not_ok "server-everything serves Streamable HTTP"; diag "$(cat "$T/every.log")"; done_testing; exit; }

# The HTTP tool's endpoint.
cat >"$T/srv.py" <<'PY'
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        out = ("answer for " + body["q"]).encode()
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
python3 "$T/srv.py" >"$T/http.port" &
HTTP_PID=$!
wait_until test -s "$T/http.port"
HPORT=$(head -n1 "$T/http.port")

mkdir -p "$T/agent"
mcp_workspace_copy "$T/agent/srv"
cat >"$T/agent/a.yaml" <<YAML
name: Everything
capabilities: []
manifest:
  entries:
    data.txt: {type: file, content: "one\ntwo\n"}
    srv: {type: local_dir, src: srv}
tools:
  - name: count_lines
    parameters: {type: object, properties: {path: {type: string}}}
    command: [wc, -l, \$path]
  - name: host_upper
    parameters: {type: object, properties: {text: {type: string}}}
    host_command: [tr, a-z, A-Z]
    stdin: json
  - name: lookup
    parameters: {type: object, properties: {q: {type: string}}}
    http: {url: "http://127.0.0.1:$HPORT/lookup"}
mcp_servers:
  - name: files
    command: [node, srv/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js, /workspace]
    allowed_tools: [read_text_file, list_directory]
    require_approval: {read_text_file: always}
  - name: web
    url: $EVERY_URL
    headers: {X-Token: {type: secret, env: MCP_TEST_TOKEN}}
    blocked_tools: [trigger-long-running-operation]
YAML
export MCP_TEST_TOKEN=tok-MCP-SECRET-77

# --- sbx mcp ls: the HTTP server's tools, resources and prompts; the sandbox one is named ------
run "$SBX" mcp ls "$T/agent/a.yaml"
expect_rc 0 "sbx mcp ls lists the file's servers"
expect_in "$T/out" "web (agent 'Everything', http): mcp-servers/everything" "the HTTP server, with its serverInfo"
expect_in "$T/out" "    get-sum  Returns the sum of two numbers" "its tools"
expect_in "$T/out" "  resources (" "its resources"
expect_in "$T/out" "    simple-prompt  A prompt with no arguments" "its prompts"
expect_in "$T/out" "files (agent 'Everything', stdio (sandbox))
  not listed: it starts in the agent's sandbox" "a server in the sandbox is named, not started"
run "$SBX" mcp ls --json "$T/agent/a.yaml"
expect_eq "$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print([(s['name'], len(s.get('prompts', []))) for s in d])" "$T/out")" \
    "[('files', 0), ('web', 4)]" "--json: the same as JSON"

mk "$T/s.json" '[resp(1, fcall(1, "count_lines", {"path": "data.txt"}),
                         fcall(2, "host_upper", {"text": "hi"}),
                         fcall(3, "lookup", {"q": "owls"}),
                         fcall(4, "read_text_file", {"path": "/workspace/data.txt"}),
                         fcall(5, "list_directory", {"path": "/workspace"}),
                         fcall(6, "echo", {"message": "over http"}),
                         fcall(7, "get-sum", {"a": 20, "b": 22})),
                 resp(2, msg("all done"))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/a.yaml" --state "$T/S.json" \
    --trace "$T/t1.jsonl" "go"
expect_rc 4 "the MCP tool that needs approval stops the run"
expect_in "$T/err" "  c4  read_text_file" "the pending call is the filesystem server's read_text_file"
expect_not_in "$T/err" "  c5  list_directory" "its other tool needed no approval"
tools_sent=$(fake_query "sorted(t['name'] for t in reqs[0]['body']['tools'])")
expect_eq "$tools_sent" \
    "$(python3 -c "print(sorted(['count_lines', 'host_upper', 'lookup', 'read_text_file', 'list_directory', 'echo', 'get-annotated-message', 'get-env', 'get-resource-links', 'get-resource-reference', 'get-structured-content', 'get-sum', 'get-tiny-image', 'gzip-file-as-resource', 'toggle-simulated-logging', 'toggle-subscriber-updates', 'simulate-research-query']))")" \
    "the model is offered the file's tools and both servers' tools, filtered"
expect_eq "$(fake_query "[(t['strict'], t['parameters']['required'], t['parameters']['additionalProperties'], '\$schema' in t['parameters']) for t in reqs[0]['body']['tools'] if t['name'] == 'get-sum']")" \
    "[(True, ['a', 'b'], False, False)]" "an MCP tool's inputSchema is its strict parameters (without \$schema)"

run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/a.yaml" --resume "$T/S.json" \
    --approve c4 --trace "$T/t2.jsonl"
expect_rc 0 "the resumed run with c4 approved finishes"
expect_in "$T/out" "all done" "with the final answer"
out_of() {
    fake_query "[i['output'] for i in reqs[-1]['body']['input'] if i.get('call_id') == '$1' and i['type'] == 'function_call_output'][0]"
}
expect_eq "$(out_of c1)" "2 data.txt" "the sandbox command ran"
expect_eq "$(out_of c2)" '{"TEXT":"HI"}' "the host command ran"
expect_eq "$(out_of c3)" "answer for owls" "the HTTP tool ran"
expect_eq "$(out_of c4)" "one
two" "the approved MCP call read the workspace file through the server in the sandbox"
out_of c5 >"$T/o5"
expect_in "$T/o5" "[FILE] data.txt" "the filesystem server lists the workspace"
expect_in "$T/o5" "[DIR] srv" "(it runs in the sandbox: it sees the workspace's srv too)"
expect_eq "$(out_of c6)" "Echo: over http" "server-everything answered over Streamable HTTP"
expect_eq "$(out_of c7)" "The sum of 20 and 22 is 42." "and its other tool too"

span() { python3 -c "
import json,sys
sp=[json.loads(l) for l in open(sys.argv[1])]
print($2)" "$1"; }
expect_eq "$(span "$T/t1.jsonl" "sorted(s['attributes'].get('sbx.mcp.server') for s in sp if s['name'] == 'mcp_tools')")" \
    "['files', 'web']" "one mcp_tools span per server"
expect_eq "$(span "$T/t1.jsonl" "[s['attributes'].get('sbx.mcp.tools') for s in sp if s['name'] == 'mcp_tools' and s['attributes'].get('sbx.mcp.server') == 'files']")" \
    "[['read_text_file', 'list_directory']]" "naming the tools it offered"
expect_eq "$(span "$T/t1.jsonl" "sorted((s['name'][13:], s['attributes'].get('sbx.tool.kind', '-'), s['attributes'].get('sbx.mcp.server', '-')) for s in sp if s['name'].startswith('execute_tool '))")" \
    "[('count_lines', 'command', '-'), ('echo', 'mcp', 'web'), ('get-sum', 'mcp', 'web'), ('host_upper', 'host_command', '-'), ('list_directory', 'mcp', 'files'), ('lookup', 'http', '-'), ('read_text_file', '-', '-')]" \
    "a span per call with its kind and server (the call waiting for approval has not run)"
expect_eq "$(span "$T/t2.jsonl" "[(s['attributes'].get('sbx.tool.kind'), s['attributes'].get('sbx.mcp.server'), s['attributes'].get('sbx.mcp.tool')) for s in sp if s['name'] == 'execute_tool read_text_file']")" \
    "[('mcp', 'files', 'read_text_file')]" "the approved call's span in the resumed run"
expect_not_in "$T/t1.jsonl" "tok-MCP-SECRET-77" "the header secret is not in the trace"
expect_not_in "$T/S.json" "tok-MCP-SECRET-77" "nor in the run state"
expect_eq "$(live)" 0 "the completed run removed its sandbox"
expect_eq "$(grep -c 'session termination' "$T/every.log")" 4 "each listing and each run ended its HTTP session (DELETE)"
expect_eq "$(pgrep -f "$T/agent" | wc -l)" 0 "no server process is left"

done_testing
