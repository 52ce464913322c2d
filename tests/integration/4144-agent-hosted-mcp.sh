#!/usr/bin/env bash
# A hosted MCP server (the Responses API's "mcp" tool) in an agent file, through the real
# binary and the fake model: the tool goes to the model as written, its header secret read
# from the environment and kept out of the run state and the trace; the server's approval
# request goes through sbx's approval flow (the run stops, resumes approved or rejected) and
# the model gets an mcp_approval_response for it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

cat >"$T/a.yaml" <<'YAML'
name: Hosted
tools:
  - type: mcp
    server_label: wiki
    server_url: https://mcp.example.invalid/mcp
    require_approval: {always: {tool_names: [ask_question]}}
    allowed_tools: [ask_question, read_structure]
    headers: {Authorization: {type: secret, env: HOSTED_MCP_TOKEN, prefix: "Bearer "}}
YAML
export HOSTED_MCP_TOKEN=tok-HOSTED-SECRET-31
cat >"$T/extra.py" <<'PY'
def areq(i):
    return {"type": "mcp_approval_request", "id": "mcpr_%d" % i, "server_label": "wiki",
            "name": "ask_question", "arguments": "{\"question\": \"why\"}"}
def mcall(i, out):
    return {"type": "mcp_call", "id": "mc_%d" % i, "server_label": "wiki", "name": "ask_question",
            "arguments": "{}", "output": out}
PY
export MK_EXTRA="$T/extra.py"
script='[resp(1, {"type": "mcp_list_tools", "id": "ml1", "server_label": "wiki", "tools": []}, areq(1)),
         resp(2, mcall(1, "42"), msg("the answer is 42"))]'

mk "$T/s.json" "$script"
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/S.json" --trace "$T/t1.jsonl" "go"
expect_rc 4 "the hosted server's approval request stops the run"
expect_in "$T/err" "  mcpr_1  wiki" "the pending call is the request, named by the server's label"
expect_eq "$(fake_query "reqs[0]['body']['tools']")" \
    "[{'type': 'mcp', 'server_label': 'wiki', 'server_url': 'https://mcp.example.invalid/mcp', 'require_approval': {'always': {'tool_names': ['ask_question']}}, 'allowed_tools': ['ask_question', 'read_structure'], 'headers': {'Authorization': 'Bearer tok-HOSTED-SECRET-31'}}]" \
    "the model gets the mcp tool, its header secret read from the environment"
expect_not_in "$T/S.json" "tok-HOSTED-SECRET-31" "the secret is not in the run state"
expect_not_in "$T/t1.jsonl" "tok-HOSTED-SECRET-31" "nor in the trace"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json" --approve mcpr_1
expect_rc 0 "the approved run finishes"
expect_in "$T/out" "the answer is 42" "with the model's answer"
expect_in "$T/err" "tool wiki(" "the approval request shows as the server's call"
expect_in "$T/err" "-> approved: the model's server runs it" "answered with the approval"
expect_eq "$(fake_query "[i for i in reqs[-1]['body']['input'] if i['type'] == 'mcp_approval_response']")" \
    "[{'type': 'mcp_approval_response', 'approval_request_id': 'mcpr_1', 'approve': True}]" \
    "the model's server got the approval"

rm -f "$T/S.json"
mk "$T/s.json" "$script"
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/S.json" "go"
expect_rc 4 "again waiting"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json" --reject mcpr_1 --reason "not today"
expect_rc 0 "the rejected run finishes"
expect_eq "$(fake_query "[i for i in reqs[-1]['body']['input'] if i['type'] == 'mcp_approval_response']")" \
    "[{'type': 'mcp_approval_response', 'approval_request_id': 'mcpr_1', 'approve': False, 'reason': 'not today'}]" \
    "the model's server got the refusal with its reason"

cat >"$T/b.yaml" <<'YAML'
name: Hosted
tools:
  - {type: mcp, server_label: wiki, server_url: "ftp://x/"}
YAML
run "$SBX" run --base-url "$FAKE_URL" -a "$T/b.yaml" "go"
expect_rc 1 "a bad hosted server entry is refused"
expect_in "$T/err" "field 'tools': hosted MCP server 'wiki': field 'server_url': 'ftp://x/' must be an http:// or https:// URL" \
    "naming the server and the field"

done_testing
