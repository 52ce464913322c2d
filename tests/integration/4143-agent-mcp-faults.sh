#!/usr/bin/env bash
# MCP servers that fail, through the real binary and the fake model: a host server refused
# without --allow-host-tools, a server that is not installed, one whose program fails at start,
# one that dies during a call (the model reads why; the next turn starts it again), one that
# sends garbage or too big a message, one that does not answer in time, an HTTP server that is
# not there, and a tool error (isError) the model reads as such. Servers are the small one in
# tests/mcp/fake-mcp.py (in the sandbox and on the host) and node without its script.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT
command -v python3 >/dev/null || skip_all "python3 is needed for the fake MCP server"

mkdir -p "$T/agent"
cp "$SBX_SRCDIR/tests/mcp/fake-mcp.py" "$T/agent/fake-mcp.py"
# agent FILE MODE [EXTRA...]: an agent with the fake server in the sandbox ("sandbox") or on the
# host ("host"), in MODE, with EXTRA lines added to the server's entry.
agent() {
    local file=$1 where=$2 mode=$3 l
    shift 3
    {
        echo "name: Faulty"
        echo "capabilities: []"
        echo "manifest: {entries: {fake-mcp.py: {type: local_file, src: fake-mcp.py}}}"
        echo "mcp_servers:"
        echo "  - name: fake"
        if [ "$where" = host ]; then
            echo "    command: [python3, $T/agent/fake-mcp.py, --mode, $mode]"
            echo "    host: true"
        else
            echo "    command: [python3, fake-mcp.py, --mode, $mode]"
        fi
        for l in "$@"; do echo "    $l"; done
    } >"$T/agent/$file"
}
out_of() {
    fake_query "[i['output'] for i in reqs[-1]['body']['input'] if i.get('call_id') == '$1' and i['type'] == 'function_call_output'][0]"
}

# --- a host server needs --allow-host-tools, asked before anything runs -----------------------
agent h.yaml host ok
mk "$T/s.json" '[resp(1, msg("never"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/h.yaml" "go"
expect_rc 1 "a host MCP server is refused without --allow-host-tools"
expect_in "$T/err" "MCP server 'fake' runs 'python3' on this machine, outside every sandbox: give --allow-host-tools" \
    "naming the server, its program and the flag"
expect_eq "$(fake_query 'len(reqs)')" 0 "the model was not asked"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/h.yaml" "go"
expect_rc 0 "with the flag it runs"
expect_in "$T/err" "warning: host MCP server 'fake' of '$T/agent/h.yaml' runs 'python3' on this machine" \
    "and the warning names the server"

run "$SBX" mcp ls "$T/agent/h.yaml"
expect_rc 0 "sbx mcp ls without --allow-host-tools"
expect_in "$T/out" "fake (agent 'Faulty', stdio (host))
  not listed: MCP server 'fake' runs on the host, and this run does not allow host MCP servers" \
    "does not start a host server"
run "$SBX" mcp ls --allow-host-tools "$T/agent/h.yaml"
expect_in "$T/out" "fake (agent 'Faulty', stdio (host)): fake-mcp 1" "with it, lists the host server"
expect_in "$T/out" "  resources (1):
    file:///notes.txt
  prompts (1):
    greet  Says hello." "with its resources and prompts"

# --- not installed, and a program that fails at its start ---------------------------------------
cat >"$T/agent/n.yaml" <<'YAML'
name: Missing
capabilities: []
mcp_servers:
  - {name: ghost, command: [no-such-mcp-server, --stdio]}
YAML
mk "$T/s.json" '[resp(1, msg("never"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/n.yaml" "go"
expect_rc 1 "a server that is not installed ends the run"
expect_in "$T/err" "MCP server 'ghost': command 'no-such-mcp-server' not found" "saying which and why"
expect_eq "$(fake_query 'len(reqs)')" 0 "before the model is asked"
cat >"$T/agent/n2.yaml" <<'YAML'
name: Missing
capabilities: []
mcp_servers:
  - {name: nodeless, command: [node, not-there.js]}
YAML
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/n2.yaml" "go"
expect_rc 1 "a server whose program fails at start ends the run"
expect_in "$T/err" "MCP server 'nodeless' ended with status 1; stderr: " "with how it ended"
expect_in "$T/err" "not-there.js" "and its stderr, which says why"
expect_eq "$(live)" 0 "no sandbox is left"

# --- dies during a call, and is started again on the next turn; isError -----------------------
agent d.yaml sandbox die
mk "$T/s.json" '[resp(1, fcall(1, "shout", {"text": "x"})),
                 resp(2, fcall(3, "add", {"a": 2, "b": 3})),
                 resp(3, msg("survived"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/d.yaml" "go"
expect_rc 0 "a server that dies during a call does not end the run"
out_of c1 >"$T/o1"
expect_in "$T/o1" "MCP server 'fake' ended with status 3; stderr: fake-mcp: giving up on purpose" \
    "the model reads how it ended, with its stderr"
expect_eq "$(out_of c3)" "5" "the next turn started the server again"
expect_eq "$(live)" 0 "no sandbox is left"

agent e.yaml sandbox ok
mk "$T/s.json" '[resp(1, fcall(1, "broken", {})), resp(2, msg("ok"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/e.yaml" "go"
expect_rc 0 "a tool error (isError) does not end the run"
expect_eq "$(out_of c1)" "error: tool 'broken' failed: MCP server 'fake' reported an error: the disk is on fire" \
    "the model reads it as the tool's error"

# --- cwd and env: in the sandbox (cwd in the workspace) and on the host (a secret's value) -----
cat >"$T/agent/c.yaml" <<'YAML'
name: Placed
capabilities: []
manifest: {entries: {sub/fake-mcp.py: {type: local_file, src: fake-mcp.py}}}
mcp_servers:
  - {name: inside, command: [python3, fake-mcp.py], cwd: sub, env: {FAKE_MCP_VAR: plain}}
YAML
mk "$T/s.json" '[resp(1, fcall(1, "where", {})), resp(2, msg("ok"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/c.yaml" "go"
expect_rc 0 "a sandbox server with cwd and env runs"
expect_eq "$(out_of c1)" "/workspace/sub plain" "in its cwd in the workspace, with its env"
cat >"$T/agent/c2.yaml" <<YAML
name: Placed
mcp_servers:
  - name: outside
    command: [python3, $T/agent/fake-mcp.py]
    host: true
    env: {FAKE_MCP_VAR: {type: secret, env: MCP_FAULT_SECRET}}
YAML
export MCP_FAULT_SECRET=sek-4143
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/c2.yaml" --trace "$T/c2.jsonl" \
    --trace-content "go"
expect_rc 0 "a host server with a secret in its env runs"
expect_eq "$(out_of c1)" "$T/agent sek-4143" "in the agent file's directory, with the secret's value"
expect_in "$T/c2.jsonl" "$T/agent " "(the trace has the tool's output)"
expect_not_in "$T/c2.jsonl" "sek-4143" "which the trace does not keep, even with --trace-content"

# --- garbage, a message too big, no answer in time (host servers) ------------------------------
agent g.yaml host garbage
mk "$T/s.json" '[resp(1, fcall(1, "add", {"a": 1, "b": 1})), resp(2, msg("ok"))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/g.yaml" "go"
expect_rc 0 "garbage from the server fails the call, not the run"
out_of c1 >"$T/o1"
expect_in "$T/o1" "MCP server 'fake' sent something that is not JSON-RPC" "saying so"
agent b.yaml host huge
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/b.yaml" "go"
expect_rc 0 "a message over the limit fails the call"
expect_eq "$(out_of c1)" "error: tool 'add' failed: MCP server 'fake' sent a message over 4 MiB" "saying so"
# The timeout bounds every request, the server's initialize too: 5 s leaves a loaded machine's
# python3 time to start and answer it, while the slow tool sleeps 30 s.
agent t.yaml host ok "timeout: 5"
mk "$T/s.json" '[resp(1, fcall(1, "slow", {})), resp(2, msg("ok"))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/t.yaml" "go"
expect_rc 0 "a server that does not answer in time fails the call"
expect_eq "$(out_of c1)" "error: tool 'slow' failed: MCP server 'fake' did not answer 'tools/call' within 5 s" \
    "after the server's timeout"
agent v.yaml host old
mk "$T/s.json" '[resp(1, msg("never"))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/v.yaml" "go"
expect_rc 1 "a server speaking an unknown protocol version ends the run"
expect_in "$T/err" "MCP server 'fake' speaks protocol version '1999-01-01'" "saying which"

# --- an HTTP server that is not there ------------------------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$T/agent/w.yaml" <<YAML
name: Web
mcp_servers:
  - {name: gone, url: "http://127.0.0.1:$PORT/mcp"}
YAML
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/w.yaml" "go"
expect_rc 1 "an HTTP server that is not there ends the run"
expect_in "$T/err" "MCP server 'gone': request to 'http://127.0.0.1:$PORT/mcp' failed" "naming it and its URL"
expect_eq "$(pgrep -f "$T/agent/fake-mcp.py" | wc -l)" 0 "no server process is left"

done_testing
