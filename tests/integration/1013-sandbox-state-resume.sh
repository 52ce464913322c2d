#!/usr/bin/env bash
# sbx sandbox state / resume: resume reconnects to a live sandbox (same id, nothing rebuilt) and
# rebuilds a removed or stopped one from the state's snapshot; secret values never appear in a
# state, references to harness credentials stay references and are resolved again; a corrupt,
# truncated, wrong-version or hostile state file is refused and creates nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

export OPENAI_API_KEY=sk-test-harness-credential-4711
cat > "$T/manifest.yaml" <<'YAML'
entries:
  a.txt:
    type: file
    content: "a\n"
environment:
  PLAIN: visible
  HIDDEN:
    value: hunter2-secret-value
    secret: true
  KEY:
    type: secret
    env: OPENAI_API_KEY
YAML

state_field() { # FILE EXPR (python on s)
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

run "$SBX" sandbox create --manifest "$T/manifest.yaml" --pass-secret OPENAI_API_KEY
expect_rc 0 "create with a secret and a harness credential reference"
id=$(cat "$T/out")
"$SBX" sandbox exec "$id" -- sh -c 'echo one > f1'
run "$SBX" sandbox state "$id"
expect_rc 0 "state"
cp "$T/out" "$T/state.json"
expect_not_in "$T/state.json" "hunter2-secret-value" "a secret value is not in the state output"
expect_not_in "$RUNBASE/$id/state.json" "hunter2-secret-value" "nor in state.json"
expect_not_in "$T/state.json" "sk-test-harness-credential-4711" "a harness credential is not in the state"
expect_not_in "$RUNBASE/$id/state.json" "sk-test-harness-credential-4711" "nor in state.json"
expect_eq "$(state_field "$T/state.json" 's["manifest"]["environment"]["KEY"]["env"]')" "OPENAI_API_KEY" \
    "the credential reference is kept as a reference"
expect_eq "$(state_field "$T/state.json" 's["snapshot"][:7]')" "sha256:" "state takes a snapshot first"
created=$(state_field "$T/state.json" 's["created"]')

# Live: reconnect, rebuild nothing.
"$SBX" sandbox exec "$id" -- sh -c 'echo two > f2'
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "resume of a live sandbox"
expect_eq "$(cat "$T/out")" "$id" "prints its id"
run "$SBX" sandbox exec "$id" -- cat f2
expect_eq "$(cat "$T/out")" "two" "nothing was rebuilt (a file written after the state is there)"
run "$SBX" sandbox state --no-snapshot "$id"
expect_eq "$(state_field "$T/out" 's["created"]')" "$created" "the same sandbox"

# Removed: rebuilt from the snapshot, with the same id.
"$SBX" sandbox rm "$id" >/dev/null
run "$SBX" sandbox resume --pass-secret OPENAI_API_KEY "$T/state.json"
expect_rc 0 "resume of a removed sandbox"
expect_eq "$(cat "$T/out")" "$id" "it comes back with the same id"
run "$SBX" sandbox exec "$id" -- sh -c 'cat f1 a.txt; test -e f2 || echo no-f2; echo "$PLAIN $KEY"'
expect_eq "$(cat "$T/out")" "one
a
no-f2
visible sk-test-harness-credential-4711" "content from the snapshot; the reference is resolved again"

# Without --pass-secret the credential is not let through.
"$SBX" sandbox rm "$id" >/dev/null
run "$SBX" sandbox resume "$T/state.json"
expect_rc 1 "a rebuild does not pass a harness credential unless told"
expect_in "$T/err" "--pass-secret" "and says how"
nothing_left "a refused rebuild creates nothing"

# Stopped: the state of a stopped sandbox brings it back; its record goes.
run "$SBX" sandbox resume --pass-secret OPENAI_API_KEY "$T/state.json"
"$SBX" sandbox stop "$id" >/dev/null
expect_not_in "$SBX_STOPPED/$id.json" "hunter2-secret-value" "a secret value is not in the stopped record"
expect_not_in "$SBX_STOPPED/$id.json" "sk-test-harness-credential-4711" "nor a harness credential"
run "$SBX" sandbox resume --pass-secret OPENAI_API_KEY "$T/state.json"
expect_rc 0 "resume of a stopped sandbox"
expect_eq "$(cat "$T/out")" "$id" "same id"
[ -e "$SBX_STOPPED/$id.json" ] && not_ok "its stopped record is gone" || ok "its stopped record is gone"
run "$SBX" sandbox exec "$id" -- cat f1
expect_eq "$(cat "$T/out")" "one" "with its content"
"$SBX" sandbox rm "$id" >/dev/null

# A state without a snapshot cannot rebuild.
id=$("$SBX" sandbox create)
"$SBX" sandbox state --no-snapshot "$id" > "$T/nosnap.json"
"$SBX" sandbox rm "$id" >/dev/null
run "$SBX" sandbox resume "$T/nosnap.json"
expect_rc 1 "a gone sandbox without a snapshot is not rebuilt"
expect_in "$T/err" "is gone and its state has no snapshot" "clearly"

# Grants are trusted configuration: a state never grants a host path by itself.
mkdir -p "$T/shared"
if id=$("$SBX" sandbox create --ro "$T/shared" 2>/dev/null); then
    "$SBX" sandbox state "$id" > "$T/grant.json"
    "$SBX" sandbox rm "$id" >/dev/null
    run "$SBX" sandbox resume "$T/grant.json"
    expect_rc 1 "a state with a grant is not rebuilt without it"
    expect_in "$T/err" "$T/shared" "naming the host path"
    nothing_left "and nothing is created"
    run "$SBX" sandbox resume --ro "$T/shared" "$T/grant.json"
    expect_rc 0 "given again, the grant applies"
    "$SBX" sandbox rm "$(cat "$T/out")" >/dev/null
fi

# What weakens a sandbox is not accepted from a state file by itself.
opt_in() { # DESC NEEDLE CREATE-OPTION... -- RESUME-OPTION...
    local desc=$1 needle=$2 copts=() ropts=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do copts+=("$1"); shift; done
    shift
    ropts=("$@")
    if ! id=$("$SBX" sandbox create "${copts[@]}" 2>"$T/opt.err"); then
        diag "$desc: cannot create here: $(cat "$T/opt.err")"
        return
    fi
    "$SBX" sandbox state "$id" > "$T/opt.json"
    "$SBX" sandbox rm "$id" >/dev/null
    run "$SBX" sandbox resume "$T/opt.json"
    expect_rc 1 "$desc: not rebuilt without the opt-in"
    expect_in "$T/err" "$needle" "$desc: the error says what to give"
    nothing_left "$desc: nothing is created"
    run "$SBX" sandbox resume "${ropts[@]}" "$T/opt.json"
    expect_rc 0 "$desc: rebuilt when the resume asks for it too"
    "$SBX" sandbox rm "$id" >/dev/null 2>&1
}
opt_in "no isolation" "--isolation none" --isolation none -- --isolation none
opt_in "no CPU limit" "--cpus none" --cpus none -- --cpus none
opt_in "an allowed domain" "--network allow:example.com" --network allow:example.com -- --network allow:example.com

# Bad state files: a clear error naming what is wrong, and nothing created.
nothing_left "no sandbox before the bad files"
bad() { # DESC NEEDLE: resume $T/bad.json
    run "$SBX" sandbox resume --pass-secret OPENAI_API_KEY "$T/bad.json"
    expect_rc 1 "$1 is refused"
    expect_in "$T/err" "$2" "$1: the error names it"
    nothing_left "$1 creates nothing"
}
head -c 300 "$T/state.json" > "$T/bad.json"
bad "a truncated state" "session state"
head -c 2000 /dev/urandom > "$T/bad.json"
bad "a corrupt state" "session state"
: > "$T/bad.json"
bad "an empty state" "empty"
mutate() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(s, open(sys.argv[3], "w"))' "$T/state.json" "$1" "$T/bad.json"; }
mutate 's["version"] = 2'
bad "a state of another version" "version 2"
mutate 's["id"] = "../../../tmp/x"'
bad "a state with a path for an id" "'id'"
mutate 's["provider"] = "elsewhere"'
bad "a state of an unknown provider" "elsewhere"
mutate 's["options"]["isolation"] = "off"'
bad "a state with a bad option" "isolation"
mutate 's["snapshot"] = "sha256:" + "0" * 64'
bad "a state whose snapshot is not in the store" "sha256:"
mutate 's["manifest"]["entries"]["../escape"] = {"type": "file", "content": "x"}'
bad "a state with a manifest escaping the workspace" "manifest"
mutate 's["exposed_ports"] = [0]'
bad "a state with a bad port" "exposed_ports"
run "$SBX" sandbox resume "$T/does-not-exist.json"
expect_rc 1 "a missing file is refused"

# A manifest too large to record in a session state is refused at create, not written into a
# state.json that could not be read back. Only ephemeral files keep their bytes there (the
# others are recorded by digest: 1024 creates and resumes 2000 files over 8 MiB).
python3 -c 'import json; print(json.dumps({"entries": {"big.txt": {"type": "file", "ephemeral": True, "content": "x" * (9 << 20)}}}))' > "$T/big.json"
run "$SBX" sandbox create --manifest "$T/big.json"
expect_rc 1 "a manifest too large for the session state is refused"
expect_in "$T/err" "session state" "saying why"
nothing_left "and nothing is created"

done_testing
