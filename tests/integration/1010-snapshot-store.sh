#!/bin/bash
# sbx snapshot ls|inspect|rm|export|import against a private store: archives made by plain tar
# import, exports open with tar --zstd, hostile archives are refused and leave the store as it was.
. "$(dirname "$0")/lib.sh"

export SBX_SNAPSHOTS="$T/store"
count() { find "$SBX_SNAPSHOTS/$1" -type f 2>/dev/null | wc -l; }

run "$SBX" snapshot ls
expect_rc 0 "ls of an empty store"
expect_eq "$(wc -l <"$T/out")" 1 "ls of an empty store prints only the heading"
expect_eq "$(stat -c %a "$SBX_SNAPSHOTS")" 700 "the store is private"

mkdir -p "$T/src/sub/deeper"
printf 'hello\n' >"$T/src/a.txt"
printf '#!/bin/sh\necho hi\n' >"$T/src/sub/run.sh"
chmod 0750 "$T/src/sub/run.sh"
: >"$T/src/empty"
head -c 3000 /dev/urandom >"$T/src/sub/deeper/random.bin"
ln -s ../a.txt "$T/src/sub/link"
ln "$T/src/a.txt" "$T/src/hard"

tar -C "$T/src" -cf "$T/plain.tar" .
run "$SBX" snapshot import "$T/plain.tar"
expect_rc 0 "import of a tar made by plain tar"
ref=$(cat "$T/out")
case "$ref" in sha256:????????????*) ok "import prints a reference" ;; *) not_ok "import prints a reference"; diag "$ref" ;; esac

tar -C "$T/src" -czf "$T/plain.tgz" a.txt sub empty hard
run "$SBX" snapshot import "$T/plain.tgz"
expect_rc 0 "import of a gzip tar without './' names"

run "$SBX" snapshot import - <"$T/plain.tar"
expect_rc 0 "import from stdin"
expect_eq "$(cat "$T/out")" "$ref" "same content, same reference"

run "$SBX" snapshot ls
expect_rc 0 "ls"
expect_in "$T/out" "${ref:0:19}" "ls shows the reference"
created=$("$SBX" snapshot inspect "$ref" | sed -n 's/.*"created": "\([^"]*\)".*/\1/p')
expect_in "$T/out" "${ref:0:19}  $created " "ls shows the whole creation time ($created)"
run "$SBX" snapshot ls --json
expect_in "$T/out" "\"content_digest\": \"$ref\"" "ls --json has the full reference"

run "$SBX" snapshot inspect "${ref:7:12}"
expect_rc 0 "inspect by a 12-hex prefix"
expect_in "$T/out" '"format": 1' "inspect shows the format version"
expect_in "$T/out" '"files": 5' "inspect counts the files"
run "$SBX" snapshot inspect 0123
expect_rc 1 "inspect of a short prefix fails"
expect_in "$T/err" "is not a snapshot reference" "and says why"

if tar --zstd -cf /dev/null -T /dev/null 2>/dev/null; then
    run "$SBX" snapshot export "$ref" "$T/out.tar.zst"
    expect_rc 0 "export to a file"
    run tar --zstd -tf "$T/out.tar.zst"
    expect_rc 0 "tar --zstd opens the export"
    expect_eq "$(head -1 "$T/out")" ".sbx-snapshot.json" "the header is the first member"
    expect_in "$T/out" "./sub/deeper/random.bin" "the files are members"
    mkdir "$T/x"
    run tar --zstd -xf "$T/out.tar.zst" -C "$T/x"
    expect_rc 0 "tar extracts the export"
    rm -f "$T/x/.sbx-snapshot.json"
    run diff -r "$T/src" "$T/x"
    expect_rc 0 "the extracted tree has the same content"
    expect_eq "$(stat -c %a "$T/x/sub/run.sh")" 750 "modes are kept"
    expect_eq "$(readlink "$T/x/sub/link")" "../a.txt" "symlinks are kept"
else
    run "$SBX" snapshot export "$ref" "$T/out.tar.zst"
    expect_rc 0 "export to a file (this tar has no --zstd)"
fi
run "$SBX" snapshot import "$T/out.tar.zst"
expect_eq "$(cat "$T/out")" "$ref" "an export imports to the same reference"
"$SBX" snapshot export "$ref" >"$T/stdout.tar.zst"
cmp -s "$T/stdout.tar.zst" "$T/out.tar.zst" && ok "export to stdout is the same archive" || not_ok "export to stdout is the same archive"

# Hostile archives: refused with the member named, the store unchanged, nothing written outside.
trees=$(count trees); blobs=$(count blobs)
printf 'outside\n' >"$T/outside.txt"
mkdir -p "$T/h/in"
tar -C "$T/h/in" -cPf "$T/dotdot.tar" ../../outside.txt
run "$SBX" snapshot import "$T/dotdot.tar"
expect_rc 1 "a '..' member is refused"
expect_in "$T/err" "'../../outside.txt'" "the error names the member"
tar -cPf "$T/abs.tar" "$T/outside.txt" 2>/dev/null
run "$SBX" snapshot import "$T/abs.tar"
expect_rc 1 "an absolute member is refused"
expect_in "$T/err" "absolute name" "the error says absolute"
mkdir -p "$T/l"; ln -s /etc "$T/l/etc"
tar -C "$T/l" -cf "$T/abslink.tar" .
run "$SBX" snapshot import "$T/abslink.tar"
expect_rc 1 "a symlink to an absolute target is refused"
expect_in "$T/err" "'etc'" "the error names the link"
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$T/d"; mknod "$T/d/null" c 1 3
    tar -C "$T/d" -cf "$T/dev.tar" .
    run "$SBX" snapshot import "$T/dev.tar"
    expect_rc 1 "a device node is refused"
    expect_in "$T/err" "device node" "the error says device node"
fi
head -c 1500 "$T/plain.tar" >"$T/trunc.tar"
run "$SBX" snapshot import "$T/trunc.tar"
expect_rc 1 "a truncated archive is refused"
expect_in "$T/err" "corrupt archive" "the error says corrupt"
run "$SBX" snapshot import --max-entries 2 "$T/plain.tar"
expect_rc 1 "--max-entries applies"
expect_in "$T/err" "max_entries" "the error names the limit"
expect_eq "$(count trees)" "$trees" "no tree was added by a refused import"
expect_eq "$(count blobs)" "$blobs" "no blob was added by a refused import"
expect_eq "$(cat "$T/outside.txt")" "outside" "nothing was written outside"

run "$SBX" snapshot rm "${ref:7:14}"
expect_rc 0 "rm by prefix"
run "$SBX" snapshot inspect "$ref"
expect_rc 1 "a removed snapshot is gone"
expect_in "$T/err" "no snapshot" "and the error says so"
run "$SBX" snapshot ls --json
for r in $(grep -o 'sha256:[0-9a-f]*' "$T/out" | sort -u); do "$SBX" snapshot rm "$r"; done
expect_eq "$(count blobs)" 0 "removing every snapshot collects every blob"
run "$SBX" snapshot rm "$ref"
expect_rc 1 "rm of a missing snapshot fails"
run "$SBX" snapshot frob
expect_rc 2 "an unknown subcommand is a usage error"
done_testing
