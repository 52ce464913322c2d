#!/usr/bin/env bash
# Adding a provider is one folder, one line of src/providers/table.c and one subdir() line of
# src/providers/meson.build (docs/internals/providers.md, "Adding a provider"). The proof: copy
# the source tree (git ls-files), drop tests/providers/null/ into src/providers/null/, add
# exactly those two lines, build sbx and the conformance program, and use the new provider:
# its options, traits and help come from its table entry, a sandbox of it is made, found by id
# through sbx's record, listed and removed, and the conformance suite skips each trait it does
# not declare, saying so. Slow (a whole build): suite 'providers', run in parallel with others.
. "$SBX_SRCDIR/tests/integration/lib.sh"
command -v git >/dev/null || skip_all "git is not installed"
command -v meson >/dev/null && command -v ninja >/dev/null || skip_all "meson or ninja is missing"
git -C "$SBX_SRCDIR" rev-parse --git-dir >/dev/null 2>&1 || skip_all "the source is not a git checkout"

S="$T/src"
mkdir -p "$S"
(cd "$SBX_SRCDIR" && git ls-files -z | xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$S"
git -C "$S" init -q
git -C "$S" add -A
git -C "$S" -c user.name=sbx -c user.email=sbx@localhost commit -q -m "the tree as it is"

cp -r "$SBX_SRCDIR/tests/providers/null" "$S/src/providers/null"
sed -i 's|^    /\* a new provider: one line above this one \*/$|    X(null)                   \\\n&|' "$S/src/providers/table.c"
sed -i "s|^subdir('docker')\$|&\nsubdir('null')|" "$S/src/providers/meson.build"
git -C "$S" add -A
expect_eq "$(git -C "$S" diff --cached --numstat | awk '{print $1, $2, $3}' | sort)" \
    "$(printf '%s\n' "1 0 src/providers/meson.build" "1 0 src/providers/table.c" \
        "$(wc -l <"$SBX_SRCDIR/tests/providers/null/meson.build") 0 src/providers/null/meson.build" \
        "$(wc -l <"$SBX_SRCDIR/tests/providers/null/null.c") 0 src/providers/null/null.c" | sort)" \
    "the change is the folder, one line of table.c and one of src/providers/meson.build"
diag "$(git -C "$S" diff --cached --stat)"

start=$(date +%s)
if ! meson setup --buildtype=debug "$S/build" "$S" >"$T/setup.log" 2>&1 ||
    ! ninja -C "$S/build" -j2 sbx tests/conformance/test-provider >"$T/build.log" 2>&1; then
    not_ok "the tree with the null provider builds"
    diag "$(tail -n 30 "$T/setup.log" "$T/build.log" 2>/dev/null)"
    done_testing
    exit 1
fi
ok "the tree with the null provider builds (sbx and the conformance program, $(($(date +%s) - start)) s)"
NSBX="$S/build/sbx"
export SBX_RECORDS="$T/records" NULLDIR="$T/nulls"
unset DOCKER_HOST

run "$NSBX" sandbox providers null
expect_rc 0 "sbx sandbox providers null"
expect_in "$T/out" "null: a plain host directory per sandbox" "its summary comes from its entry"
expect_in "$T/out" "traits: none" "it declares no trait"
expect_in "$T/out" "dir=DIR  --null-dir  [locator]" "its option, flag and kind"
run "$NSBX" sandbox create --help
expect_in "$T/out" "--null-dir DIR" "its flag is in the help of sandbox create"
tr -s ' \n' ' ' <"$T/out" >"$T/flat"
grep -qE "provider: local \(the default\), docker, ([a-z0-9_-]+, )*null " "$T/flat" &&
    ok "and it is one of the providers named there" || not_ok "and it is one of the providers named there"
"$NSBX" __gen bash >"$T/bash"
grep -q -- "--null-dir" "$T/bash" && ok "and in the completions" || not_ok "and in the completions"
run "$NSBX" sandbox create --provider null --isolation none
expect_rc 2 "another provider's option"
expect_in "$T/err" "option '--isolation' is for the local provider, not --provider null" "is refused naming whose it is"
run "$NSBX" sandbox create --provider nope
expect_in "$T/err" "unknown provider 'nope' (local, docker, " "the provider list comes from the table"
expect_in "$T/err" ", null)" "with the new one last"

run "$NSBX" sandbox create --provider null --null-dir "$NULLDIR"
expect_rc 0 "sbx sandbox create --provider null"
id=$(head -n1 "$T/out")
[ -d "$NULLDIR/$id/workspace" ] && ok "its workspace is a host directory" || not_ok "its workspace is a host directory"
expect_eq "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["provider"], r["options"])' "$SBX_RECORDS/$id.json" 2>&1)" \
    "null {'dir': '$NULLDIR'}" "sbx recorded its provider and locator"
run "$NSBX" sandbox exec "$id" -- true
expect_rc 0 "exec true by id, found through the record"
run "$NSBX" sandbox exec "$id" -- sh -c 'echo out; echo err >&2; exit 3'
expect_rc 3 "exec passes the status"
expect_eq "$(cat "$T/out")/$(cat "$T/err")" "out/err" "and the streams"
run "$NSBX" sandbox ps --json
expect_eq "$(python3 -c 'import json,sys; print([e["provider"] for e in json.load(open(sys.argv[1])) if e["id"] == sys.argv[2]])' "$T/out" "$id" 2>&1)" \
    "['null']" "ps lists it once, with its provider"
run "$NSBX" sandbox rm "$id"
expect_rc 0 "rm by id"
[ ! -e "$NULLDIR/$id" ] && ok "its directory is gone" || not_ok "its directory is gone"
[ ! -e "$SBX_RECORDS/$id.json" ] && ok "and its record" || not_ok "and its record"

# The conformance suite: the cases it can run, and a skip with the reason for each trait.
run env SBX_CONFORM_PROVIDER=null SBX_CONFORM_OPTIONS="{\"dir\": \"$NULLDIR\"}" \
    SBX_CONFORM_CASES=exit_codes,streams,pty,ports,state_resume_attach,snapshot,host_workspace,stop_start,mounts \
    "$S/build/tests/conformance/test-provider"
expect_rc 0 "the conformance program passes against the null provider"
bad=
for t in pty ports resume snapshots host-workspace stop-start mounts; do
    grep -q "# SKIP provider 'null' does not support $t\$" "$T/out" || bad="$bad $t"
done
expect_eq "$bad" "" "it skips each trait the provider does not declare, naming it"
expect_in "$T/out" "# SKIP files is not in SBX_CONFORM_CASES" "and says which cases were not asked for"
[ -z "$(ls -A "$NULLDIR" 2>/dev/null)" ] && ok "the suite left no sandbox" || not_ok "the suite left no sandbox"
grep -E "^(not ok|ok .*# SKIP)" "$T/out" | sed 's/^/#   /' | head -n 30
done_testing
