#!/usr/bin/env bash
# sbx manifest check|tree through the real binary: the examples round-trip (YAML == JSON,
# check(check(x)) == check(x)), bad input fails with exit 1 and a message naming the entry,
# usage errors exit 2, secrets never reach the output, the tree respects its limits.
. "$(dirname "$0")/lib.sh"

EX="$SBX_SRCDIR/examples"
# examples/dataroom/manifest-s3.yaml takes its credentials by reference from these.
export DATAROOM_S3_ACCESS_KEY=example-key DATAROOM_S3_SECRET_KEY=example-secret
DATA="$SBX_SRCDIR/tests/data/manifest"

# --- the examples round-trip ----------------------------------------------------------------
n_examples=0
for y in "$EX"/*/manifest*.yaml; do
    j="${y%.yaml}.json"
    name="${y#"$EX"/}"
    dir=$(dirname "$y")
    n_examples=$((n_examples + 1))
    run "$SBX" manifest check "$y"
    expect_rc 0 "$name: check succeeds"
    cp "$T/out" "$T/from-yaml.json"
    run "$SBX" manifest check "$j"
    expect_rc 0 "${j#"$EX"/}: check succeeds"
    if cmp -s "$T/from-yaml.json" "$T/out"; then ok "$name: YAML and JSON give the same manifest"; else
        not_ok "$name: YAML and JSON give the same manifest"; diag "$(diff "$T/from-yaml.json" "$T/out")"
    fi
    # The output is itself a manifest; checking it again changes nothing. Relative local
    # sources still resolve against the example's directory.
    run "$SBX" manifest check --base-dir "$dir" "$T/from-yaml.json"
    expect_rc 0 "$name: its normalised form checks"
    if cmp -s "$T/from-yaml.json" "$T/out"; then ok "$name: check(check(x)) == check(x)"; else
        not_ok "$name: check(check(x)) == check(x)"; diag "$(diff "$T/from-yaml.json" "$T/out")"
    fi
    run "$SBX" manifest tree "$y"
    expect_rc 0 "$name: tree succeeds"
    expect_in "$T/out" "/workspace" "$name: tree starts at the root"
done
expect_eq "$([ "$n_examples" -ge 4 ] && echo yes)" yes "at least four example manifests"

run "$SBX" manifest check "$EX/renewal-packet/manifest.yaml"
expect_in "$T/out" '"account_brief.md": {' "renewal packet: first file"
expect_in "$T/out" '"content": "# Delivery risks\n\n- Security questionnaire is not complete.\n' \
    "renewal packet: content kept byte for byte"
expect_eq "$(head -c1 "$T/err")" "" "no note when there are no secrets"

run "$SBX" manifest tree "$EX/renewal-packet/manifest.yaml"
expect_eq "$(cat "$T/out")" "/workspace
├── account_brief.md  (101 bytes)
└── implementation_risks.md  (116 bytes)" "renewal packet: the tree the agent sees"

# --- documents written by the reference SDKs load -------------------------------------------
run "$SBX" manifest check --no-host-checks "$DATA/python-sdk.json"
expect_rc 0 "a manifest serialized by the Python SDK loads"
expect_in "$T/out" '"PLAIN": "x"' "its wrapped environment is read"
expect_in "$T/out" '"description": "an entry"' "its EnvEntry shape is read"
run "$SBX" manifest check --no-host-checks "$DATA/js-sdk.json"
expect_rc 0 "a manifest serialized by the JS SDK loads"
expect_in "$T/out" '"mount_path": "/mnt/exports"' "camelCase fields become snake_case"
expect_in "$T/out" '"data": "iVBORw0KGgo' "binary content stays base64"
expect_in "$T/err" "sbx: note: 1 secret value was left out of the output" \
    "docker driver options count as secrets"
expect_not_in "$T/out" "gcs-bucket-policy-only" "driver options are not printed"
for f in python-sdk js-sdk; do
    run "$SBX" manifest check --no-host-checks "$DATA/$f.json"
    cp "$T/out" "$T/$f.1.json"
    run "$SBX" manifest check --no-host-checks "$T/$f.1.json"
    expect_rc 0 "$f: its normalised form checks"
    if cmp -s "$T/$f.1.json" "$T/out"; then ok "$f: check(check(x)) == check(x)"; else
        not_ok "$f: check(check(x)) == check(x)"; diag "$(diff "$T/$f.1.json" "$T/out")"
    fi
done

# --- secrets ---------------------------------------------------------------------------------
cat >"$T/secret.yaml" <<'EOF'
entries:
  data:
    type: s3_mount
    bucket: b
    access_key_id: AKIAVISIBLE
    secret_access_key: wJalrXUtnFEMI-K7MDENG
environment:
  API_KEY: {value: sk-test-abc123, secret: true}
  FROM_HARNESS: {type: secret, env: OPENAI_API_KEY}
EOF
run "$SBX" manifest check "$T/secret.yaml"
expect_rc 0 "a manifest with secrets checks"
expect_not_in "$T/out" "wJalrXUtnFEMI" "the mount secret key is not printed"
expect_not_in "$T/out" "AKIAVISIBLE" "the mount key id is not printed"
expect_not_in "$T/out" "sk-test-abc123" "the secret environment value is not printed"
expect_not_in "$T/err" "sk-test-abc123" "nor written to stderr"
expect_in "$T/out" '"env": "OPENAI_API_KEY"' "a harness reference is printed as a reference"
expect_in "$T/err" "sbx: note: 3 secret values were left out of the output" "the omission is reported"

# --- bad input: exit 1, the entry and the rule named ----------------------------------------
# bad_doc NAME SUFFIX CONTENT NEEDLE
bad_doc() {
    printf '%s' "$3" >"$T/bad.$2"
    run "$SBX" manifest check "$T/bad.$2"
    expect_rc 1 "$1: exit status 1"
    expect_in "$T/err" "sbx: manifest '$T/bad.$2': $4" "$1: message names it"
    expect_eq "$(wc -c <"$T/out")" 0 "$1: nothing on stdout"
}
bad_doc "absolute path" yaml $'entries:\n  /etc/passwd: {type: file, content: x}\n' \
    "entry '/etc/passwd': path must be relative to the workspace"
bad_doc "'..'" yaml $'entries:\n  a/../b: {type: file, content: x}\n' \
    "entry 'a/../b': path must not contain '..'"
bad_doc "nested '..'" yaml $'entries:\n  d:\n    type: dir\n    children:\n      ../../x: {type: dir}\n' \
    "entry 'd/../../x': path must not contain '..'"
bad_doc "NUL in a name" json '{"entries": {"a\u0000b": {"type": "dir"}}}' \
    "json line 1 column 23: NUL byte in object key"
bad_doc "duplicate JSON keys" json '{"entries": {"a": {"type": "dir"}, "a": {"type": "dir"}}}' \
    "json line 1 column 38: duplicate object key"
bad_doc "duplicate YAML keys" yaml $'entries:\n  a: {type: dir}\n  a: {type: dir}\n' \
    "yaml line 3 column 3: duplicate key 'a'"
bad_doc "same path twice" yaml $'entries:\n  a: {type: dir}\n  ./a/: {type: dir}\n' \
    "entry 'a': path is declared twice"
bad_doc "file under a file" yaml $'entries:\n  a: {type: file, content: x}\n  a/b: {type: file, content: y}\n' \
    "entry 'a/b': lies under file entry 'a'"
bad_doc "unknown type" yaml $'entries:\n  x: {type: symlink}\n' "entry 'x': unknown type 'symlink'"
bad_doc "missing required field" yaml $'entries:\n  x: {type: git_repo}\n' \
    "entry 'x': missing required field 'repo'"
bad_doc "wrong field type" yaml $'entries:\n  x: {type: file, content: [1, 2]}\n' \
    "entry 'x': field 'content' must be a string or"
bad_doc "unknown field" yaml $'entries:\n  x: {type: file, contents: x}\n' \
    "entry 'x': unknown field 'contents'"
bad_doc "1 GiB declared" yaml $'entries:\n  big.bin: {type: file, content: {type: base64, data: AAAA, size: 1073741824}}\n' \
    "entry 'big.bin': content of 1073741824 bytes exceeds the limit"
bad_doc "invalid UTF-8 in a name" yaml $'entries:\n  "bad\xff": {type: dir}\n' \
    "yaml line 2 column 7: invalid leading UTF-8 octet"

# A 1 GiB document (sparse: no disk used) is refused before it is read.
truncate -s 1G "$T/huge.json"
run "$SBX" manifest check "$T/huge.json"
expect_rc 1 "a 1 GiB document: exit status 1"
expect_in "$T/err" "huge.json': the document is 1073741824 bytes, more than the manifest limit of 67108864 bytes (64 MiB)" "a 1 GiB document: refused by size"
rm -f "$T/huge.json"

# Deep nesting stops at the reader's depth limit.
{
    echo "entries:"
    ind="  "
    for i in $(seq 1 100); do
        echo "${ind}d$i:"
        echo "${ind}  type: dir"
        echo "${ind}  children:"
        ind="$ind    "
    done
} >"$T/deep.yaml"
run "$SBX" manifest check "$T/deep.yaml"
expect_rc 1 "deeply nested YAML: exit status 1"
expect_in "$T/err" "depth" "deeply nested YAML: the depth limit is named"

# Local sources: relative to the manifest's directory, no symlinks, not outside.
mkdir -p "$T/proj/inputs/sub"
echo hello >"$T/proj/inputs/sub/a.txt"
ln -s /etc "$T/proj/etc-link"
ln -s ../../../outside "$T/proj/inputs/sub/escape"
printf 'entries:\n  in: {type: local_dir, src: etc-link}\n' >"$T/proj/m1.yaml"
run "$SBX" manifest check "$T/proj/m1.yaml"
expect_rc 1 "a symlinked local source: exit status 1"
expect_in "$T/err" "entry 'in': local source 'etc-link' is or passes through a symlink" \
    "a symlinked local source is named"
printf 'entries:\n  in: {type: local_dir, src: inputs}\n' >"$T/proj/m2.yaml"
run "$SBX" manifest check "$T/proj/m2.yaml"
expect_rc 1 "a symlink inside a local dir: exit status 1"
expect_in "$T/err" "contains a symlink 'sub/escape'" "the symlink inside is named"
rm "$T/proj/inputs/sub/escape"
run "$SBX" manifest check "$T/proj/m2.yaml"
expect_rc 0 "without the symlink the local dir checks"
printf 'entries:\n  in: {type: local_file, src: ../secret.txt}\n' >"$T/proj/m3.yaml"
run "$SBX" manifest check "$T/proj/m3.yaml"
expect_rc 1 "a source outside the manifest's directory: exit status 1"
expect_in "$T/err" "is outside the base directory" "the escape is named"
run "$SBX" manifest check --no-host-checks "$T/proj/m1.yaml"
expect_rc 0 "--no-host-checks skips the host"

run "$SBX" manifest check "$T/does-not-exist.yaml"
expect_rc 1 "a missing file: exit status 1"
expect_in "$T/err" "does-not-exist.yaml" "a missing file is named"

# --- usage errors: exit 2 -----------------------------------------------------------------------
run "$SBX" manifest
expect_rc 2 "no subcommand is a usage error"
run "$SBX" manifest frob x
expect_rc 2 "an unknown subcommand is a usage error"
expect_in "$T/err" "unknown subcommand 'frob'" "the subcommand is named"
run "$SBX" manifest check
expect_rc 2 "a missing FILE is a usage error"
run "$SBX" manifest check a b
expect_rc 2 "two FILEs are a usage error"
run "$SBX" manifest tree --depth lots "$EX/renewal-packet/manifest.yaml"
expect_rc 2 "a bad --depth is a usage error"
run "$SBX" manifest check --depth 2 "$EX/renewal-packet/manifest.yaml"
expect_rc 2 "--depth belongs to tree only"
run "$SBX" manifest --help
expect_rc 0 "--help succeeds"
expect_in "$T/out" "sbx manifest check [" "--help shows the usage"
run "$SBX" help
expect_in "$T/out" "manifest" "the verb is listed in sbx help"

# --- tree limits ---------------------------------------------------------------------------------
{
    echo "entries:"
    for i in $(seq 1 300); do echo "  dir$i/file$i.txt: {type: file, content: x, description: entry $i}"; done
} >"$T/wide.yaml"
run "$SBX" manifest tree --depth 0 "$T/wide.yaml"
expect_rc 0 "a wide tree renders"
expect_eq "$([ "$(wc -c <"$T/out")" -le 5000 ] && echo yes)" yes "the default cap is 5000 bytes"
expect_in "$T/out" "... (truncated, " "a cut tree says so"
run "$SBX" manifest tree --max-bytes 300 "$T/wide.yaml"
expect_eq "$([ "$(wc -c <"$T/out")" -le 300 ] && echo yes)" yes "--max-bytes caps the text"
run "$SBX" manifest tree --depth 1 --max-bytes 100000 "$T/wide.yaml"
expect_in "$T/out" "├── dir1/  (1 entry not shown)" "--depth folds deeper levels"
expect_not_in "$T/out" "file1.txt" "folded entries are not listed"
run "$SBX" manifest tree --depth 0 --max-bytes 100000 "$T/wide.yaml"
expect_in "$T/out" "│   └── file7.txt  (1 byte)  # entry 7" "depth 0 shows everything"

done_testing
