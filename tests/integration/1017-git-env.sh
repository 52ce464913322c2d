#!/usr/bin/env bash
# git_repo entries are fetched by the git of the standard system directories with an
# environment of sbx's own: neither a 'git' earlier in the harness's $PATH, nor the harness's
# variables (API keys, GIT_DIR), nor its user or system git configuration reach the fetch.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

command -v git >/dev/null || skip_all "git is not installed"

git init -q "$T/work"
git -C "$T/work" config user.email t@example.com
git -C "$T/work" config user.name t
echo v1 > "$T/work/version"
git -C "$T/work" add -A && git -C "$T/work" commit -qm one
git clone -q --bare "$T/work" "$T/repo.git"

# A 'git' first in $PATH that records that it ran and what it saw.
mkdir -p "$T/fakebin" "$T/home" "$T/tmp"
cat > "$T/fakebin/git" <<SH
#!/bin/sh
env > "$T/fake-git-ran"
exit 1
SH
chmod +x "$T/fakebin/git"
# A user configuration that would send the fetch elsewhere.
printf '[url "file:///nonexistent/"]\n\tinsteadOf = %s\n' "$T/repo.git" > "$T/home/.gitconfig"

cat > "$T/manifest.yaml" <<YAML
root: /workspace
entries:
  repo:
    type: git_repo
    repo: $T/repo.git
YAML

run env PATH="$T/fakebin:$PATH" HOME="$T/home" GIT_DIR=/nonexistent TMPDIR="$T/tmp" \
    SBX_TEST_API_KEY=sk-must-not-leak "$SBX" sandbox create --json --manifest "$T/manifest.yaml"
expect_rc 0 "create with a git_repo entry succeeds whatever the harness's git environment"
[ ! -e "$T/fake-git-ran" ] && ok "the git in the harness's \$PATH is not the one run" \
    || not_ok "the git in the harness's \$PATH is not the one run"
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T/out" 2>/dev/null)
if [ -n "$id" ]; then
    run "$SBX" sandbox exec "$id" -- cat repo/version
    expect_eq "$(cat "$T/out")" "v1" "the repository is checked out"
    run "$SBX" sandbox rm "$id"
    expect_rc 0 "rm"
else
    not_ok "the repository is checked out"
fi
# The host-side checkout (made in $TMPDIR) is gone once the workspace has it.
expect_eq "$(ls -A "$T/tmp")" "" "the host checkout is removed"

done_testing
