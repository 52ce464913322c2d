#!/usr/bin/env bash
# The capability tools' schemas as a sandbox agent sends them: strict mode (every property
# required, optional ones nullable, objects closed, no keyword strict mode lacks), and calls in
# both forms run: the strict one with nulls and a lenient one that leaves optional fields out;
# and the base prompt's sections in the instructions.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

cat >"$T/a.yaml" <<'EOF'
name: Worker
instructions: Do the work.
manifest: {entries: {notes.txt: {type: file, content: "alpha\n"}}}
capabilities: [{type: filesystem, apply_patch: function}, shell]
EOF
strict='{"cmd": "cat notes.txt", "workdir": None, "shell": None, "login": None, "tty": None, "yield_time_ms": None, "max_output_tokens": None}'
mk "$T/s.json" "[resp(1, fcall(1, 'exec_command', $strict)),
    resp(2, fcall(2, 'exec_command', {'cmd': 'echo lenient'})),
    resp(3, fcall(3, 'exec_command', {'cmd': 'true', 'bogus': 1})),
    resp(4, msg('done'))]"
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_rc 0 "the run with strict tool calls succeeds"

# tool NAME: its definition in the first request.
tool() { fake_query "[t for t in reqs[0]['body']['tools'] if t.get('name') == '$1'][0]"; }
for name in exec_command write_stdin view_image apply_patch; do
    expect_eq "$(fake_query "[t for t in reqs[0]['body']['tools'] if t.get('name') == '$name'][0]['strict']")" \
        True "$name is sent with strict: true"
    expect_eq "$(fake_query "(lambda p: sorted(p['required']) == sorted(p['properties']) and p['additionalProperties'] is False)([t for t in reqs[0]['body']['tools'] if t.get('name') == '$name'][0]['parameters'])")" \
        True "$name: every property required, no extra properties"
done
tool exec_command >"$T/exec"
for kw in default minimum minLength; do
    expect_not_in "$T/exec" "'$kw'" "exec_command's strict schema has no '$kw'"
done
expect_eq "$(fake_query "[t for t in reqs[0]['body']['tools'] if t.get('name') == 'exec_command'][0]['parameters']['properties']['login']['type']")" \
    "['boolean', 'null']" "an optional boolean is nullable"
expect_eq "$(fake_query "[t for t in reqs[0]['body']['tools'] if t.get('name') == 'exec_command'][0]['parameters']['properties']['cmd']['type']")" \
    "string" "the mandatory cmd is not"

# The base prompt's sections reach the model.
fake_query 'reqs[0]["body"]["instructions"]' >"$T/instr"
for section in "Untrusted content:" "Secrets:" "Checking your work:" "The final answer:"; do
    expect_in "$T/instr" "$section" "the instructions have the section '$section'"
done

# The tool outputs the model read.
out_of() { fake_query "[i for i in reqs[$1]['body']['input'] if i.get('type') == 'function_call_output'][-1]['output']"; }
out_of 1 >"$T/o1"
expect_in "$T/o1" "alpha" "a strict call with nulls runs with the defaults"
out_of 2 >"$T/o2"
expect_in "$T/o2" "lenient" "a lenient call that leaves optional fields out runs"
out_of 3 >"$T/o3"
expect_in "$T/o3" "bogus" "an extra argument is refused, naming it"
done_testing
