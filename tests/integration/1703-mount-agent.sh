#!/usr/bin/env bash
# A sandbox agent with storage mounts (docs/internals/mounts.md), through `sbx run` and the
# fake model server: its first command already sees the bucket, it reads an input, writes an
# answer into the read-write mount, which lands in the bucket, and cannot write the read-only one.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$SBX_SRCDIR/tests/storage/mount-lib.sh"
trap 'stop_fake; mount_cleanup' EXIT

hrclone mkdir s3:room
printf 'term sheet v2\n' >"$T/in.txt"
hrclone copyto "$T/in.txt" s3:room/inputs/terms.txt
hrclone mkdir s3:answers
ep=$SBX_TEST_S3_ENDPOINT ak=$SBX_TEST_S3_ACCESS_KEY sk=$SBX_TEST_S3_SECRET_KEY
cat >"$T/m.json" <<JSON
{"entries": {
  "room": {"type": "s3_mount", "bucket": "room", "prefix": "inputs", "endpoint_url": "$ep",
           "access_key_id": "$ak", "secret_access_key": "$sk"},
  "answers": {"type": "s3_mount", "bucket": "answers", "read_only": false, "endpoint_url": "$ep",
              "access_key_id": "$ak", "secret_access_key": "$sk"}}}
JSON
mk "$T/s.json" '[resp(1, fcall(1, "exec_command", {"cmd": "ls room; cat room/terms.txt; echo x > room/new.txt; echo ro=$?; echo summary > answers/summary.txt; echo rc=$?"})), resp(2, msg("done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" --manifest "$T/m.json" "summarise the data room"
expect_rc 0 "an agent run with s3 mounts"
[ "$rc" = 0 ] || diag "$(cat "$T/err")"
fake_query "reqs[1]['body']['input'][-1].get('output')" >"$T/o"
expect_in "$T/o" "terms.txt" "the agent's first command lists the mount"
expect_in "$T/o" "term sheet v2" "and reads an object"
expect_in "$T/o" "rc=0" "and writes into the read-write mount"
expect_not_in "$T/o" "ro=0" "but cannot write into the read-only one"
expect_in "$T/o" "ro=" "(the read-only write was tried)"
got=""
for i in $(seq 1 100); do
    got=$(hrclone cat s3:answers/summary.txt 2>/dev/null) && [ -n "$got" ] && break
    sleep 0.1
done
expect_eq "$got" summary "the agent's file is in the bucket"
if [ -z "$(host_fuse_under "$T/")" ] && ! pgrep -f "rclone --config $T/run" >/dev/null; then
    ok "after the run no rclone and no FUSE mount is left"; else
    not_ok "after the run no rclone and no FUSE mount is left"; fi
done_testing
