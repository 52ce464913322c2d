#!/usr/bin/env bash
# A given --workspace DIR that already holds files (issue 32): nothing of the user's is replaced
# without a word. A non-empty directory is refused unless --workspace-existing says what to do:
# keep (the user's files stay; an entry that would replace one fails, naming it, and the
# directory is left as it was) or overwrite (the manifest's entries replace the files they name,
# the rest stays). An empty directory needs neither.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

tree_of() { (cd "$1" && find . -printf '%p %y %m %s\n' | LC_ALL=C sort && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum); }

mkdir -p "$T/m/src/notes" "$T/given/notes"
cat >"$T/m/manifest.yaml" <<'YAML'
entries:
  brief.md:
    type: file
    content: "from the manifest\n"
  notes:
    type: local_dir
    src: src/notes
YAML
echo "manifest note" >"$T/m/src/notes/todo.txt"
echo "MY PRECIOUS NOTES" >"$T/given/brief.md"
echo "mine too" >"$T/given/notes/todo.txt"
echo "untouched" >"$T/given/other.txt"
tree_of "$T/given" >"$T/before"

same_tree() {
    tree_of "$T/given" >"$T/after"
    if cmp -s "$T/before" "$T/after"; then ok "$1"; else not_ok "$1"; diag "$(diff "$T/before" "$T/after")"; fi
}

# --- refused without a word on what to do ------------------------------------------------------
run "$SBX" sandbox create --manifest "$T/m/manifest.yaml" --workspace "$T/given"
expect_rc 1 "a non-empty --workspace without --workspace-existing is refused"
expect_in "$T/err" "workspace '$T/given' is not empty" "naming the directory"
expect_in "$T/err" "--workspace-existing keep" "and the way to say what to do"
same_tree "the directory is as it was"
nothing_left "and no sandbox is left"

# --- keep: an entry that would replace a user's file fails, naming it ----------------------------
run "$SBX" sandbox create --manifest "$T/m/manifest.yaml" --workspace "$T/given" --workspace-existing keep
expect_rc 1 "keep: a file entry over the user's file fails"
expect_in "$T/err" "entry 'brief.md': 'brief.md' is already in the workspace" "naming the entry and the file"
same_tree "the user's files are as they were"
nothing_left "no sandbox is left"
# Inside a copied tree too.
rm "$T/given/brief.md"
tree_of "$T/given" >"$T/before"
run "$SBX" sandbox create --manifest "$T/m/manifest.yaml" --workspace "$T/given" --workspace-existing keep
expect_rc 1 "keep: a file of a copied tree over the user's file fails"
expect_in "$T/err" "'notes/todo.txt' is already in the workspace" "naming the file in the tree"
same_tree "the user's files are as they were, and what the create wrote is gone"
nothing_left "no sandbox is left"

# keep with entries that only add: the user's files and the manifest's side by side.
rm "$T/given/notes/todo.txt"
echo "MY PRECIOUS NOTES" >"$T/given/mine.md"
run "$SBX" sandbox create --manifest "$T/m/manifest.yaml" --workspace "$T/given" --workspace-existing keep
expect_rc 0 "keep: entries that only add are made"
id=$(cat "$T/out")
expect_eq "$(cat "$T/given/mine.md" "$T/given/other.txt" "$T/given/brief.md" "$T/given/notes/todo.txt")" \
    "$(printf 'MY PRECIOUS NOTES\nuntouched\nfrom the manifest\nmanifest note')" "beside the user's files"
"$SBX" sandbox rm "$id" >/dev/null 2>&1
expect_eq "$(cat "$T/given/mine.md")" "MY PRECIOUS NOTES" "rm leaves the user's files"

# --- overwrite: the entries replace the files they name, the rest stays ---------------------------
echo "MY PRECIOUS NOTES" >"$T/given/brief.md"
run "$SBX" sandbox create --manifest "$T/m/manifest.yaml" --workspace "$T/given" --workspace-existing overwrite
expect_rc 0 "overwrite: the create succeeds"
id=$(cat "$T/out")
expect_eq "$(cat "$T/given/brief.md")" "from the manifest" "the entry replaced the file it names"
expect_eq "$(cat "$T/given/other.txt")" "untouched" "the rest stays"
"$SBX" sandbox rm "$id" >/dev/null 2>&1

# --- an empty directory needs nothing; the option needs --workspace and a known value --------------
mkdir "$T/empty"
run "$SBX" sandbox create --manifest "$T/m/manifest.yaml" --workspace "$T/empty"
expect_rc 0 "an empty --workspace needs no --workspace-existing"
"$SBX" sandbox rm "$(cat "$T/out")" >/dev/null 2>&1
run "$SBX" sandbox create --workspace-existing keep
expect_rc 2 "--workspace-existing without --workspace is a usage error"
expect_in "$T/err" "--workspace-existing needs --workspace DIR" "saying so"
run "$SBX" sandbox create --workspace "$T/given" --workspace-existing merge
expect_rc 2 "an unknown --workspace-existing value is a usage error"
expect_in "$T/err" "--workspace-existing is keep or overwrite, not 'merge'" "naming the values"

done_testing
