#!/usr/bin/env bash
# Long steps show progress on a terminal and nothing on a pipe: materialising a manifest,
# fetching a git_repo entry, snapshotting a workspace, restoring a snapshot.
# SBX_PROGRESS_AFTER_MS=0 shows every step at once (by default only those over half a second).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
command -v python3 >/dev/null || skip_all "python3 runs the terminal"
export SBX_PROGRESS_AFTER_MS=0

python3 - "$T/m.json" <<'PY'
import json, sys
entries = {"d/f%04d.txt" % i: {"type": "file", "content": "x%d\n" % i} for i in range(300)}
json.dump({"entries": entries}, open(sys.argv[1], "w"))
PY
on_tty "$T/tty" "$SBX" sandbox create --manifest "$T/m.json"
expect_eq "$?" 0 "create on a terminal"
expect_in "$T/tty" "materialise: " "the terminal shows the materialising step"
expect_in "$T/tty" " of 300 " "with the count of entries"
if grep -q $'\r\033\[K' "$T/tty"; then ok "and erases the line"; else not_ok "and erases the line"; fi
id=$(tr -d '\r' <"$T/tty" | grep -o '[0-9a-f]\{16\}$' | tail -n1)
expect_eq "${#id}" 16 "the id is printed after the erased line"

# A local_dir entry counts its files, not as one entry.
mkdir -p "$T/tree/a" "$T/tree/b"
for i in $(seq 1 40); do echo "$i" >"$T/tree/a/f$i"; echo "$i" >"$T/tree/b/g$i"; done
printf 'entries:\n  tree:\n    type: local_dir\n    src: %s\n  one.txt:\n    type: file\n    content: x\n' "$T/tree" >"$T/d.yaml"
on_tty "$T/dtty" "$SBX" sandbox create --manifest "$T/d.yaml"
expect_eq "$?" 0 "create with a local_dir entry on a terminal"
expect_in "$T/dtty" " of 81 " "materialise counts the files of a local_dir entry"
expect_not_in "$T/dtty" " of 2 " "not the entries"

run "$SBX" sandbox create --manifest "$T/m.json"
expect_rc 0 "create on a pipe"
expect_not_in "$T/err" "materialise" "a pipe gets no progress"

on_tty "$T/snap" "$SBX" sandbox snapshot "$id"
expect_eq "$?" 0 "snapshot on a terminal"
expect_in "$T/snap" "snapshot: " "the terminal shows the snapshot step"
run "$SBX" sandbox snapshot "$id"
expect_not_in "$T/err" "snapshot: " "a pipe gets none"
ref=$(grep -o 'sha256:[0-9a-f]*' "$T/out" | head -n1)
on_tty "$T/restore" "$SBX" sandbox create --snapshot "$ref"
expect_eq "$?" 0 "create from the snapshot on a terminal"
expect_in "$T/restore" "restore: " "the terminal shows the restore step"

if command -v git >/dev/null; then
    git init -q "$T/repo" && git -C "$T/repo" -c user.name=t -c user.email=t@x commit -q --allow-empty -m one
    printf 'entries:\n  r:\n    type: git_repo\n    repo: %s\n' "$T/repo" >"$T/g.yaml"
    on_tty "$T/git" "$SBX" sandbox create --manifest "$T/g.yaml"
    expect_eq "$?" 0 "create with a git_repo entry on a terminal"
    expect_in "$T/git" "fetch: " "the terminal shows the fetch"
    expect_in "$T/git" "$T/repo" "naming the repository"
else
    not_ok "git is installed (scripts/deps.txt)"
fi
SBX_PROGRESS_AFTER_MS= run "$SBX" sandbox create
expect_rc 0 "an empty create"
done_testing
