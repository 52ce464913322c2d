#!/usr/bin/env bash
# sbx sandbox snapshot and create --snapshot: files, modes, symlinks and nested directories come
# back in a fresh sandbox; the manifest's ephemeral entries are applied again, never taken from
# the snapshot; an export is an ordinary archive that create reads back; a bad or hostile
# snapshot fails the create with a clear error and leaves nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

cat > "$T/manifest.yaml" <<'YAML'
entries:
  notes.txt:
    type: file
    content: "from the manifest\n"
  cache:
    type: dir
    ephemeral: true
  cache/seed.txt:
    type: file
    content: "seed\n"
    ephemeral: true
environment:
  PLAIN: plain-value
YAML

# Everything a restore could get wrong: names, types, modes, link targets, sizes, content.
listing() { # $1: sandbox id
    "$SBX" sandbox exec "$1" -- sh -c \
        'find . -path ./cache -prune -o ! -name climbing-link -printf "%p %y %m %l %s\n" | LC_ALL=C sort &&
         find . -path ./cache -prune -o -type f -print | LC_ALL=C sort | xargs sha256sum'
}

run "$SBX" sandbox create --manifest "$T/manifest.yaml"
expect_rc 0 "create with a manifest"
id=$(cat "$T/out")
run "$SBX" sandbox exec "$id" -- sh -c '
    set -e
    mkdir -p deep/er/est && echo nested > deep/er/est/file
    chmod 0750 deep && chmod 0700 deep/er
    printf "private\n" > secret.txt && chmod 0600 secret.txt
    printf "#!/bin/sh\necho run\n" > tool.sh && chmod 0755 tool.sh
    ln -s deep/er/est/file rel-link && ln -s ../outside climbing-link
    echo changed > notes.txt
    echo "not kept" > cache/extra && echo "changed seed" > cache/seed.txt
    head -c 100000 /dev/urandom > blob.bin'
expect_rc 0 "write files, modes, symlinks and nested directories"
listing "$id" > "$T/before"

run "$SBX" sandbox snapshot "$id"
expect_rc 0 "snapshot"
ref=$(cat "$T/out")
case "$ref" in sha256:????????????????????????????????????????????????????????????????) ok "snapshot prints a sha256 reference" ;;
*) not_ok "snapshot prints a sha256 reference"; diag "$ref" ;; esac
run "$SBX" sandbox state --no-snapshot "$id"
expect_in "$T/out" "\"snapshot\": \"$ref\"" "the session state records the snapshot"

run "$SBX" sandbox rm "$id"
expect_rc 0 "rm the sandbox"

run "$SBX" sandbox create --manifest "$T/manifest.yaml" --snapshot "$ref"
expect_rc 0 "create --snapshot REF"
id2=$(cat "$T/out")
listing "$id2" > "$T/after"
if cmp -s "$T/before" "$T/after"; then ok "same content, modes and symlinks after the restore"; else
    not_ok "same content, modes and symlinks after the restore"; diag "$(diff "$T/before" "$T/after")"; fi
run "$SBX" sandbox exec "$id2" -- cat notes.txt
expect_eq "$(cat "$T/out")" "changed" "a non-ephemeral entry comes from the snapshot, not the manifest"
run "$SBX" sandbox exec "$id2" -- cat cache/seed.txt
expect_eq "$(cat "$T/out")" "seed" "an ephemeral entry is applied again from the manifest"
run "$SBX" sandbox exec "$id2" -- test -e cache/extra
expect_rc 1 "what was written beneath an ephemeral entry is not in the snapshot"
run "$SBX" sandbox exec "$id2" -- test -L climbing-link
expect_rc 1 "a symlink that climbs out of the workspace is not in the snapshot"
run "$SBX" sandbox exec "$id2" -- sh -c 'echo "$PLAIN"'
expect_eq "$(cat "$T/out")" "plain-value" "the manifest environment applies"

# Prefixes of a reference are accepted where a user types one.
run "$SBX" sandbox create --snapshot "${ref:0:19}"
expect_rc 0 "create --snapshot with a reference prefix"
"$SBX" sandbox rm "$(cat "$T/out")" >/dev/null

# Export: an archive ordinary tools open, and create reads it back.
run "$SBX" sandbox snapshot "$id2" "$T/export.tar.zst"
expect_rc 0 "snapshot ID FILE exports"
expect_eq "$(cat "$T/out")" "$ref" "an unchanged workspace gives the same reference"
if command -v zstd >/dev/null && tar --zstd -tf "$T/export.tar.zst" >"$T/members" 2>&1; then
    expect_in "$T/members" "deep/er/est/file" "the export is a tar + zstd archive"
fi
run "$SBX" sandbox create --snapshot "$T/export.tar.zst"
expect_rc 0 "create --snapshot FILE"
id3=$(cat "$T/out")
listing "$id3" > "$T/after3"
if cmp -s "$T/before" "$T/after3"; then ok "the exported archive restores the same tree"; else
    not_ok "the exported archive restores the same tree"; diag "$(diff "$T/before" "$T/after3")"; fi
"$SBX" sandbox rm "$id2" "$id3" >/dev/null

# ---- refusals: nothing is created
nothing_left "no sandbox before the refusals"
run "$SBX" sandbox create --snapshot "sha256:00000000000000000000000000000000000000000000000000000000000000ff"
expect_rc 1 "an unknown reference is refused"
expect_in "$T/err" "sbx: " "with an error"
nothing_left "an unknown reference creates nothing"

head -c 4096 /dev/urandom > "$T/garbage.tar"
run "$SBX" sandbox create --snapshot "$T/garbage.tar"
expect_rc 1 "a corrupt archive is refused"
nothing_left "a corrupt archive creates nothing"

head -c 3000 "$T/export.tar.zst" > "$T/truncated.tar.zst"
run "$SBX" sandbox create --snapshot "$T/truncated.tar.zst"
expect_rc 1 "a truncated archive is refused"
nothing_left "a truncated archive creates nothing"

# Hostile: a member that climbs out of the workspace.
python3 - "$T/evil.tar" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as t:
    for name, data in (("ok.txt", b"fine\n"), ("../escaped.txt", b"out\n")):
        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
PY
run "$SBX" sandbox create --snapshot "$T/evil.tar"
expect_rc 1 "an archive with a '..' member is refused"
expect_in "$T/err" ".." "the error names the member"
[ -e "$T/escaped.txt" ] || [ -e "$SBX_WORKSPACES/escaped.txt" ] && not_ok "nothing written outside" || ok "nothing written outside"
nothing_left "a hostile archive creates nothing"

# A restore that fails half-way (the snapshot does not fit a small workspace disk, root only)
# rolls back like any failed create.
run "$SBX" sandbox create --disk 16M
if [ "$rc" = 0 ]; then
    small=$(cat "$T/out")
    "$SBX" sandbox rm "$small" >/dev/null
    run "$SBX" sandbox create
    big=$(cat "$T/out")
    "$SBX" sandbox exec "$big" -- sh -c 'head -c 40000000 /dev/urandom > big.bin'
    bigref=$("$SBX" sandbox snapshot "$big")
    "$SBX" sandbox rm "$big" >/dev/null
    run "$SBX" sandbox create --disk 16M --snapshot "$bigref"
    expect_rc 1 "a snapshot larger than the workspace disk fails the create"
    nothing_left "the failed restore is rolled back: no runtime dir, workspace or image"
else
    diag "no enforceable disk limit here: $(cat "$T/err")"
fi

done_testing
