#!/usr/bin/env bash
# Docker's habits for finding sandboxes: --name and --label on create (a name is unique and
# stands for the id everywhere), ps with its STATUS and NAME columns, -q, --format and
# --filter, and rm -f / rm --all (asked on a terminal through a real pty, --yes elsewhere).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
DRIVE="python3 $SBX_SRCDIR/tests/integration/pty-drive.py"

run "$SBX" sandbox create --isolation none --name web --label team=a --label env=dev
expect_rc 0 "create --name --label"
web=$(cat "$T/out")
run "$SBX" sandbox create --isolation none --name web
expect_rc 1 "a second sandbox of the same name is refused"
expect_in "$T/err" "the name 'web' is in use by sandbox '$web'" "naming the one that has it"
run "$SBX" sandbox create --isolation none --name 'no good'
expect_rc 2 "a name with a space is a usage error"
expect_in "$T/err" "bad sandbox name 'no good'" "saying what a name may hold"
run "$SBX" sandbox create --isolation none --label '=x'
expect_rc 2 "a label without a key is a usage error"
expect_eq "$(ls "$RUNBASE" | wc -l)" 1 "refused creates made nothing"
run "$SBX" sandbox create --isolation none --label team=b
expect_rc 0 "create with a label only"
other=$(cat "$T/out")

# The name wherever an id goes.
run "$SBX" sandbox exec web -- sh -c 'echo named > f; pwd'
expect_rc 0 "exec by name"
echo hello >"$T/in"
run "$SBX" sandbox cp "$T/in" web:in
expect_rc 0 "cp into NAME:PATH"
run "$SBX" sandbox cp web:f "$T/f"
expect_eq "$(cat "$T/f")" named "cp out of NAME:PATH"
run "$SBX" sandbox state --no-snapshot web
expect_in "$T/out" "\"id\": \"$web\"" "state by name"

# ps: STATUS and NAME columns, -q, filters, --format.
run "$SBX" sandbox ps
head -1 "$T/out" | grep -qE '^ID +PROVIDER +STATUS +CREATED +NAME +WORKSPACE$' &&
    ok "plain ps has STATUS and NAME columns" || { not_ok "plain ps has STATUS and NAME columns"; diag "$(cat "$T/out")"; }
grep -qE "^$web +local +live +[^ ]+ +web " "$T/out" && ok "the named sandbox's row" ||
    { not_ok "the named sandbox's row"; diag "$(cat "$T/out")"; }
grep -qE "^$other +local +live +[^ ]+ +- " "$T/out" && ok "an unnamed one shows -" ||
    { not_ok "an unnamed one shows -"; diag "$(cat "$T/out")"; }
run "$SBX" sandbox ps -q
expect_eq "$(sort "$T/out" | tr '\n' ' ')" "$(printf '%s\n' "$web" "$other" | sort | tr '\n' ' ')" "ps -q: the ids only"
run "$SBX" sandbox ps -q --filter label=team=a
expect_eq "$(cat "$T/out")" "$web" "--filter label=KEY=VALUE"
run "$SBX" sandbox ps -q --filter label=team
expect_eq "$(wc -l <"$T/out")" 2 "--filter label=KEY: every sandbox with the key"
run "$SBX" sandbox ps -q --filter label=team=a --filter label=team=b
expect_eq "$(wc -l <"$T/out")" 2 "two filters of one key: either"
run "$SBX" sandbox ps -q --filter label=team=b --filter name=we
expect_eq "$(cat "$T/out")" "" "filters of two keys: both"
run "$SBX" sandbox ps -q --filter name=we
expect_eq "$(cat "$T/out")" "$web" "--filter name=PART"
run "$SBX" sandbox ps --filter colour=red
expect_rc 2 "an unknown filter is a usage error"
run "$SBX" sandbox ps --filter "id=${other:0:6}" --format '{{.ID}}|{{.Name}}|{{.Status}}|{{.Label "team"}}|{{.Provider}}'
expect_eq "$(cat "$T/out")" "$other||live|b|local" "--format with fields and a label"
run "$SBX" sandbox ps --filter name=web --format '{{.Labels}}'
expect_eq "$(cat "$T/out")" "team=a,env=dev" "{{.Labels}}"
run "$SBX" sandbox ps --filter name=web --format 'table {{.Name}}\t{{.Status}}'
expect_eq "$(cat "$T/out" | tr -s ' ' | tr '\n' '/')" "NAME STATUS/web live/" "--format 'table ...' adds a header"
run "$SBX" sandbox ps --format '{{.Bogus}}'
expect_rc 2 "an unknown field is a usage error"
expect_in "$T/err" ".Label \"KEY\"" "listing the fields"
run "$SBX" sandbox ps --format json --filter name=web
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read()); assert d["name"]=="web" and d["labels"]["env"]=="dev"' "$T/out" &&
    ok "--format json: one object a line, with name and labels" || not_ok "--format json: one object a line, with name and labels"
run "$SBX" sandbox ps --json
python3 -c 'import json,sys; d={x["id"]: x for x in json.load(open(sys.argv[1]))}; assert d[sys.argv[2]]["name"]=="web" and "name" not in d[sys.argv[3]]' "$T/out" "$web" "$other" &&
    ok "ps --json has the name" || not_ok "ps --json has the name"

# Stopped and started again under its name.
run "$SBX" sandbox stop web
expect_rc 0 "stop by name"
run "$SBX" sandbox ps --filter status=stopped --format '{{.Name}} {{.Status}}'
expect_eq "$(cat "$T/out")" "web stopped" "STATUS says stopped; --filter status="
run "$SBX" sandbox start web
expect_rc 0 "start by name"
run "$SBX" sandbox exec web -- cat in
expect_eq "$(cat "$T/out")" hello "the started sandbox has its files"

# A control character in a label value is refused; a name freed by rm can be given again.
run "$SBX" sandbox create --isolation none --label "k=$(printf 'a\033b')"
expect_rc 2 "a label value with a control character is refused"
run "$SBX" sandbox rm -f web
expect_rc 0 "rm -f by name"
expect_eq "$(cat "$T/out")" web "prints what was given"
[ ! -e "$RUNBASE/$web" ] && ok "the named sandbox is gone" || not_ok "the named sandbox is gone"
run "$SBX" sandbox create --isolation none --name web
expect_rc 0 "the name is free again after rm"
run "$SBX" sandbox rm web
# A sandbox removed behind sbx's back frees its name too.
run "$SBX" sandbox create --isolation none --name ghost
ghost=$(cat "$T/out")
kill -9 "$(supervisor_pid "$ghost")"
"$SBX" sandbox prune >/dev/null 2>&1
run "$SBX" sandbox create --isolation none --name ghost
expect_rc 0 "the name of a sandbox that died and was pruned is free"
expect_not_in "$T/out" "$ghost" "for a new sandbox"

# A run in a named sandbox: the library's attach takes the name too.
EX="$SBX_SRCDIR/examples/coding-task"
"$SBX" sandbox create --isolation none --name task --manifest "$EX/manifest.yaml" >/dev/null 2>&1
run "$SBX" run --session task -m "replay:$EX/run.jsonl" "Do the task in TASK.md."
expect_rc 0 "run --session NAME"
run "$SBX" sandbox exec task -- grep -c "sum(values) / len(values)" stats.py
expect_eq "$(cat "$T/out")" 1 "the run worked in the named sandbox"

# rm --all: without a terminal it wants --yes; on one it asks.
n=$("$SBX" sandbox ps -aq | wc -l)
run "$SBX" sandbox rm --all </dev/null
expect_rc 2 "rm --all without a terminal and without --yes is refused"
expect_eq "$("$SBX" sandbox ps -aq | wc -l)" "$n" "and removes nothing"
run "$SBX" sandbox rm --all web
expect_rc 2 "rm --all with an id is a usage error"
$DRIVE "$T/tty" 'remove them? [y/N]=>n' -- "$SBX" sandbox rm --all
expect_eq "$?" 1 "answering n on the terminal: status 1"
expect_in "$T/tty" "this removes $n sandboxes" "the question says how many"
expect_in "$T/tty" "$other" "and lists them"
expect_eq "$("$SBX" sandbox ps -aq | wc -l)" "$n" "nothing removed"
$DRIVE "$T/tty" 'remove them? [y/N]=>y' -- "$SBX" sandbox rm --all
expect_eq "$?" 0 "answering y removes them"
expect_eq "$("$SBX" sandbox ps -aq)" "" "every sandbox is gone"
run "$SBX" sandbox rm --all
expect_rc 0 "rm --all with nothing to remove asks nothing"
expect_eq "$(ls "$SBX_RECORDS" 2>/dev/null)" "" "no record is left"
done_testing
