#!/usr/bin/env bash
# S3, R2 and GCS (S3 interoperability) mounts against s3rver on loopback: read-only by default,
# read-write on request with the writes in the bucket, credentials invisible inside, no FUSE
# mount on the host after rm, a SIGKILLed supervisor or a failed create, errors naming the
# entry (docs/internals/mounts.md).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$SBX_SRCDIR/tests/storage/mount-lib.sh"

no_rclone() { ! pgrep -f "rclone --config $T/run" >/dev/null; }
hrclone mkdir s3:inputs
printf 'quarterly numbers\n' >"$T/report.txt"
hrclone copyto "$T/report.txt" s3:inputs/docs/report.txt
hrclone copyto "$T/report.txt" s3:inputs/top.txt
hrclone mkdir s3:outputs

ep=$SBX_TEST_S3_ENDPOINT ak=$SBX_TEST_S3_ACCESS_KEY sk=$SBX_TEST_S3_SECRET_KEY
cat >"$T/m.json" <<JSON
{"entries": {
  "data": {"type": "s3_mount", "bucket": "inputs", "endpoint_url": "$ep",
           "access_key_id": "$ak", "secret_access_key": "$sk"},
  "out": {"type": "s3_mount", "bucket": "outputs", "prefix": "run1", "read_only": false,
          "endpoint_url": "$ep", "access_key_id": "$ak", "secret_access_key": "$sk"},
  "r2": {"type": "r2_mount", "bucket": "inputs", "account_id": "acct", "custom_domain": "$ep",
         "access_key_id": "$ak", "secret_access_key": "$sk"},
  "gcs": {"type": "gcs_mount", "bucket": "inputs", "prefix": "docs", "endpoint_url": "$ep",
          "access_id": "$ak", "secret_access_key": "$sk"}}}
JSON
run "$SBX" sandbox create --manifest "$T/m.json"
expect_rc 0 "create with s3, r2 and gcs mounts"
id=$(cat "$T/out")
[ "$rc" = 0 ] || diag "$(cat "$T/err")"

run "$SBX" sandbox exec "$id" -- cat /workspace/data/docs/report.txt
if [ "$rc" = 0 ] && grep -q 'quarterly numbers' "$T/out"; then ok "s3: an object reads"; else
    not_ok "s3: an object reads"; diag "$(cat "$T/out" "$T/err")"; fi
run "$SBX" sandbox exec "$id" -- ls /workspace/data
if grep -qx docs "$T/out" && grep -qx top.txt "$T/out"; then ok "s3: the bucket lists"; else
    not_ok "s3: the bucket lists"; diag "$(cat "$T/out" "$T/err")"; fi
run "$SBX" sandbox exec "$id" -- sh -c 'echo x > /workspace/data/new.txt'
if [ "$rc" != 0 ] && ! hrclone lsf s3:inputs | grep -q new.txt; then
    ok "s3: read-only by default (a write fails)"; else not_ok "s3: read-only by default"; fi
run "$SBX" sandbox exec "$id" -- sh -c 'echo written-inside > /workspace/out/result.txt'
expect_rc 0 "s3 read-write: a write succeeds"
got=""
for i in $(seq 1 100); do
    got=$(hrclone cat s3:outputs/run1/result.txt 2>/dev/null) && [ -n "$got" ] && break
    sleep 0.1
done
if [ "$got" = written-inside ]; then ok "s3 read-write: the object is in the bucket"; else
    not_ok "s3 read-write: the object is in the bucket"; diag "got '$got'"; fi
# rclone's log (issue 26, finding 12): rclone writes into a pipe, whose reader rate-limits and
# rotates the log (tests/unit/providers/local/test-logcap.c), never into the file itself; a
# failing append (no write cache) still reaches the log that way.
pipes=0 procs=0
for p in $(pgrep -f -- "rclone --config $RUNBASE/$id/mounts/"); do
    procs=$((procs + 1))
    case $(readlink "/proc/$p/fd/2" 2>/dev/null) in pipe:*) pipes=$((pipes + 1)) ;; esac
done
expect_eq "$pipes/$procs" "4/4" "each rclone mount logs into a pipe, not straight into its file"
run "$SBX" sandbox exec --timeout 120 "$id" -- sh -c 'for i in 1 2 3 4 5; do echo b >> /workspace/out/appended; done; exit 0'
wait_until grep -qs "WriteFileHandle" "$RUNBASE/$id/mounts/1.log"; rc=$?
expect_rc 0 "rclone's complaint about a failing append reaches its log"

run "$SBX" sandbox exec "$id" -- cat /workspace/r2/top.txt
if grep -q 'quarterly numbers' "$T/out"; then ok "r2 (custom domain): an object reads"; else
    not_ok "r2: an object reads"; diag "$(cat "$T/out" "$T/err")"; fi
run "$SBX" sandbox exec "$id" -- cat /workspace/gcs/report.txt
if grep -q 'quarterly numbers' "$T/out"; then ok "gcs (HMAC, S3 interop, prefix): an object reads"; else
    not_ok "gcs: an object reads"; diag "$(cat "$T/out" "$T/err")"; fi

# Credentials: nowhere a command can look (environment, every process's environ and cmdline,
# the workspace outside the mounts, /tmp, /run, /etc).
run "$SBX" sandbox exec "$id" -- sh -c "env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n';
  find /workspace /tmp /run /etc /var -xdev -type f -size -1024k 2>/dev/null | grep -v -e '^/workspace/data/' -e '^/workspace/out/' -e '^/workspace/r2/' -e '^/workspace/gcs/' | xargs -r cat 2>/dev/null; ls -la /"
if [ "$rc" = 0 ] && ! grep -q "$sk" "$T/out" && ! grep -q "$ak" "$T/out"; then
    ok "no credential is visible inside"; else
    not_ok "no credential is visible inside"; diag "$(grep -n -e "$sk" -e "$ak" "$T/out" | head -5)"; fi
if [ -z "$(host_fuse_under "$T/")" ]; then ok "no FUSE mount on the host while it runs"; else
    not_ok "no FUSE mount on the host while it runs"; diag "$(host_fuse_under "$T/")"; fi

# Snapshots hold no mounted content.
run "$SBX" sandbox snapshot "$id" "$T/snap.tar"
if [ "$rc" = 0 ] && ! tar -tf "$T/snap.tar" 2>/dev/null | grep -q report.txt; then
    ok "a snapshot holds no mounted content"; else
    not_ok "a snapshot holds no mounted content"; diag "$(cat "$T/err")"; fi

# The rclone config: 0600 in the runtime dir, with the key. Stop and start bring the mounts
# back; the saved manifest has no credentials, the manifest given to start gives them again.
conf="$RUNBASE/$id/mounts/0.conf"
if [ "$(stat -c %a "$conf" 2>/dev/null)" = 600 ] && grep -q "secret_access_key = $sk" "$conf"; then
    ok "the rclone config is 0600 in the runtime dir"; else not_ok "the rclone config is 0600 in the runtime dir"; fi
run "$SBX" sandbox stop "$id"
expect_rc 0 "stop"
run "$SBX" sandbox start --manifest "$T/m.json" "$id"
expect_rc 0 "start with the manifest"
run "$SBX" sandbox exec "$id" -- cat /workspace/data/docs/report.txt
if grep -q 'quarterly numbers' "$T/out" && grep -q "secret_access_key = $sk" "$conf"; then
    ok "after stop and start the mount is back, with the given manifest's credentials"; else
    not_ok "after stop and start the mount is back"; diag "$(cat "$T/err")"; fi
run "$SBX" sandbox stop "$id"
run "$SBX" sandbox start "$id"
if [ "$rc" = 0 ] && ! grep -q "secret_access_key" "$conf"; then
    ok "start without the manifest mounts without credentials (none were saved)"; else
    not_ok "start without the manifest mounts without credentials"; diag "$(cat "$T/err")"; fi

run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
if wait_until no_rclone && [ -z "$(host_fuse_under "$T/")" ]; then
    ok "rm leaves no rclone and no FUSE mount"; else not_ok "rm leaves no rclone and no FUSE mount"; fi

# Credentials by reference: the saved manifest keeps the reference, so start after stop reads the
# variable again and the mount comes back without the manifest.
cat >"$T/ref.json" <<JSON
{"entries": {"data": {"type": "s3_mount", "bucket": "inputs", "endpoint_url": "$ep",
  "access_key_id": {"type": "secret", "env": "SBX_T_S3_KEY"},
  "secret_access_key": {"type": "secret", "env": "SBX_T_S3_SECRET"}}}}
JSON
export SBX_T_S3_KEY=$ak SBX_T_S3_SECRET=$sk
run "$SBX" sandbox create --manifest "$T/ref.json"
expect_rc 0 "create with credentials by reference"
rid=$(cat "$T/out")
run "$SBX" sandbox stop "$rid"
run "$SBX" sandbox start "$rid"
expect_rc 0 "start after stop, no manifest given"
run "$SBX" sandbox exec "$rid" -- cat /workspace/data/docs/report.txt
st="$RUNBASE/$rid/state.json"
if grep -q 'quarterly numbers' "$T/out" && grep -q SBX_T_S3_SECRET "$st" && ! grep -q -e "$sk" "$st"; then
    ok "a referenced credential is read again at start, and not saved"; else
    not_ok "a referenced credential is read again at start"; diag "$(cat "$T/err")"; fi
"$SBX" sandbox rm "$rid" >/dev/null 2>&1
unset SBX_T_S3_KEY SBX_T_S3_SECRET

# SIGKILL of the supervisor (the host side): rclone and the mounts go with it.
run "$SBX" sandbox create --manifest "$T/m.json"
id=$(cat "$T/out")
outer=""
for p in $(pgrep -f -- "__supervise $id"); do
    pp=$(awk '{print $4}' "/proc/$p/stat")
    pgrep -f -- "__supervise $id" | grep -qx "$pp" || outer=$p
done
kill -KILL "$outer"
if wait_until no_rclone && [ -z "$(host_fuse_under "$T/")" ]; then
    ok "SIGKILL of the supervisor leaves no rclone and no FUSE mount"; else
    not_ok "SIGKILL of the supervisor leaves no rclone and no FUSE mount"; diag "$(host_fuse_under "$T/")"; fi
"$SBX" sandbox rm "$id" >/dev/null 2>&1

# Failed creates: bounded, the entry named, nothing left.
bad() { # bad DESC JSON-ENTRY PATTERN
    printf '{"entries": {"bad": %s}}\n' "$2" >"$T/bad.json"
    run timeout 60 "$SBX" sandbox create --manifest "$T/bad.json"
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "entry 'bad' (s3_mount)" "$T/err" && grep -qi "$3" "$T/err"; then
        ok "$1 fails create naming the entry"; else not_ok "$1 fails create naming the entry"; diag "rc=$rc $(cat "$T/err")"; fi
    nothing_left "$1 leaves no sandbox"
    if [ -z "$(host_fuse_under "$T/")" ] && no_rclone; then
        ok "$1 leaves no rclone and no FUSE mount"; else not_ok "$1 leaves no rclone and no FUSE mount"; fi
}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
bad "a wrong endpoint" "{\"type\": \"s3_mount\", \"bucket\": \"inputs\", \"endpoint_url\": \"http://127.0.0.1:$port\", \"access_key_id\": \"$ak\", \"secret_access_key\": \"$sk\"}" "connection refused\|did not answer"
bad "a wrong key" "{\"type\": \"s3_mount\", \"bucket\": \"inputs\", \"endpoint_url\": \"$ep\", \"access_key_id\": \"NOSUCHKEY\", \"secret_access_key\": \"$sk\"}" "InvalidAccessKeyId\|access key"
bad "a missing bucket" "{\"type\": \"s3_mount\", \"bucket\": \"nosuchbucket\", \"endpoint_url\": \"$ep\", \"access_key_id\": \"$ak\", \"secret_access_key\": \"$sk\"}" "not found\|nosuchbucket"

# What the local provider cannot do is refused before anything exists, naming the entry.
run "$SBX" sandbox create --isolation none --manifest "$T/m.json"
if [ "$rc" != 0 ] && grep -q "entry 'data' (s3_mount): needs isolation" "$T/err"; then
    ok "isolation none refuses mounts"; else not_ok "isolation none refuses mounts"; diag "$(cat "$T/err")"; fi
printf '{"entries": {"fs": {"type": "s3_files_mount", "file_system_id": "fs-1"}}}\n' >"$T/s3f.json"
run "$SBX" sandbox create --manifest "$T/s3f.json"
if [ "$rc" != 0 ] && grep -q "entry 'fs' (s3_files_mount): the local provider cannot mount it: S3 Files" "$T/err"; then
    ok "s3_files_mount is refused"; else not_ok "s3_files_mount is refused"; diag "$(cat "$T/err")"; fi
printf '{"entries": {"x": {"type": "s3_mount", "bucket": "b", "mount_strategy": {"type": "in_container", "pattern": {"type": "rclone", "extra_args": ["--config", "/etc/other"]}}}}}\n' >"$T/xa.json"
run "$SBX" sandbox create --manifest "$T/xa.json"
if [ "$rc" != 0 ] && grep -q "entry 'x' (s3_mount): field 'mount_strategy.pattern.extra_args' is not supported" "$T/err"; then
    ok "rclone extra_args are refused"; else not_ok "rclone extra_args are refused"; diag "$(cat "$T/err")"; fi
printf '{"entries": {"x": {"type": "s3_mount", "bucket": "b", "mount_strategy": {"type": "in_container", "pattern": {"type": "rclone", "mode": "nfs"}}}}}\n' >"$T/nfs.json"
run "$SBX" sandbox create --manifest "$T/nfs.json"
if [ "$rc" != 0 ] && grep -q "entry 'x' (s3_mount): field 'mount_strategy.pattern.mode' must be 'fuse'" "$T/err"; then
    ok "an nfs mount mode is refused"; else not_ok "an nfs mount mode is refused"; diag "$(cat "$T/err")"; fi
nothing_left "the refused creates leave nothing"

done_testing
