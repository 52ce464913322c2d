#!/usr/bin/env bash
# Approvals as the reference SDK has them (issue 33, items 2 and 3), checked against the SDK
# itself: the JS SDK (@openai/agents, pinned, installed from npm once into the test cache) and
# sbx play the same scripted turns against the same fake model server, and take the same
# decisions (sdk-approvals.mjs on the JS side, --reject/--reason/--approve-always/
# --reject-always/--approve on the sbx side). Compared: which calls ran in each phase (a phase
# is one process: the run, then each resume) and which waited, and the tool outputs every
# request carried, in order (rejections verbatim; outputs of calls that ran as "<ran>", since
# the two exec_command tools differ). Scenarios: reject with a reason, reject without one,
# always approve, always reject with a message, and a turn whose second call needs no approval.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT
SDK_VERSION=0.20.0

command -v node >/dev/null && command -v npm >/dev/null || skip_all "node or npm is missing"
SDK_DIR="${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/openai-agents-$SDK_VERSION"
have_sdk() { [ "$(node -p "require('$SDK_DIR/node_modules/@openai/agents/package.json').version" 2>/dev/null)" = "$SDK_VERSION" ]; }
if ! have_sdk; then
    mkdir -p "$SDK_DIR"
    # One installer at a time: tests run in parallel.
    (
        flock 9
        have_sdk || npm install --prefix "$SDK_DIR" --no-audit --no-fund --loglevel=error \
            "@openai/agents@$SDK_VERSION" >"$T/npm.log" 2>&1
    ) 9>"$SDK_DIR.lock"
    have_sdk || skip_all "npm cannot install @openai/agents@$SDK_VERSION: $(tail -1 "$T/npm.log" 2>/dev/null)"
fi
cp "$SBX_SRCDIR/tests/integration/sdk-approvals.mjs" "$SDK_DIR/"

agent_file() { # RULE: a Worker whose exec_command calls need approval by RULE
    cat >"$T/a.yaml" <<EOF
name: Worker
capabilities: [shell]
manifest: {entries: {hello.txt: {type: file, content: "hi"}}}
needs_approval: [$1]
EOF
}

# requests LOG: the tool outputs of each request, in order, rejections verbatim.
requests() {
    python3 - "$1" <<'PY'
import json, sys
texts = {"do not delete files", "Tool execution was not approved.", "never"}
out = []
for line in open(sys.argv[1]):
    body = json.loads(line)["body"]
    outs = [(i["call_id"], i["output"] if i.get("output") in texts else "<ran>")
            for i in body.get("input", []) if isinstance(i, dict) and i.get("type") == "function_call_output"]
    out.append(outs)
print(json.dumps(out))
PY
}

# sbx_phases FLAGS: run sbx, then resume with FLAGS (the word ID stands for each waiting call;
# $REASON, when set, follows each decision as --reason) until the run ends; prints {"phases":
# [...], "final"} like sdk-approvals.mjs.
sbx_phases() {
    local flags="$1" n=0 rc id a
    rm -f "$T/P.json" "$T"/ph*.json
    "$SBX" run --json --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/P.json" "go" >"$T/ph0.json" 2>"$T/ph0.err"
    rc=$?
    while [ "$rc" = 4 ] && [ $n -lt 4 ]; do
        local args=() ids
        ids=$(python3 -c 'import json,sys; [print(p["call_id"]) for l in open(sys.argv[1]) for e in [json.loads(l)] if e["type"] == "interruption" for p in e["pending"]]' "$T/ph$n.json")
        case "$flags" in
        *ID*) for id in $ids; do
                  for a in $flags; do args+=("${a//ID/$id}"); done
                  [ -z "${REASON:-}" ] || args+=(--reason "$REASON")
              done ;;
        *) for a in $flags; do args+=("$a"); done
           [ -z "${REASON:-}" ] || args+=(--reason "$REASON") ;;
        esac
        n=$((n + 1))
        "$SBX" run --json --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/P.json" "${args[@]}" \
            >"$T/ph$n.json" 2>"$T/ph$n.err"
        rc=$?
    done
    python3 - "$T" "$n" <<'PY'
import json, sys
t, n = sys.argv[1], int(sys.argv[2])
phases, final = [], None
for i in range(n + 1):
    ran, waiting = [], []
    for line in open("%s/ph%d.json" % (t, i)):
        e = json.loads(line)
        if e["type"] == "tool_output" and not e["failed"]:
            ran.append(e["item"]["call_id"])
        if e["type"] == "interruption":
            waiting = [p["call_id"] for p in e["pending"]]
        if e["type"] == "final":
            final = e["output"]
    phases.append({"ran": ran, "waiting": waiting})
print(json.dumps({"phases": phases, "final": final}))
PY
}

# same SCENARIO: compare the two sides' phases (ran and waiting as sets) and requests.
compare() {
    local name=$1
    python3 - "$T/js.out" "$T/sbx.out" <<'PY' >"$T/cmp"
import json, sys
def norm(p):
    return [{"ran": sorted(x["ran"]), "waiting": sorted(x["waiting"])} for x in p["phases"]], p["final"]
js = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sb = json.loads(open(sys.argv[2]).read())
print(json.dumps(norm(js)) == json.dumps(norm(sb)))
print(json.dumps(norm(js)))
print(json.dumps(norm(sb)))
PY
    if [ "$(head -n1 "$T/cmp")" = True ]; then ok "$name: the same calls ran and waited, phase by phase"; else
        not_ok "$name: the same calls ran and waited, phase by phase"; diag "js:  $(sed -n 2p "$T/cmp")" "sbx: $(sed -n 3p "$T/cmp")"
    fi
    expect_eq "$(cat "$T/sbx.req")" "$(cat "$T/js.req")" "$name: the same tool outputs in every request"
}

scenario() { # NAME RULE TURNS SBX_FLAGS [REASON]
    local name=$1
    agent_file "$2"
    mk "$T/s.json" "$3"
    start_fake "$T/s.json"
    (cd "$SDK_DIR" && OPENAI_BASE_URL="$FAKE_URL" timeout 120 node sdk-approvals.mjs "$name") >"$T/js.out" 2>"$T/js.err"
    if [ $? != 0 ]; then not_ok "$name: the JS SDK ran"; diag "$(tail -5 "$T/js.err")"; return; fi
    requests "$FAKE_LOG" >"$T/js.req"
    start_fake "$T/s.json"
    REASON=${5:-} sbx_phases "$4" >"$T/sbx.out"
    requests "$FAKE_LOG" >"$T/sbx.req"
    compare "$name"
}

ONE='[resp(1, sh(1, "rm hello.txt")), resp(2, msg("done"))]'
TWO='[resp(1, sh(1, "rm hello.txt")), resp(2, sh(2, "cat hello.txt")), resp(3, msg("done"))]'
scenario reject-reason exec_command "$ONE" "--reject ID" "do not delete files"
expect_in "$T/sbx.req" '"do not delete files"' "reject-reason: the model reads the reason verbatim"
scenario reject-plain exec_command "$ONE" "--reject ID"
expect_in "$T/sbx.req" '"Tool execution was not approved."' "reject-plain: the SDK's text"
scenario always exec_command "$TWO" "--approve-always exec_command"
scenario always-reject exec_command "$TWO" "--reject-always exec_command" "never"
scenario same-turn '{tool: exec_command, when: {cmd: "rm *"}}' \
    '[resp(1, sh("a", "rm hello.txt"), sh("b", "echo hi")), resp(2, msg("done"))]' "--approve ID"
expect_eq "$(sed -n 3p "$T/cmp")" '[[{"ran": ["cb"], "waiting": ["ca"]}, {"ran": ["ca"], "waiting": []}], "done"]' \
    "same-turn: the call that needs no approval ran before the pause"
expect_eq "$(live)" 0 "no sandbox is left"
done_testing
