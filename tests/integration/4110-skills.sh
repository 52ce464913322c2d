#!/usr/bin/env bash
# The skills capability end to end through `sbx run` and the fake model server: eager skills
# are copied into the workspace and listed in the instructions, and a skill's script runs;
# lazy skills are only indexed, load_skill copies one (twice: already loaded; unknown and
# ambiguous names are tool errors the model reads); a git source at a ref; skills already in
# the workspace; hostile skill folders (symlinks out, huge files, duplicate names) are skipped
# with a warning and never followed; a SKILL.md without front matter, name or description is
# listed as the Agents SDK lists it; the example runs offline.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

# load(i, name): a turn calling load_skill.
cat >"$T/mk-extra.py" <<'EOF'
def load(i, name):
    return resp(i, fcall(i, "load_skill", {"skill_name": name}))
EOF
MK_EXTRA="$T/mk-extra.py"

# The output of the last tool call the model saw in request N (0-based).
outputs() { fake_query "reqs[$1]['body']['input'][-1].get('output')"; }
instr() { fake_query 'reqs[0]["body"]["instructions"]' >"$T/instr"; }

# skill DIR NAME DESCRIPTION: a skill folder with a SKILL.md.
skill() {
    mkdir -p "$1"
    printf -- '---\nname: %s\ndescription: %s\n---\n\n# %s\n\nRun scripts/run.sh.\n' "$2" "$3" "$2" \
        >"$1/SKILL.md"
}

S="$T/agent/skills"
mkdir -p "$S"
skill "$S/hello" hello "Greets someone by name."
mkdir "$S/hello/scripts"
printf '#!/bin/sh\necho "hello from the skill, $1"\n' >"$S/hello/scripts/hello.sh"
chmod 755 "$S/hello/scripts/hello.sh"
# A folded multi-line description (real YAML, not line-by-line key: value).
mkdir "$S/notes"
printf -- '---\nname: notes\ndescription: >-\n  Keeps meeting notes\n  tidy.\nlicense: MIT\n---\nbody\n' \
    >"$S/notes/SKILL.md"
# Hostile and broken folders: each is skipped, the others still load.
skill "$S/evil" evil "Has a symlink out."
ln -s /etc/passwd "$S/evil/passwd"
skill "$S/evil-dir" evildir "Has a symlinked folder out."
ln -s /etc "$S/evil-dir/etc"
ln -s "$S/hello" "$S/linked"                      # a skill folder that is itself a symlink
mkdir "$S/broken" && printf 'no front matter here\n' >"$S/broken/SKILL.md"
mkdir "$S/unclosed" && printf -- '---\nname: unclosed\ndescription: x\n' >"$S/unclosed/SKILL.md"
mkdir "$S/nomd" && echo x >"$S/nomd/README.md"
skill "$S/dup" hello "Claims a taken name."
skill "$S/big" big "Carries a huge file."
truncate -s 5M "$S/big/blob.bin"
skill "$S/crowd" crowd "Has too many files."
for i in $(seq 1 300); do : >"$S/crowd/f$i"; done
skill "$S/badname" "../../etc" "A name that is a path."
# Listed as the SDK lists them: no description, a spaced name, a '#' in a plain value.
mkdir "$S/nodesc" && printf -- '---\nname: nodesc\n---\nbody\n' >"$S/nodesc/SKILL.md"
skill "$S/spaced" "My Skill" "Has a spaced name."
skill "$S/hashdesc" hashdesc "Uses C# and #tags"
echo "not a skill" >"$S/README.md"

cat >"$T/agent/eager.yaml" <<'EOF'
name: Eager
manifest: {entries: {data.txt: {type: file, content: "x\n"}}}
capabilities: [shell, {type: skills, from: ./skills}]
EOF

# --- eager: listed, copied, the script runs; hostile folders skipped ---------------------------
mk "$T/e.json" '[resp(1, sh(1, "sh .agents/hello/scripts/hello.sh world")), resp(2, sh(2, "ls .agents; cat .agents/evil/passwd .agents/evil-dir/etc/hostname 2>&1; ls .agents/hello/scripts")), resp(3, msg("greeted"))]'
start_fake "$T/e.json"
cd "$T" && run "$SBX" run --base-url "$FAKE_URL" -a agent/eager.yaml "greet the world"
cd - >/dev/null
expect_rc 0 "an agent with eager skills runs"
instr
expect_in "$T/instr" "## Skills" "instructions: a skills section"
expect_in "$T/instr" "- hello: Greets someone by name. (file: .agents/hello/SKILL.md)" \
    "instructions: skill listed with name, description and path"
expect_in "$T/instr" "- notes: Keeps meeting notes tidy. (file: .agents/notes/SKILL.md)" \
    "instructions: a folded YAML description"
expect_not_in "$T/instr" "load_skill" "eager: no load_skill in the instructions"
expect_in "$T/instr" "- broken: No description provided. (file: .agents/broken/SKILL.md)" \
    "no front matter: the folder's name and the SDK's default description"
expect_in "$T/instr" "- unclosed: No description provided. (file: .agents/unclosed/SKILL.md)" \
    "front matter without a closing line: the defaults"
expect_in "$T/instr" "- nodesc: No description provided. (file: .agents/nodesc/SKILL.md)" \
    "no description: the SDK's default"
expect_in "$T/instr" "- My Skill: Has a spaced name. (file: .agents/spaced/SKILL.md)" \
    "a name with a space is listed"
expect_in "$T/instr" "- hashdesc: Uses C# and #tags (file: .agents/hashdesc/SKILL.md)" \
    "a '#' inside a plain description is kept"
expect_in "$T/instr" "- ../../etc: A name that is a path. (file: .agents/badname/SKILL.md)" \
    "a name is only shown: the skill stays in its folder"
for bad in evil evildir linked nomd big crowd "Claims a taken name"; do
    expect_not_in "$T/instr" "$bad" "instructions: '$bad' is not listed"
done
expect_eq "$(fake_query '[t["name"] for t in reqs[0]["body"]["tools"]]')" \
    "['exec_command', 'write_stdin']" "eager: no load_skill tool"
outputs 1 >"$T/o1"
expect_in "$T/o1" "hello from the skill, world" "the skill's script ran in the sandbox"
outputs 2 >"$T/o2"
expect_eq "$(sed -n '/^Output:$/,$p' "$T/o2" | sed -n '2,9p' | tr '\n' ' ')" \
    "badname broken hashdesc hello nodesc notes spaced unclosed " \
    "only the good skills are in the workspace"
expect_not_in "$T/o2" "root:" "the symlink out was never followed"
expect_in "$T/o2" "hello.sh" "the skill's scripts folder was copied"
expect_in "$T/err" "skipped 'evil' in './skills': 'evil/passwd' is a symlink, which is never followed" \
    "warning: symlink to a file"
expect_in "$T/err" "skipped 'evil-dir' in './skills': 'evil-dir/etc' is a symlink" "warning: symlinked folder"
expect_in "$T/err" "skipped 'linked' in './skills': it is a symlink" "warning: the skill folder a symlink"
expect_not_in "$T/err" "skipped 'broken'" "no warning for a SKILL.md without front matter"
expect_in "$T/err" "skipped 'nomd' in './skills': it has no SKILL.md" "warning: no SKILL.md"
expect_in "$T/err" "skipped 'dup' in './skills': the name 'hello' belongs to folder 'hello'" \
    "warning: duplicate name (the folder of that name wins)"
expect_in "$T/err" "skipped 'big' in './skills': 'big/blob.bin' is larger than 4 MiB" "warning: huge file"
expect_in "$T/err" "skipped 'crowd' in './skills': it holds more than 256 files and folders" \
    "warning: too many files"
expect_not_in "$T/err" "README" "plain files in the skills folder are not skills"

# --- lazy: the index only; load_skill copies one; twice; unknown; ambiguous ---------------------
skill "$S/jot" memo "Jots things down."
skill "$S/memo" memo-pad "A pad for memos."
cat >"$T/agent/lazy.yaml" <<'EOF'
name: Lazy
manifest: {entries: {}}
capabilities: [shell, {type: skills, from: ./skills, lazy: true}]
EOF
mk "$T/l.json" '[load(1, "hello"), resp(2, sh(2, "cat .agents/hello/SKILL.md; ls .agents")), load(3, "hello"), load(4, "nope"), load(5, "memo"), load(6, "memo-pad"), resp(7, msg("loaded"))]'
start_fake "$T/l.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/lazy.yaml" "use hello"
expect_rc 0 "an agent with lazy skills runs"
instr
expect_in "$T/instr" "- hello: Greets someone by name. (file: .agents/hello/SKILL.md)" \
    "lazy: the index lists the skill with the path load_skill puts it at"
expect_in "$T/instr" "- nodesc: No description provided. (file: .agents/nodesc/SKILL.md)" \
    "lazy: a skill without description is indexed as the SDK does"
expect_in "$T/instr" "load_skill" "lazy: the instructions say how to load"
expect_eq "$(fake_query '[t["name"] for t in reqs[0]["body"]["tools"]]')" \
    "['exec_command', 'write_stdin', 'load_skill']" "lazy: load_skill is offered"
expect_eq "$(fake_query 'reqs[0]["body"]["tools"][2]["parameters"]')" \
    "{'type': 'object', 'required': ['skill_name'], 'properties': {'skill_name': {'type': 'string'}}}" \
    "load_skill has the reference's schema"
expect_eq "$(outputs 1)" \
    '{"status":"loaded","skill_name":"hello","path":".agents/hello","skill_md":".agents/hello/SKILL.md"}' \
    "load_skill says where the skill is (JSON)"
outputs 2 >"$T/o2"
expect_in "$T/o2" "description: Greets someone by name." "the model reads SKILL.md in the sandbox"
expect_eq "$(sed -n '/^Output:$/,$p' "$T/o2" | grep -v '^$' | tail -n 1)" "hello" \
    "only the loaded skill is in the workspace"
expect_in <(outputs 3) '"status":"already_loaded"' "loading twice says it is already loaded"
outputs 4 >"$T/o4"
expect_in "$T/o4" "no skill named 'nope' (available: " "an unknown name is a tool error"
expect_in "$T/o4" "hello" "naming the available skills"
expect_in <(outputs 5) "skill name 'memo' is ambiguous" "a name that matches two skills is a tool error"
expect_in <(outputs 6) '"path":".agents/memo"' "the other name of an ambiguous pair loads"

# --- a git source at a ref (host-side fetch, subpath) -----------------------------------------
if command -v git >/dev/null; then
    R="$T/repo"
    mkdir -p "$R/skills"
    skill "$R/skills/deploy" deploy "Deploys version one."
    printf '#!/bin/sh\necho deploying v1\n' >"$R/skills/deploy/run.sh"
    chmod 755 "$R/skills/deploy/run.sh"
    g() { git -C "$R" -c user.name=t -c user.email=t@example.invalid -c init.defaultBranch=main "$@" >/dev/null 2>&1; }
    g init -q && g add -A && g commit -qm v1 && g tag v1
    skill "$R/skills/deploy" deploy "Deploys version two."
    g commit -qam v2
    cat >"$T/agent/git.yaml" <<EOF
name: Git
manifest: {entries: {}}
capabilities: [shell, {type: skills, from: {type: git_repo, repo: "$R", ref: v1, subpath: skills}}]
EOF
    mk "$T/g.json" '[resp(1, sh(1, "sh .agents/deploy/run.sh; ls -a .agents/deploy")), resp(2, msg("deployed"))]'
    start_fake "$T/g.json"
    run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/git.yaml" "deploy"
    expect_rc 0 "skills from a git repository"
    instr
    expect_in "$T/instr" "- deploy: Deploys version one. (file: .agents/deploy/SKILL.md)" \
        "git: the skill at the ref is listed"
    outputs 1 >"$T/o1"
    expect_in "$T/o1" "deploying v1" "git: the skill's script at the ref runs"
    expect_not_in "$T/o1" ".git" "git: no repository metadata in the skill"
    expect_eq "$(ls "${TMPDIR:-/tmp}" | grep -c "^sbx-git-" || true)" 0 "git: the host checkout is removed"
    cat >"$T/agent/git-bad.yaml" <<EOF
name: GitBad
manifest: {entries: {}}
capabilities: [shell, {type: skills, from: {type: git_repo, repo: "$R", ref: no-such-ref}}]
EOF
    run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/git-bad.yaml" "x"
    expect_rc 1 "git: a ref that does not exist fails the run"
    expect_in "$T/err" "skills source '$R@no-such-ref'" "naming the source"
else
    ok "# SKIP git is not installed"
fi

# --- skills already in the workspace ----------------------------------------------------------
cat >"$T/agent/ws.yaml" <<'EOF'
name: Workspace
manifest:
  entries:
    tools/skills/lint:
      type: dir
      children:
        SKILL.md: {type: file, content: "---\nname: lint\ndescription: Lints the code.\n---\n"}
    tools/skills/half: {type: dir, children: {notes.txt: {type: file, content: "x"}}}
    tools/skills/linty:
      type: dir
      children:
        SKILL.md: {type: file, content: "---\nname: lint\ndescription: Another lint.\n---\n"}
capabilities: [shell, {type: skills, from: {type: workspace, path: tools/skills}, lazy: true}]
EOF
mk "$T/w.json" '[load(1, "lint"), load(2, "lint"), resp(3, msg("ok"))]'
start_fake "$T/w.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/ws.yaml" "lint"
expect_rc 0 "skills already in the workspace"
instr
expect_in "$T/instr" "- lint: Lints the code." "workspace: the skill is indexed"
expect_in <(outputs 1) '"status":"loaded","skill_name":"lint","path":"tools/skills/lint"' \
    "workspace: load_skill points at it where it is"
expect_in <(outputs 2) '"status":"already_loaded"' "workspace: and then says it is loaded"
expect_in "$T/err" "skipped 'half' in workspace folder 'tools/skills': it has no SKILL.md" \
    "workspace: a folder without SKILL.md is skipped with a warning"
expect_eq "$(grep -c "skipped 'half'" "$T/err")" 1 "workspace: warned once, not once per hook"
expect_in "$T/err" "skipped 'linty' in 'tools/skills': the name 'lint' is already taken by 'lint'" \
    "workspace: a duplicate name is skipped"
expect_eq "$(grep -c "skipped 'linty'" "$T/err")" 1 "workspace: and warned once"

# --- configuration errors ---------------------------------------------------------------------
printf 'name: A\nmanifest: {entries: {}}\ncapabilities: [{type: skills, from: ./nope}]\n' >"$T/agent/nope.yaml"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/nope.yaml" "x"
expect_rc 1 "a missing skills folder fails the run"
expect_in "$T/err" "skills source './nope' does not exist" "naming it"
ln -s skills "$T/agent/skills-link"
printf 'name: A\nmanifest: {entries: {}}\ncapabilities: [{type: skills, from: ./skills-link}]\n' >"$T/agent/sl.yaml"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/sl.yaml" "x"
expect_rc 1 "a skills folder that is a symlink is refused"
expect_in "$T/err" "is not a folder (or is a symlink)" "saying so"
printf 'name: A\nmanifest: {entries: {}}\ncapabilities: [skills]\n' >"$T/agent/nofrom.yaml"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/nofrom.yaml" "x"
expect_rc 1 "skills without a source fails"
expect_in "$T/err" "capability 'skills': needs a source" "saying what is missing"
printf 'name: A\nmanifest: {entries: {}}\ncapabilities: [{type: skills, from: {type: s3_mount}}]\n' >"$T/agent/badsrc.yaml"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/badsrc.yaml" "x"
expect_rc 1 "an unknown source type fails"
expect_in "$T/err" "field 'from': unknown type 's3_mount' (known: local_dir, git_repo, workspace)" \
    "naming the known ones"

# --- the example, offline; its recorded commands really work -------------------------------
EX="$SBX_SRCDIR/examples/skills"
Q="What is in sales.csv? Totals and averages, please."
run "$SBX" run -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" "$Q"
expect_rc 0 "examples/skills runs offline"
expect_in "$T/out" "revenue: total 8863.25" "with the recorded answer"
run "$SBX" run -m "replay:$EX/lazy.jsonl" -a "$EX/agent-lazy.yaml" "$Q"
expect_rc 0 "examples/skills lazy variant runs offline"
expect_in "$T/err" 'load_skill({"skill_name": "csv-summary"}) -> {"status":"loaded"' \
    "lazy example: the skill is loaded"
# The same recordings served by the fake server, to see what the tools answered.
for rec in run lazy; do
    python3 -c 'import json,sys; json.dump({"turns": [{"response": json.loads(l)} for l in open(sys.argv[1])]}, open(sys.argv[2], "w"))' \
        "$EX/$rec.jsonl" "$T/$rec.json"
    start_fake "$T/$rec.json"
    agent=$EX/agent.yaml
    [ "$rec" = lazy ] && agent=$EX/agent-lazy.yaml
    run "$SBX" run --base-url "$FAKE_URL" -a "$agent" "$Q"
    n=$(fake_query 'len(reqs)')
    outputs $((n - 1)) >"$T/last"
    expect_in "$T/last" "revenue: total=8863.25 mean=2215.81 min=1720.5 max=2700" \
        "$rec.jsonl: the skill's script really computes the recorded numbers"
    outputs $((n - 2)) >"$T/prev"
    expect_in "$T/prev" "name: csv-summary" "$rec.jsonl: the model really reads SKILL.md"
done

done_testing
