#!/usr/bin/env bash
# A sandbox agent with Azure Blob mounts against Azurite (docs/internals/mounts.md), through
# `sbx run` and the fake model server: its first command lists and reads the read-only
# container, cannot write there, and writes into the read-write one, where the blob lands.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$SBX_SRCDIR/tests/storage/mount-lib.sh"
trap 'stop_fake; mount_cleanup' EXIT

host_azure_remote
hrclone mkdir az:room
hrclone mkdir az:answers
printf 'board minutes, march\n' >"$T/in.txt"
hrclone copyto "$T/in.txt" az:room/minutes.txt

acct=$SBX_TEST_AZURE_ACCOUNT key=$SBX_TEST_AZURE_KEY ep=$SBX_TEST_AZURE_ENDPOINT
cat >"$T/m.json" <<JSON
{"entries": {
  "room": {"type": "azure_blob_mount", "account": "$acct", "container": "room",
           "endpoint": "$ep", "account_key": "$key"},
  "answers": {"type": "azure_blob_mount", "account": "$acct", "container": "answers",
              "endpoint": "$ep", "account_key": "$key", "read_only": false}}}
JSON
mk "$T/s.json" '[resp(1, fcall(1, "exec_command", {"cmd": "ls room; cat room/minutes.txt; echo x > room/new.txt; echo ro=$?; echo noted > answers/notes.txt; echo rc=$?"})), resp(2, msg("done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" --manifest "$T/m.json" "read the minutes"
expect_rc 0 "an agent run with azure_blob mounts"
[ "$rc" = 0 ] || diag "$(cat "$T/err")"
fake_query "reqs[1]['body']['input'][-1].get('output')" >"$T/o"
expect_in "$T/o" "minutes.txt" "the agent's first command lists the container"
expect_in "$T/o" "board minutes, march" "and reads a blob"
expect_in "$T/o" "ro=" "it tried to write into the read-only mount"
expect_not_in "$T/o" "ro=0" "and could not"
expect_in "$T/o" "rc=0" "it writes into the read-write mount"
got=""
for i in $(seq 1 100); do
    got=$(hrclone cat az:answers/notes.txt 2>/dev/null) && [ -n "$got" ] && break
    sleep 0.1
done
expect_eq "$got" noted "the agent's file is in the container"
if [ -z "$(host_fuse_under "$T/")" ] && ! pgrep -f "rclone --config $T/run" >/dev/null; then
    ok "after the run no rclone and no FUSE mount is left"; else
    not_ok "after the run no rclone and no FUSE mount is left"; fi
done_testing
