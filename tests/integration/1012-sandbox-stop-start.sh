#!/usr/bin/env bash
# sbx sandbox stop / start: a stopped sandbox is only its snapshot and a record (no process,
# no runtime dir, no workspace), ps lists it with its size, prune leaves it alone, start brings
# it back with the same id, content, manifest environment and limits; rm of a stopped sandbox
# removes it; a damaged record is refused and creates nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

cat > "$T/manifest.yaml" <<'YAML'
entries:
  hello.txt:
    type: file
    content: "hello\n"
environment:
  GREETING: bonjour
YAML

# Limits need cgroups the caller may use; where they are not, stop/start is checked without.
limits=(--memory 256M --pids 200)
if ! "$SBX" sandbox create "${limits[@]}" >"$T/probe" 2>"$T/probe.err"; then
    limits=()
    diag "explicit limits are not enforceable here: $(cat "$T/probe.err")"
else
    "$SBX" sandbox rm "$(cat "$T/probe")" >/dev/null
fi

run "$SBX" sandbox create --manifest "$T/manifest.yaml" "${limits[@]}"
expect_rc 0 "create"
id=$(cat "$T/out")
"$SBX" sandbox exec "$id" -- sh -c 'mkdir -p work/sub && echo progress > work/sub/state && chmod 0640 work/sub/state && ln -s sub/state work/link'
ws=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["workspace"])' < "$RUNBASE/$id/state.json")

run "$SBX" sandbox stop "$id"
expect_rc 0 "stop"
expect_eq "$(cat "$T/out")" "$id" "stop prints the id"
[ -e "$RUNBASE/$id" ] && not_ok "no runtime dir is left" || ok "no runtime dir is left"
[ -e "$ws" ] && not_ok "no workspace is left" || ok "no workspace is left"
[ -z "$(supervisor_pid "$id")" ] && ok "no supervisor runs" || not_ok "no supervisor runs"
[ -f "$SBX_STOPPED/$id.json" ] && ok "a stopped record is kept" || not_ok "a stopped record is kept"

run "$SBX" sandbox ps
expect_in "$T/out" "$id" "ps lists the stopped sandbox"
expect_in "$T/out" "stopped" "as stopped"
run "$SBX" sandbox ps --json
size=$(python3 -c '
import json, sys
s = [x for x in json.load(open(sys.argv[1])) if x["id"] == sys.argv[2]][0]
print(s["status"], s["snapshot_bytes"] > 0)' "$T/out" "$id")
expect_eq "$size" "stopped True" "ps --json says stopped and gives the snapshot's size"
run "$SBX" sandbox ps --all
expect_in "$T/out" "stopped" "ps --all lists it as stopped"
ref=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' "$SBX_STOPPED/$id.json")
run "$SBX" snapshot rm "$ref"
expect_rc 1 "the stopped sandbox's snapshot is held: snapshot rm refuses it"
run "$SBX" snapshot inspect "$ref"
expect_in "$T/out" "sandbox-$id" "the hold names the sandbox"

run "$SBX" sandbox exec "$id" -- true
expect_rc 125 "a stopped sandbox runs nothing"
expect_in "$T/err" "is stopped" "and says it is stopped"
run "$SBX" sandbox stop "$id"
expect_rc 1 "stopping it again fails"

"$SBX" sandbox prune >/dev/null 2>&1
[ -f "$SBX_STOPPED/$id.json" ] && ok "prune leaves a stopped sandbox alone" || not_ok "prune leaves a stopped sandbox alone"

run "$SBX" sandbox start "$id"
expect_rc 0 "start"
expect_eq "$(cat "$T/out")" "$id" "start keeps the id"
[ -e "$SBX_STOPPED/$id.json" ] && not_ok "the stopped record is gone" || ok "the stopped record is gone"
run "$SBX" sandbox exec "$id" -- sh -c 'cat work/sub/state work/link hello.txt; stat -c %a work/sub/state; echo "$GREETING"'
expect_eq "$(cat "$T/out")" "progress
progress
hello
640
bonjour" "content, modes, symlinks and the manifest environment are back"
if [ ${#limits[@]} -gt 0 ]; then
    run "$SBX" sandbox state --no-snapshot "$id"
    lim=$(python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["options"]["limits"]["memory"], s["limits"]["memory"], s["options"]["limits"]["pids"])' < "$T/out")
    expect_eq "$lim" "268435456 268435456 200" "the limits are back"
fi

# A stop that did not finish leaves its runtime dir (here an empty one): start finishes the stop
# (what is left goes) and brings the sandbox back (1032 kills real stops and starts); rm of such
# a leftover takes only the leftover, then start works.
"$SBX" sandbox stop "$id" >/dev/null
mkdir -m 0700 "$RUNBASE/$id"
run "$SBX" sandbox start "$id"
expect_rc 0 "start finishes a stop that left its runtime dir"
[ -f "$SBX_STOPPED/$id.json" ] && not_ok "and the stopped record goes" || ok "and the stopped record goes"
run "$SBX" sandbox exec "$id" -- cat work/sub/state
expect_eq "$(cat "$T/out")" progress "the sandbox is back with its content"
"$SBX" sandbox stop "$id" >/dev/null
mkdir -m 0700 "$RUNBASE/$id"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm removes the leftover"
[ -f "$SBX_STOPPED/$id.json" ] && ok "the stopped record survives that rm" || not_ok "the stopped record survives that rm"
run "$SBX" sandbox start "$id"
expect_rc 0 "then start works"

# rm of a stopped sandbox: the record goes.
"$SBX" sandbox stop "$id" >/dev/null
ref=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' "$SBX_STOPPED/$id.json")
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm of a stopped sandbox"
nothing_left "rm of a stopped sandbox leaves nothing"
run "$SBX" snapshot inspect "$ref"
expect_not_in "$T/out" "sandbox-$id" "rm released the hold on its snapshot"
run "$SBX" sandbox start "$id"
expect_rc 1 "start of a removed sandbox fails"
expect_in "$T/err" "no stopped sandbox" "clearly"

# A damaged record is refused: nothing is created, the record stays for rm.
run "$SBX" sandbox create
id=$(cat "$T/out")
"$SBX" sandbox stop "$id" >/dev/null
cp "$SBX_STOPPED/$id.json" "$T/good.json"
head -c 200 "$T/good.json" > "$SBX_STOPPED/$id.json"
run "$SBX" sandbox start "$id"
expect_rc 1 "a truncated record is refused"
expect_in "$T/err" "session state" "the error says what was wrong"
[ -e "$RUNBASE/$id" ] && not_ok "a refused start creates nothing" || ok "a refused start creates nothing"
sed 's/"version": 1/"version": 9/' "$T/good.json" > "$SBX_STOPPED/$id.json"
run "$SBX" sandbox start "$id"
expect_rc 1 "a record of another version is refused"
expect_in "$T/err" "version 9" "naming the version"
cp "$T/good.json" "$SBX_STOPPED/$id.json"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm of the stopped sandbox"
nothing_left "nothing is left"

done_testing
