#!/usr/bin/env bash
# Manifest details that must reach the agent, through `sbx run` and the fake model server:
# entry descriptions in the instructions' workspace listing (bounded, control characters
# blanked), `default_manifest` as the SDK's name of `manifest`, a whole agent graph validated
# before any model call, entry `group` applied, git_repo keeping its repository, and
# `ephemeral` entries and variables left out of snapshots and session states but applied again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

cat >"$T/mk.py" <<'PY'
import json, sys
def resp(i, *items):
    return {"response": {"id": "r%s" % i, "object": "response", "status": "completed",
                         "output": list(items)}}
def fcall(i, name, args):
    return {"type": "function_call", "id": "fc_%s" % i, "call_id": "c%s" % i, "name": name,
            "arguments": json.dumps(args), "status": "completed"}
def msg(text):
    return {"type": "message", "id": "m", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
json.dump({"turns": eval(sys.argv[2])}, open(sys.argv[1], "w"))
PY
mk() { python3 "$T/mk.py" "$@"; }
# The output of the last tool call the model saw in request N (0-based).
outputs() { fake_query "reqs[$1]['body']['input'][-1].get('output')"; }
nreqs() { if [ -f "$FAKE_LOG" ]; then wc -l <"$FAKE_LOG" | tr -d ' '; else echo 0; fi; }
live() { ls "$RUNBASE" 2>/dev/null | wc -l; }

# --- descriptions reach the model, bounded and on one line -----------------------------------
long=$(python3 -c 'print("L" * 300 + "TAIL")')
cat >"$T/d.yaml" <<YAML
name: Describer
manifest:
  entries:
    notes.txt: {type: file, content: "alpha\n", description: "Meeting notes of monday"}
    data: {type: dir, description: "Input data", children: {deep: {type: dir, children: {deeper: {type: dir, children: {x.csv: {type: file, content: "1\n", description: "Deep table"}}}}}}}
    long.txt: {type: file, content: "l\n", description: "$long"}
    evil.txt: {type: file, content: "e\n", description: "red \u001b[31m\nINJECTED line \u0085 end"}
YAML
mk "$T/s1.json" '[resp(1, msg("done"))]'
start_fake "$T/s1.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/d.yaml" "hi"
expect_rc 0 "an agent with described entries runs"
fake_query 'reqs[0]["body"]["instructions"]' >"$T/instr"
expect_in "$T/instr" "notes.txt (6 B)  # Meeting notes of monday" "a file's description follows its line"
expect_in "$T/instr" "data/  # Input data" "a directory's description follows its line"
expect_in "$T/instr" "data/deep/deeper/x.csv  # Deep table" \
    "a described entry deeper than the listing still gets its line"
expect_in "$T/instr" "# $(printf 'L%.0s' $(seq 200)) [... 104 more bytes]" \
    "a long description is cut at 200 bytes with a marker"
expect_not_in "$T/instr" "TAIL" "the rest of it is not in the prompt"
expect_in "$T/instr" "# red  [31m INJECTED line   end" "control characters are blanked"
if grep -q '^INJECTED' "$T/instr"; then not_ok "a description cannot start a line of its own"; else
    ok "a description cannot start a line of its own"; fi
python3 -c 'import sys; t=open(sys.argv[1],encoding="utf-8").read(); sys.exit(any((ord(c)<32 and c!="\n") or 127<=ord(c)<160 for c in t))' "$T/instr"
expect_eq "$?" 0 "no control character reaches the instructions"

# --- default_manifest is the SDK's name for manifest -----------------------------------------
cat >"$T/dm.yaml" <<'YAML'
name: Aliased
default_manifest:
  entries:
    hello.txt: {type: file, content: "hello from default_manifest\n"}
YAML
mk "$T/s2.json" '[resp(1, fcall(1, "exec_command", {"cmd": "cat hello.txt"})), resp(2, msg("ok"))]'
start_fake "$T/s2.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/dm.yaml" "hi"
expect_rc 0 "an agent file with default_manifest runs"
outputs 1 >"$T/o"
expect_in "$T/o" "hello from default_manifest" "its workspace is that manifest's"
cat >"$T/dm2.yaml" <<'YAML'
name: Both
manifest: {entries: {}}
default_manifest: {entries: {}}
YAML
start_fake "$T/s2.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/dm2.yaml" "hi"
expect_rc 1 "manifest and default_manifest together fail"
expect_in "$T/err" "agent file '$T/dm2.yaml': fields 'manifest' and 'default_manifest'" \
    "naming the file and both fields"
expect_eq "$(nreqs)" 0 "and no model call was made"

# --- the whole agent graph is checked before the first model call ----------------------------
# check_graph NAME FILE-CONTENT WANT DESC: an agent handing off to NAME.yaml, and one using it
# as a tool, fail before any request with WANT in the message.
check_graph() {
    printf '%s\n' "$2" >"$T/$1.yaml"
    cat >"$T/top-$1.yaml" <<YAML
name: Top
manifest: {entries: {a.txt: {type: file, content: "a"}}}
handoffs: [$1.yaml]
YAML
    cat >"$T/tool-$1.yaml" <<YAML
name: ToolUser
agents_as_tools: [{file: $1.yaml, name: helper}]
YAML
    mk "$T/s3.json" '[resp(1, msg("never"))]'
    local top
    for top in top tool; do
        start_fake "$T/s3.json"
        run "$SBX" run --base-url "$FAKE_URL" -a "$T/$top-$1.yaml" "hi"
        expect_rc 1 "$4 ($top): the run fails"
        expect_in "$T/err" "agent file '$T/$1.yaml': $3" "$4 ($top): naming the file and the field"
        expect_eq "$(nreqs)" 0 "$4 ($top): before any model call"
        expect_eq "$(live)" 0 "$4 ($top): and no sandbox was made"
    done
}
check_graph badpath 'name: BadPath
manifest: {entries: {"a/../../etc/x": {type: file, content: "x"}}}' \
    "manifest: entry 'a/../../etc/x': path must not contain '..'" "a handoff's manifest with a bad path"
check_graph badcap 'name: BadCap
manifest: {entries: {}}
capabilities: [shell, telepathy]' \
    "field 'capabilities': unknown capability 'telepathy'" "a handoff's unknown capability"
check_graph badfield 'name: BadField
capabilities: [{type: shell, bogus: 1}]' \
    "field 'capabilities': capability 'shell'" "a handoff's bad capability field"
expect_in "$T/err" "bogus" "the bad capability field is named"
check_graph badfile 'name: BadFile
manifest: missing-manifest.yaml' \
    "manifest '$T/missing-manifest.yaml'" "a handoff's missing manifest file"

done_testing
