#!/usr/bin/env bash
# A create that fails while materialising its manifest leaves a given --workspace exactly as it
# was (what it created is removed, modes it changed are put back, files that were there stay),
# so a retry with a fixed manifest succeeds. As root also with ENOSPC half-way, on a small tmpfs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

small=
rollback_cleanup() {
    [ -n "$small" ] && umount -l "$small" 2>/dev/null
    sandbox_cleanup
}
trap rollback_cleanup EXIT

# Everything about a tree that a rollback could get wrong: names, types, modes, sizes, content.
snapshot() {
    (cd "$1" && find . -printf '%p %y %m %s\n' | LC_ALL=C sort &&
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
}

ws=$T/given
mkdir -p "$ws/sub" "$ws/tree"
echo "mine" > "$ws/keep.txt"
echo "old" > "$ws/sub/old.txt"
echo "also mine" > "$ws/tree/existing.txt"
chmod 0755 "$ws/sub"
snapshot "$ws" > "$T/before"

mkdir -p "$T/m/src/tree/deeper"
echo one > "$T/m/src/one.txt"
echo a > "$T/m/src/tree/a.txt"
echo b > "$T/m/src/tree/deeper/b.txt"
# A tree with a file the caller cannot read (unless root): found only while copying it.
mkdir -p "$T/m/src/bad/inner"
echo x > "$T/m/src/bad/inner/x.txt"
echo y > "$T/m/src/bad/y.txt"
echo secret > "$T/m/src/bad/inner/zz-unreadable"
manifest() { # $1: the last entry (YAML lines), if any
    cat > "$T/m/manifest.yaml" <<YAML
entries:
  new/dir/hello.md:
    type: file
    content: "hello\n"
  sub:
    type: dir
    permissions: 0o700
  sub/added.txt:
    type: file
    content: "added\n"
  tree:
    type: local_dir
    src: src/tree
  tree/more:
    type: local_dir
    src: src/bad
  zz-new:
    type: local_dir
    src: src/bad
$1
YAML
}

# Materialising fails after the other entries were written: unprivileged, half-way through
# copying a tree (an unreadable file); as root (who reads it) at a git repository that does not
# exist, the last entry.
chmod 000 "$T/m/src/bad/inner/zz-unreadable"
mkdir -p "$T/m/not-a-repo.git"
manifest "  zz-repo:
    type: git_repo
    repo: $T/m/not-a-repo.git"
run "$SBX" sandbox create --workspace "$ws" --workspace-existing keep --manifest "$T/m/manifest.yaml"
if [ "$rc" != 0 ] && grep -q "entry '" "$T/err" && grep -qi "permission denied\|git clone failed" "$T/err"; then
    ok "create fails naming the entry and the cause"; else
    not_ok "create fails naming the entry and the cause"; diag "rc $rc: $(cat "$T/err")"; fi
snapshot "$ws" > "$T/after"
if cmp -s "$T/before" "$T/after"; then ok "the workspace is exactly as it was"; else
    not_ok "the workspace is exactly as it was"; diag "$(diff "$T/before" "$T/after")"; fi
[ -z "$(ls "$RUNBASE" 2>/dev/null)" ] && ok "no sandbox is left" || not_ok "no sandbox is left"

# The retry with the manifest fixed succeeds.
chmod 644 "$T/m/src/bad/inner/zz-unreadable"
manifest ""
run "$SBX" sandbox create --workspace "$ws" --workspace-existing keep --manifest "$T/m/manifest.yaml" --disk none
expect_rc 0 "the retry with a fixed manifest succeeds"
id=$(cat "$T/out")
expect_eq "$(cat "$ws/new/dir/hello.md" "$ws/sub/added.txt" "$ws/zz-new/y.txt" "$ws/tree/more/inner/x.txt" "$ws/keep.txt" 2>&1)" \
    "$(printf 'hello\nadded\ny\nx\nmine')" "the retry wrote the manifest and kept the user's files"
expect_eq "$(stat -c %a "$ws/sub")" 700 "the retry set the directory's mode"
"$SBX" sandbox rm "$id" >/dev/null 2>&1

# ENOSPC half-way (root: a 1 MiB tmpfs as the workspace, a 4 MiB source as the last entry).
if [ "$(id -u)" = 0 ] && [ "$(awk 'NR == 1 {print $1, $2, $3}' /proc/self/uid_map)" = "0 0 4294967295" ]; then
    small=$T/small
    mkdir -p "$small"
    if mount -t tmpfs -o size=1M,mode=0755 sbx-test-small "$small"; then
        echo "mine" > "$small/keep.txt"
        snapshot "$small" > "$T/before"
        head -c 4M /dev/urandom > "$T/m/src/big.bin"
        manifest "  zz-big:
    type: local_file
    src: src/big.bin"
        run "$SBX" sandbox create --workspace "$small" --workspace-existing keep --manifest "$T/m/manifest.yaml" --disk none
        if [ "$rc" != 0 ] && grep -q "No space left on device\|no space left" "$T/err"; then
            ok "create fails with ENOSPC"; else
            not_ok "create fails with ENOSPC"; diag "rc $rc: $(cat "$T/err")"; fi
        snapshot "$small" > "$T/after"
        if cmp -s "$T/before" "$T/after"; then ok "after ENOSPC the workspace is as it was"; else
            not_ok "after ENOSPC the workspace is as it was"; diag "$(diff "$T/before" "$T/after")"; fi
        manifest ""
        run "$SBX" sandbox create --workspace "$small" --workspace-existing keep --manifest "$T/m/manifest.yaml" --disk none
        expect_rc 0 "the retry after ENOSPC succeeds"
        [ "$rc" = 0 ] && "$SBX" sandbox rm "$(cat "$T/out")" >/dev/null 2>&1
        umount "$small" && small=
    else
        not_ok "mount a small tmpfs for the ENOSPC case"
    fi
fi
done_testing
