#!/usr/bin/env bash
# sbx sandbox create --manifest: every local entry kind, environment, git repositories fetched
# on the host side at a ref (branch or commit), subpaths, and refusals.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

# Host sources next to the manifest.
mkdir -p "$T/m/src/tree/deep"
printf 'local file\n' > "$T/m/src/one.txt"
chmod 0600 "$T/m/src/one.txt"
printf 'a\n' > "$T/m/src/tree/a.txt"
printf 'b\n' > "$T/m/src/tree/deep/b.txt"
chmod 0755 "$T/m/src/tree/deep/b.txt"

# A local bare repository with two commits and a branch.
if command -v git >/dev/null; then
    git init -q "$T/work"
    git -C "$T/work" config user.email t@example.com
    git -C "$T/work" config user.name t
    mkdir -p "$T/work/pkg"
    echo v1 > "$T/work/pkg/version"
    echo top > "$T/work/README"
    git -C "$T/work" add -A && git -C "$T/work" commit -qm one
    first=$(git -C "$T/work" rev-parse HEAD)
    echo v2 > "$T/work/pkg/version"
    git -C "$T/work" commit -qam two
    git -C "$T/work" branch -q stable "$first"
    git clone -q --bare "$T/work" "$T/m/repo.git"
    have_git=1
else
    have_git=0
fi

cat > "$T/m/manifest.yaml" <<YAML
root: /workspace
entries:
  notes/hello.md:
    type: file
    content: "hello from the manifest\n"
  empty:
    type: dir
    permissions: 0o700
  copied.txt:
    type: local_file
    src: src/one.txt
  tree:
    type: local_dir
    src: src/tree
environment:
  GREETING: hi there
YAML
if [ "$have_git" = 1 ]; then
    cat >> "$T/m/manifest.yaml" <<YAML
YAML
    python3 - "$T/m/manifest.yaml" "$T/m/repo.git" "$first" <<'PY'
import sys
path, repo, first = sys.argv[1:4]
text = open(path).read()
extra = f"""  repo-main:
    type: git_repo
    repo: {repo}
  repo-stable:
    type: git_repo
    repo: {repo}
    ref: stable
  repo-commit:
    type: git_repo
    repo: {repo}
    ref: {first}
    subpath: pkg
"""
text = text.replace("environment:", extra + "environment:")
open(path, "w").write(text)
PY
fi

run "$SBX" sandbox create --json --manifest "$T/m/manifest.yaml"
expect_rc 0 "create with a manifest succeeds"
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T/out" 2>/dev/null)
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["manifest_digest"].startswith("sha256:") and len(d["manifest_digest"]) == 71' "$T/out" \
    && ok "the state records the manifest digest" || not_ok "the state records the manifest digest"

run "$SBX" sandbox exec "$id" -- cat notes/hello.md
expect_eq "$(cat "$T/out")" "hello from the manifest" "file entries are written"
run "$SBX" sandbox exec "$id" -- stat -c %a empty
expect_eq "$(cat "$T/out")" "700" "dir entries get their permissions"
run "$SBX" sandbox exec "$id" -- cat copied.txt tree/a.txt tree/deep/b.txt
expect_eq "$(cat "$T/out" | tr '\n' ' ')" "local file a b " "local_file and local_dir are copied"
run "$SBX" sandbox exec "$id" -- stat -c %a tree/deep/b.txt
expect_eq "$(cat "$T/out")" "755" "local_dir keeps file modes"
run "$SBX" sandbox exec "$id" -- sh -c 'echo "$GREETING"'
expect_eq "$(cat "$T/out")" "hi there" "the manifest environment reaches every command"

if [ "$have_git" = 1 ]; then
    run "$SBX" sandbox exec "$id" -- cat repo-main/pkg/version repo-stable/pkg/version repo-commit/version
    expect_eq "$(cat "$T/out" | tr '\n' ' ')" "v2 v1 v1 " "git_repo entries check out the requested ref and subpath"
    run "$SBX" sandbox exec "$id" -- sh -c 'test -d repo-main/.git && test ! -e repo-commit/.git'
    expect_rc 0 "a whole checkout keeps its .git, a subpath gets the files only"
    run "$SBX" sandbox exec "$id" -- test -e repo-commit/README
    expect_rc 1 "a subpath copies only that subtree"
    commits=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(r["path"] + "=" + r["commit"] for r in d["materialized"]))' "$RUNBASE/$id/state.json")
    main=$(git -C "$T/work" rev-parse HEAD)
    expect_eq "$commits" "repo-main=$main repo-stable=$first repo-commit=$first" "the resolved commits are recorded"
else
    ok "# SKIP git is not installed"
fi

# Refusals leave nothing behind.
ln -s "$T/m/src/one.txt" "$T/m/src/tree/link"
before=$(ls "$SBX_WORKSPACES" | wc -l)
run "$SBX" sandbox create --manifest "$T/m/manifest.yaml"
expect_rc 1 "a symlink inside a local_dir source is refused"
expect_in "$T/err" "symlink" "the refusal names the symlink"
expect_eq "$(ls "$SBX_WORKSPACES" | wc -l)" "$before" "a failed create leaves no workspace"
expect_eq "$(ls "$RUNBASE" | wc -l)" 1 "a failed create leaves no runtime directory"
rm "$T/m/src/tree/link"

if [ "$have_git" = 1 ]; then
    cat > "$T/m/badref.yaml" <<YAML
entries:
  r:
    type: git_repo
    repo: $T/m/repo.git
    ref: no-such-branch
YAML
    run "$SBX" sandbox create --manifest "$T/m/badref.yaml"
    expect_rc 1 "an unknown ref fails"
    expect_in "$T/err" "entry 'r'" "the failing entry is named"
    # Git spreads its reason over several lines: all of them reach the error, on one line.
    mkdir -p "$T/m/notrepo"
    printf 'entries:\n  r:\n    type: git_repo\n    repo: file://%s\n' "$T/m/notrepo" > "$T/m/notrepo.yaml"
    run "$SBX" sandbox create --manifest "$T/m/notrepo.yaml"
    expect_rc 1 "a folder that is no repository fails"
    expect_in "$T/err" "does not appear to be a git repository" "git's first reason is kept"
    expect_in "$T/err" "Could not read from remote repository. Please make sure you have the correct access rights and the repository exists." \
        "and the lines after it, joined"
    expect_eq "$(wc -l < "$T/err")" 1 "the error is one line"
fi

printf 'entries:\n  r:\n    type: git_repo\n    repo: https://user:s3cret@127.0.0.1:1/x.git\n' > "$T/m/cred.yaml"
run "$SBX" sandbox create --manifest "$T/m/cred.yaml"
expect_rc 1 "a repository URL carrying credentials is refused"
expect_not_in "$T/err" "s3cret" "the credential is not echoed"

printf 'entries:\n  ../x:\n    type: file\n    content: x\n' > "$T/m/escape.yaml"
run "$SBX" sandbox create --manifest "$T/m/escape.yaml"
expect_rc 1 "a manifest path with '..' is refused"
run "$SBX" sandbox create --manifest "$T/m/nope.yaml"
expect_rc 1 "a missing manifest fails"
expect_in "$T/err" "nope.yaml" "the missing manifest is named"

done_testing
