#!/usr/bin/env bash
# Manifest details that must reach the agent, through `sbx run` and the fake model server:
# entry descriptions in the instructions' workspace listing (bounded, control characters
# blanked), `default_manifest` as the SDK's name of `manifest`, a whole agent graph validated
# before any model call, entry `group` and `root_owner` applied, git_repo keeping its
# repository, and `ephemeral` entries and variables left out of snapshots and session states
# but applied again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

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

# --- entry group: applied inside (root runner), a clear error where it cannot be -------------
cat >"$T/g.yaml" <<'YAML'
users: [owner, ana, bob]
groups: [{name: analysts, users: [ana]}]
entries:
  data:
    type: dir
    group: {name: analysts}
    children:
      r.csv: {type: file, content: "secret table\n", group: analysts, permissions: "0640"}
  mine.txt: {type: file, content: "m\n", group: bob}
  plain.txt: {type: file, content: "p\n"}
YAML
if [ "$(id -u)" = 0 ]; then
    run "$SBX" sandbox create --manifest "$T/g.yaml"
    expect_rc 0 "a manifest with entry groups creates (root runner)"
    gid=$(cat "$T/out")
    run "$SBX" sandbox exec "$gid" -- stat -c '%n %U %G %a' data data/r.csv mine.txt plain.txt
    expect_eq "$(tr '\n' ';' <"$T/out")" \
        "data sandbox analysts 755;data/r.csv sandbox analysts 640;mine.txt sandbox bob 644;plain.txt sandbox sandbox 644;" \
        "each entry has its group inside; the provider's user 'sandbox' owns them (the SDK's rule)"
    run "$SBX" sandbox exec "$gid" -- id -un
    expect_eq "$(cat "$T/out")" "sandbox" "commands run as the provider's user, not the first manifest user"
    # An agent's run_as names the manifest user its commands run as.
    printf 'name: Owner\nrun_as: owner\ncapabilities: [shell]\nmanifest: g.yaml\n' >"$T/owner.yaml"
    printf 'name: Default\ncapabilities: [shell]\nmanifest: g.yaml\n' >"$T/default.yaml"
    for who in owner default; do
        mk "$T/who.json" '[resp(1, sh(1, "id -un")), resp(2, msg("ok"))]'
        start_fake "$T/who.json"
        run "$SBX" run --base-url "$FAKE_URL" -a "$T/$who.yaml" "who"
        expect_rc 0 "an agent ($who) runs in a manifest with users"
        fake_query 'reqs[1]["body"]["input"][-1]["output"]' >"$T/who.out"
        want=$([ "$who" = owner ] && echo owner || echo sandbox)
        expect_in "$T/who.out" "$want" "its commands run as '$want'"
    done
    run "$SBX" sandbox exec -u ana "$gid" -- cat data/r.csv
    expect_eq "$(cat "$T/out")" "secret table" "a member of the group reads the 0640 file"
    run "$SBX" sandbox exec -u bob "$gid" -- cat data/r.csv
    expect_rc 1 "a user outside the group cannot"
    "$SBX" sandbox exec "$gid" -- rm mine.txt
    "$SBX" sandbox stop "$gid" >/dev/null && "$SBX" sandbox start "$gid" >/dev/null
    run "$SBX" sandbox exec "$gid" -- stat -c '%n %G' data data/r.csv plain.txt
    expect_eq "$(tr '\n' ';' <"$T/out")" "data analysts;data/r.csv analysts;plain.txt sandbox;" \
        "stop and start set the groups again (a snapshot keeps no owners)"
    run "$SBX" sandbox exec "$gid" -- test -e mine.txt
    expect_rc 1 "without bringing back an entry the sandbox removed"
    "$SBX" sandbox rm "$gid" >/dev/null
else
    run "$SBX" sandbox create --manifest "$T/g.yaml"
    expect_rc 1 "an unprivileged runner refuses entry groups"
    expect_in "$T/err" "entry 'data': group 'analysts': this sandbox maps only its default user's group (unprivileged runner)" \
        "saying which entry and why"
    expect_eq "$(live)" 0 "and leaves no sandbox"
fi
printf 'entries:\n  x: {type: file, content: "x", group: nosuch}\n' >"$T/g2.yaml"
run "$SBX" sandbox create --manifest "$T/g2.yaml"
expect_rc 1 "a group the sandbox does not have fails the create"
expect_in "$T/err" "entry 'x': group 'nosuch' does not exist in the sandbox" "naming the entry and the group"
expect_eq "$(live)" 0 "and leaves no sandbox"
expect_eq "$(ls "$SBX_WORKSPACES" 2>/dev/null | wc -l)" 0 "nor a workspace"

# --- root_owner: the workspace root itself to a declared user ---------------------------------
printf 'root: /home/user\nusers: [user]\nroot_owner: user\n' >"$T/ro.yaml"
if [ "$(id -u)" = 0 ]; then
    run "$SBX" sandbox create --manifest "$T/ro.yaml"
    expect_rc 0 "a manifest with root_owner creates (root runner)"
    rid=$(cat "$T/out")
    run "$SBX" sandbox exec -u user "$rid" -- sh -c 'stat -c "%U %G" /home/user; echo "$HOME $(pwd)"; touch a && stat -c %U a'
    expect_eq "$(tr '\n' ';' <"$T/out")" "user user;/home/user /home/user;user;" \
        "the root is the user's, who writes in it"
    run "$SBX" sandbox exec "$rid" -- id -un
    expect_eq "$(cat "$T/out")" "sandbox" "commands still run as the provider's user by default"
    "$SBX" sandbox stop "$rid" >/dev/null && "$SBX" sandbox start "$rid" >/dev/null
    run "$SBX" sandbox exec -u user "$rid" -- sh -c 'stat -c "%U" /home/user a'
    expect_eq "$(tr '\n' ';' <"$T/out")" "user;sandbox;" \
        "stop and start give the root to the user again (the restored files are the provider's)"
    "$SBX" sandbox rm "$rid" >/dev/null
    mkdir -p "$T/given"
    run "$SBX" sandbox create --manifest "$T/ro.yaml" --workspace "$T/given"
    expect_rc 1 "root_owner refuses a given workspace"
    expect_in "$T/err" "field 'root_owner': user 'user': only a workspace sbx makes can be given to a user" \
        "saying why"
    expect_eq "$(stat -c %u "$T/given")" 0 "and leaves the directory's owner alone"
fi
run "$SBX" sandbox create --isolation none --manifest "$T/ro.yaml"
expect_rc 1 "root_owner without isolation is refused"
expect_in "$T/err" "field 'root_owner': user 'user': this sandbox maps only its default user (isolation none)" \
    "saying why"
expect_eq "$(live)" 0 "and leaves no sandbox"

# --- extra_path_grants: host paths the manifest shows inside, checked as --ro/--rw are --------
mkdir -p "$T/tool" "$T/outdir"
echo toolfile >"$T/tool/t.txt"
chmod 0777 "$T/outdir"
cat >"$T/grants.yaml" <<YAML
extraPathGrants:
  - {path: /opt/tool, hostPath: $T/tool, readOnly: true, description: the toolchain}
  - {path: /data/out, host_path: $T/outdir}
YAML
run "$SBX" sandbox create --manifest "$T/grants.yaml"
expect_rc 0 "a manifest with extra_path_grants creates (the JS SDK's spelling)"
grid=$(cat "$T/out")
run "$SBX" sandbox exec "$grid" -- sh -c 'cat /opt/tool/t.txt; echo out > /data/out/w.txt; touch /opt/tool/x 2>/dev/null || echo read-only'
expect_eq "$(tr '\n' ';' <"$T/out")" "toolfile;read-only;" "a read-only grant reads and refuses writes"
expect_eq "$(cat "$T/outdir/w.txt" 2>/dev/null)" "out" "a writable grant writes to the host path"
run "$SBX" sandbox state "$grid"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print([(g["dst"], g["writable"]) for g in d["options"]["grants"]], "extra_path_grants" in d["manifest"])' "$T/out" >"$T/gst"
expect_eq "$(cat "$T/gst")" "[('/opt/tool', False), ('/data/out', True)] False" \
    "the session state records them as grants, its manifest does not carry them"
cp "$T/out" "$T/gstate.json"
"$SBX" sandbox rm "$grid" >/dev/null
run "$SBX" sandbox resume "$T/gstate.json"
expect_rc 1 "rebuilding from the state without the grants given again is refused"
expect_in "$T/err" "a session state never grants host paths" "as for --ro/--rw grants"
printf 'extra_path_grants: [/root]\n' >"$T/g-home.yaml"
run "$SBX" sandbox create --manifest "$T/g-home.yaml"
expect_rc 1 "a grant of a home directory is refused"
expect_in "$T/err" "grant source '/root' is a home directory" "with the message --ro /root gets"
run "$SBX" sandbox create --ro /root
expect_in "$T/err" "grant source '/root' is a home directory" "(the same check as --ro)"
run "$SBX" sandbox create --isolation none --manifest "$T/grants.yaml"
expect_rc 1 "grants without isolation are refused"
expect_in "$T/err" "manifest field 'extra_path_grants': path grants need isolation" "naming the field"
expect_eq "$(live)" 0 "no sandbox is left"

# --- git_repo keeps its repository (shallow), without the remote -----------------------------
if command -v git >/dev/null; then
    gitc() { git -C "$T/work" -c user.email=t@example.com -c user.name=t "$@"; }
    git init -q -b main "$T/work"
    mkdir "$T/work/pkg" && echo p >"$T/work/pkg/p.txt"
    echo v1 >"$T/work/f.txt" && gitc add f.txt pkg && gitc commit -qm first
    echo v2 >"$T/work/f.txt" && gitc commit -qam second
    head=$(gitc rev-parse HEAD)
    cat >"$T/git.yaml" <<YAML
entries:
  repo: {type: git_repo, repo: "file://$T/work", ref: main, description: "The project"}
  part: {type: git_repo, repo: "file://$T/work", subpath: pkg, ref: main}
YAML
    run "$SBX" sandbox create --manifest "$T/git.yaml"
    expect_rc 0 "a git_repo manifest creates"
    rid=$(cat "$T/out")
    commit=$(python3 -c 'import json,sys; print([r["commit"] for r in json.load(open(sys.argv[1]))["materialized"] if r["path"] == "repo"][0])' "$RUNBASE/$rid/state.json")
    expect_eq "$commit" "$head" "the resolved commit is still recorded"
    run "$SBX" sandbox exec "$rid" -- test -d repo/.git
    expect_rc 0 "a whole checkout keeps .git"
    run "$SBX" sandbox exec "$rid" -- sh -c 'cat part/p.txt; test ! -e part/.git'
    expect_eq "$rc $(cat "$T/out")" "0 p" "a subpath gets the files only"
    run "$SBX" sandbox exec "$rid" -- git --version
    if [ "$rc" = 0 ]; then
        run "$SBX" sandbox exec "$rid" -- sh -c 'cd repo && git log --format=%s'
        expect_eq "$(cat "$T/out")" "second" "git log works inside, on a shallow history"
        run "$SBX" sandbox exec "$rid" -- sh -c 'cd repo && echo v3 > f.txt && git diff --stat && git remote'
        expect_in "$T/out" "f.txt | 2 +-" "git diff works inside"
        expect_not_in "$T/out" "origin" "the remote is not kept"
    else
        diag "git is not available inside the sandbox: git log / git diff not checked"
        ok "# SKIP git is not in the sandbox"
    fi
    expect_not_in "$SBX_WORKSPACES/$rid/repo/.git/config" "$T/work" "the host path of the remote is not in .git/config"
    run "$SBX" sandbox snapshot "$rid"
    expect_rc 0 "a workspace with a repository snapshots"
    snap=$(tail -n1 "$T/out")
    run "$SBX" sandbox create --snapshot "$snap"
    expect_rc 0 "and restores"
    rid2=$(cat "$T/out")
    run "$SBX" sandbox exec "$rid2" -- sh -c 'cat repo/f.txt; test -f repo/.git/HEAD && echo has-git'
    expect_eq "$(tr '\n' ' ' <"$T/out")" "v3 has-git " "with its repository"
    run "$SBX" manifest tree "$T/git.yaml"
    expect_in "$T/out" "repo/  (git repository)  # The project" "sbx manifest tree still shows the repository"
    "$SBX" sandbox rm "$rid" >/dev/null
    "$SBX" sandbox rm "$rid2" >/dev/null
else
    ok "# SKIP git is not installed on the host"
fi

# --- ephemeral entries and variables: never saved, applied again ----------------------------
mkdir "$T/eph"
cat >"$T/eph/m.yaml" <<'YAML'
entries:
  keep.txt: {type: file, content: "kept\n"}
  cache: {type: dir, ephemeral: true, children: {seed.txt: {type: file, content: "seed\n"}}}
  token.txt: {type: file, content: "tok\n", ephemeral: true}
environment:
  PLAIN: plain-value
  EPH: {value: eph-value-123, ephemeral: true}
YAML
lookcmd='for f in keep.txt work.txt token.txt cache/seed.txt cache/junk.txt; do printf "%s=%s " "$f" "$(cat "$f" 2>/dev/null || echo -)"; done; echo "PLAIN=${PLAIN-unset} EPH=${EPH-unset}"'
# look ID: what the workspace and environment show
look() { "$SBX" sandbox exec "$1" -- sh -c "$lookcmd"; }
full="keep.txt=kept work.txt=work token.txt=tok cache/seed.txt=seed cache/junk.txt=- PLAIN=plain-value EPH=eph-value-123"
noeph="keep.txt=kept work.txt=work token.txt=tok cache/seed.txt=seed cache/junk.txt=- PLAIN=plain-value EPH=unset"
run "$SBX" sandbox create --manifest "$T/eph/m.yaml"
expect_rc 0 "a manifest with ephemeral entries and variables creates"
e1=$(cat "$T/out")
"$SBX" sandbox exec "$e1" -- sh -c 'echo work > work.txt; echo changed > token.txt; echo junk > cache/junk.txt'
expect_eq "$(look "$e1")" \
    "keep.txt=kept work.txt=work token.txt=changed cache/seed.txt=seed cache/junk.txt=junk PLAIN=plain-value EPH=eph-value-123" \
    "the sandbox has them all"
run "$SBX" sandbox state "$e1"
expect_rc 0 "its session state is printed"
cp "$T/out" "$T/eph/state.json"
expect_not_in "$T/eph/state.json" "eph-value-123" "the session state holds no ephemeral variable's value"
expect_in "$T/eph/state.json" "plain-value" "but the others"
snap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' "$T/eph/state.json")
run "$SBX" sandbox create --snapshot "$snap"
expect_rc 0 "its snapshot restores without a manifest"
e2=$(cat "$T/out")
expect_eq "$(look "$e2")" \
    "keep.txt=kept work.txt=work token.txt=- cache/seed.txt=- cache/junk.txt=- PLAIN=unset EPH=unset" \
    "the snapshot holds no ephemeral entry (and nothing of what was written into them)"
"$SBX" sandbox rm "$e2" >/dev/null
run "$SBX" sandbox create --snapshot "$snap" --manifest "$T/eph/m.yaml"
expect_rc 0 "restore with the manifest"
e2=$(cat "$T/out")
expect_eq "$(look "$e2")" "$full" "the ephemeral entries and variables are applied again on restore"
"$SBX" sandbox rm "$e2" >/dev/null

run "$SBX" sandbox stop "$e1"
expect_rc 0 "stop"
expect_not_in "$SBX_STOPPED/$e1.json" "eph-value-123" "the stopped record holds no ephemeral value"
run "$SBX" sandbox start "$e1"
expect_rc 0 "start"
expect_eq "$(look "$e1")" "$noeph" "start applies the ephemeral entries again; the variable's value was not saved"
"$SBX" sandbox stop "$e1" >/dev/null
run "$SBX" sandbox start --manifest "$T/eph/m.yaml" "$e1"
expect_rc 0 "start --manifest"
expect_eq "$(look "$e1")" "$full" "start --manifest sets the ephemeral variables again"

"$SBX" sandbox rm "$e1" >/dev/null
run "$SBX" sandbox resume --manifest "$T/eph/m.yaml" "$T/eph/state.json"
expect_rc 0 "resume --manifest rebuilds from the state"
e3=$(cat "$T/out")
expect_eq "$(look "$e3")" "$full" "with the ephemeral entries and variables again"
"$SBX" sandbox rm "$e3" >/dev/null

# Through sbx run: --snapshot and --session-state with the agent's manifest (trusted).
cat >"$T/eph/agent.yaml" <<'YAML'
name: Ephemeral
manifest: m.yaml
YAML
LOOKCMD=$lookcmd mk "$T/s4.json" '[resp(1, fcall(1, "exec_command", {"cmd": __import__("os").environ["LOOKCMD"]})), resp(2, msg("ok"))]'
start_fake "$T/s4.json"
run "$SBX" run --base-url "$FAKE_URL" --snapshot "$snap" -a "$T/eph/agent.yaml" "look"
expect_rc 0 "sbx run --snapshot"
outputs 1 >"$T/o"
expect_in "$T/o" "$full" "the run's sandbox has the snapshot and the ephemeral entries and variables"
start_fake "$T/s4.json"
run "$SBX" run --base-url "$FAKE_URL" --session-state "$T/eph/state.json" -a "$T/eph/agent.yaml" "look"
expect_rc 0 "sbx run --session-state (the sandbox is gone: rebuilt)"
outputs 1 >"$T/o"
expect_in "$T/o" "$full" "the rebuilt sandbox gets the agent manifest's ephemeral variables"

done_testing
