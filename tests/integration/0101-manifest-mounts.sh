#!/usr/bin/env bash
# sbx manifest check on mount entries through the real binary: one line per mount on stderr
# (type, target, access mode, whether sbx's tests mount that type against a real server), and
# the field errors, each naming the entry: a missing bucket, a bad endpoint URL, an unknown
# credential reference, a target outside the workspace, targets overlapping other entries.
# Credentials given by reference are written back as the reference, never as the value.
. "$(dirname "$0")/lib.sh"

unset SBX_T_KEY SBX_T_SECRET
check() { # YAML entries text -> $T/out, $T/err
    printf 'version: 1\nentries:\n%s\n' "$1" >"$T/m.yaml"
    run "$SBX" manifest check "$T/m.yaml"
}

# --- the report ------------------------------------------------------------------------------
check '  docs: {type: s3_mount, bucket: b, endpoint_url: "http://127.0.0.1:4568"}
  r2: {type: r2_mount, bucket: b, account_id: acc, read_only: false}
  gcs: {type: gcs_mount, bucket: b, mount_path: /workspace/data/gcs}
  az: {type: azure_blob_mount, account: a, container: c}
  box: {type: box_mount, read_only: false}
  data: {type: dir}'
expect_rc 0 "a manifest with every mount type the local provider mounts checks"
expect_in "$T/err" "mount 'docs': s3_mount at /workspace/docs, read-only; tested against a real server in sbx's test suite (s3rver)" \
    "s3: target, read-only by default, tested"
expect_in "$T/err" "mount 'r2': r2_mount at /workspace/r2, read-write; tested against a real server" \
    "r2: read-write when the entry says so, tested"
expect_in "$T/err" "mount 'gcs': gcs_mount at /workspace/data/gcs, read-only; tested against a real server" \
    "gcs: an absolute mount_path inside the workspace is its target"
expect_in "$T/err" "mount 'az': azure_blob_mount at /workspace/az, read-only; tested against a real server in sbx's test suite (azurite)" \
    "azure: tested against azurite"
expect_in "$T/err" "mount 'box': box_mount at /workspace/box, read-write; configured only, not tested against a real server" \
    "box: configured only"
expect_eq "$(grep -c '^mount ' "$T/err")" 5 "one line per mount"
expect_eq "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["entries"]))' "$T/out")" 6 \
    "stdout is still the manifest alone"

# --- what a provider cannot mount fails the check, with why (its declared refusal) -----------
check '  efs: {type: s3_files_mount, file_system_id: fs-1, mount_path: files}'
expect_rc 1 "s3_files_mount fails the check (the local provider cannot mount it)"
expect_in "$T/err" "manifest '$T/m.yaml': entry 'efs' (s3_files_mount): the local provider cannot mount it: S3 Files is an NFS 4.2 file system with TLS and IAM authentication: mounting it takes the mount.s3files helper of amazon-efs-utils" \
    "naming the entry and what S3 Files would need"
printf 'version: 1\nentries:\n  docs: {type: s3_mount, bucket: b}\n' >"$T/m.yaml"
run "$SBX" manifest check --provider docker "$T/m.yaml"
expect_rc 1 "--provider docker: any mount fails the check"
expect_in "$T/err" "entry 'docs' (s3_mount): the docker provider cannot mount it: sbx mounts buckets with rclone on the host, outside the sandbox" \
    "with the docker provider's declared reason"
run "$SBX" manifest check --provider local "$T/m.yaml"
expect_rc 0 "--provider local: the same manifest checks"
run "$SBX" sandbox providers --json
expect_eq "$(python3 -c 'import json,sys; d={p["name"]: p.get("unmountable") for p in json.load(open(sys.argv[1]))}; print(d["local"]["types"], "s3_mount" in d["docker"]["types"], d["docker"]["why"].startswith("sbx mounts buckets with rclone"))' "$T/out")" \
    "['s3_files_mount'] True True" "sbx sandbox providers --json shows what each provider refuses to mount, and why"
run "$SBX" manifest check --provider nosuch "$T/m.yaml"
expect_rc 2 "an unknown provider is a usage error"
expect_in "$T/err" "unknown provider 'nosuch'" "naming it"

check '  notes.md: {type: file, content: hi}'
expect_rc 0 "a manifest without mounts checks"
expect_not_in "$T/err" "mount " "no mount lines without mounts"

# --- credentials by reference ---------------------------------------------------------------
REF='  docs: {type: s3_mount, bucket: b, access_key_id: {type: secret, env: SBX_T_KEY},
         secret_access_key: {type: secret, env: SBX_T_SECRET}}'
check "$REF"
expect_rc 1 "a credential reference to an unset variable fails"
expect_in "$T/err" "entry 'docs': credential 'access_key_id': unknown credential reference: harness variable 'SBX_T_KEY' is not set" \
    "the error names the entry, the field and the variable"
SBX_T_KEY=AKID-value-1 SBX_T_SECRET=secret-value-2 run "$SBX" manifest check "$T/m.yaml"
expect_rc 0 "set variables resolve the references"
expect_in "$T/out" '"env": "SBX_T_KEY"' "the reference is written back"
expect_not_in "$T/out" "AKID-value-1" "the key's value is not printed"
expect_not_in "$T/out" "secret-value-2" "the secret's value is not printed"
expect_not_in "$T/err" "left out" "a reference is not a left-out secret"
cp "$T/out" "$T/normal.json"
run "$SBX" manifest check --no-host-checks "$T/normal.json"
expect_rc 0 "the written form loads again without the variables (--no-host-checks)"
check '  docs: {type: s3_mount, bucket: b, access_key_id: {type: vault, env: SBX_T_KEY},
         secret_access_key: x}'
expect_rc 1 "an unknown reference type fails"
expect_in "$T/err" "entry 'docs': credential 'access_key_id': unknown credential reference type 'vault'" \
    "the reference type error names the entry"
check '  docs: {type: s3_mount, bucket: b, access_key_id: {type: secret, env: "1BAD"}, secret_access_key: x}'
expect_rc 1 "a bad variable name fails"
expect_in "$T/err" "entry 'docs': credential 'access_key_id': field 'env': '1BAD' is not a valid variable name" \
    "the variable name error names the entry"
check '  docs: {type: s3_mount, bucket: b, access_key_id: {type: secret, env: OPENAI_API_KEY}, secret_access_key: x}'
expect_rc 1 "sbx's own API key is refused as a storage credential"
expect_in "$T/err" "entry 'docs': credential 'access_key_id': harness variable 'OPENAI_API_KEY' holds sbx's own credentials" \
    "the refusal names the entry"
printf 'version: 1\nentries:\n%s\n' "$REF" >"$T/m.yaml"
SBX_T_KEY=$'line1\nline2' SBX_T_SECRET=s run "$SBX" manifest check "$T/m.yaml"
expect_rc 1 "a referenced value with a newline fails (it would inject helper configuration)"
expect_in "$T/err" "entry 'docs': credential 'access_key_id': harness variable 'SBX_T_KEY' must not contain control characters" \
    "the control-character error names the entry and the variable"
SBX_T_KEY= SBX_T_SECRET=s run "$SBX" manifest check "$T/m.yaml"
expect_rc 1 "an empty referenced value fails"
expect_in "$T/err" "entry 'docs': credential 'access_key_id': harness variable 'SBX_T_KEY' is empty" \
    "the empty-value error names the entry"
check '  docs: {type: s3_mount, bucket: b, access_key_id: {type: secret, env: SBX_T_KEY}}'
SBX_T_KEY=k run "$SBX" manifest check "$T/m.yaml"
expect_rc 1 "a referenced key without its secret fails"
expect_in "$T/err" "credentials 'access_key_id' and 'secret_access_key' go together" "pairs hold for references"

# --- field errors ----------------------------------------------------------------------------
check '  docs: {type: s3_mount, prefix: p/}'
expect_rc 1 "a missing bucket fails"
expect_in "$T/err" "entry 'docs': missing required field 'bucket'" "the missing bucket names the entry"
check '  docs: {type: s3_mount, bucket: b, endpoint_url: "ftp://127.0.0.1"}'
expect_rc 1 "a non-http endpoint fails"
expect_in "$T/err" "entry 'docs': field 'endpoint_url' must be an http(s) URL" "the endpoint error names the entry"
check '  docs: {type: s3_mount, bucket: b, endpoint_url: "http://user:pw@127.0.0.1"}'
expect_rc 1 "an endpoint with userinfo fails"
expect_in "$T/err" "entry 'docs': field 'endpoint_url' must not carry credentials" "userinfo in the endpoint is refused"
check '  az: {type: azure_blob_mount, account: a, container: c, endpoint: "http://"}'
expect_rc 1 "an empty azure endpoint fails"
expect_in "$T/err" "entry 'az': field 'endpoint' must be an http(s) URL" "the azure endpoint error names the entry"
check '  az: {type: azure_blob_mount, account: a}'
expect_rc 1 "a missing container fails"
expect_in "$T/err" "entry 'az': missing required field 'container'" "the missing container names the entry"

# --- targets ---------------------------------------------------------------------------------
check '  docs: {type: s3_mount, bucket: b, mount_path: /mnt/docs}'
expect_rc 1 "a target outside the workspace fails"
expect_in "$T/err" "entry 'docs': mount target '/mnt/docs' lies outside the workspace root '/workspace'" \
    "the target error names the entry"
check '  docs: {type: s3_mount, bucket: b, mount_path: /workspacefoo}'
expect_rc 1 "a sibling of the root is outside it"
check '  docs: {type: s3_mount, bucket: b, mount_path: ../up}'
expect_rc 1 "a relative target climbing out fails"
expect_in "$T/err" "entry 'docs': field 'mount_path'" "the climbing target names the entry"
check '  docs: {type: s3_mount, bucket: b, mount_path: notes.md}
  notes.md: {type: file, content: hi}'
expect_rc 1 "a target on another entry fails"
expect_in "$T/err" "entry 'docs': mount target 'notes.md' would hide file entry 'notes.md'" \
    "the overlap names both entries"
check '  docs: {type: s3_mount, bucket: b, mount_path: src}
  src: {type: dir, children: {a.txt: {type: file, content: x}}}'
expect_rc 1 "a target over a directory entry fails"
expect_in "$T/err" "would hide dir entry 'src'" "the directory is named"
check '  docs: {type: s3_mount, bucket: b, mount_path: repo/docs}
  repo: {type: local_dir}'
expect_rc 1 "a target inside a copied directory fails"
expect_in "$T/err" "entry 'docs': mount target 'repo/docs' lies inside local_dir entry 'repo'" \
    "the enclosing entry is named"
check '  a: {type: s3_mount, bucket: b, mount_path: shared}
  b: {type: azure_blob_mount, account: x, container: c, mount_path: shared/sub}'
expect_rc 1 "nested mount targets fail"
expect_in "$T/err" "entry 'a': mount target 'shared' overlaps the target 'shared/sub' of mount entry 'b'" \
    "both mounts are named"
check '  a: {type: s3_mount, bucket: b, mount_path: /workspace}
  out: {type: dir}'
expect_rc 1 "a mount at the root with other entries fails"
expect_in "$T/err" "entry 'a': mount target '/' would hide dir entry 'out'" "the root mount names the hidden entry"
check '  out: {type: dir, children: {docs: {type: s3_mount, bucket: b}}}'
expect_rc 0 "a mount inside a dir entry is fine"
expect_in "$T/err" "mount 'out/docs': s3_mount at /workspace/out/docs" "its target is under the dir"

run "$SBX" manifest check --no-host-checks "$SBX_SRCDIR/tests/data/manifest/js-sdk.json"
expect_rc 0 "an SDK document with a target outside the workspace loads with --no-host-checks"
done_testing
