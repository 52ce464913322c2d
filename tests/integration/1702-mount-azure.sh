#!/usr/bin/env bash
# Azure Blob mounts against Azurite on loopback (docs/internals/mounts.md): read-only by
# default, read-write on request with the write in the container, the account key invisible
# inside, nothing mounted on the host after rm, a failed create naming the entry.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$SBX_SRCDIR/tests/storage/mount-lib.sh"

no_rclone() { ! pgrep -f "rclone --config $T/run" >/dev/null; }
host_azure_remote
hrclone mkdir az:inputs
hrclone mkdir az:outputs
printf 'contract draft\n' >"$T/contract.txt"
hrclone copyto "$T/contract.txt" az:inputs/legal/contract.txt

acct=$SBX_TEST_AZURE_ACCOUNT key=$SBX_TEST_AZURE_KEY ep=$SBX_TEST_AZURE_ENDPOINT
cat >"$T/m.json" <<JSON
{"entries": {
  "docs": {"type": "azure_blob_mount", "account": "$acct", "container": "inputs",
           "endpoint": "$ep", "account_key": "$key"},
  "out": {"type": "azure_blob_mount", "account": "$acct", "container": "outputs",
          "endpoint": "$ep", "account_key": "$key", "read_only": false}}}
JSON
run "$SBX" sandbox create --manifest "$T/m.json"
expect_rc 0 "create with azure_blob mounts"
id=$(cat "$T/out")
[ "$rc" = 0 ] || diag "$(cat "$T/err")"
run "$SBX" sandbox exec "$id" -- cat /workspace/docs/legal/contract.txt
if grep -q 'contract draft' "$T/out"; then ok "azure: a blob reads"; else
    not_ok "azure: a blob reads"; diag "$(cat "$T/out" "$T/err")"; fi
run "$SBX" sandbox exec "$id" -- ls /workspace/docs
if grep -qx legal "$T/out"; then ok "azure: the container lists"; else not_ok "azure: the container lists"; fi
run "$SBX" sandbox exec "$id" -- sh -c 'echo x > /workspace/docs/new.txt'
if [ "$rc" != 0 ] && ! hrclone lsf az:inputs | grep -q new.txt; then
    ok "azure: read-only by default (a write fails)"; else not_ok "azure: read-only by default"; fi
run "$SBX" sandbox exec "$id" -- sh -c 'echo from-inside > /workspace/out/answer.txt'
expect_rc 0 "azure read-write: a write succeeds"
got=""
for i in $(seq 1 100); do
    got=$(hrclone cat az:outputs/answer.txt 2>/dev/null) && [ -n "$got" ] && break
    sleep 0.1
done
if [ "$got" = from-inside ]; then ok "azure read-write: the blob is in the container"; else
    not_ok "azure read-write: the blob is in the container"; diag "got '$got'"; fi
# The key, and the signature sbx derives from it, appear nowhere a command can look.
run "$SBX" sandbox exec "$id" -- sh -c "env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n';
  find /workspace /tmp /run /etc /var -xdev -type f -size -1024k 2>/dev/null | grep -v -e '^/workspace/docs/' -e '^/workspace/out/' | xargs -r cat 2>/dev/null"
if [ "$rc" = 0 ] && ! grep -q -e "${key:0:24}" -e "sig=" "$T/out"; then ok "the account key is not visible inside"; else
    not_ok "the account key is not visible inside"; fi
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
if wait_until no_rclone && [ -z "$(host_fuse_under "$T/")" ]; then
    ok "rm leaves no rclone and no FUSE mount"; else not_ok "rm leaves no rclone and no FUSE mount"; fi

# A wrong key and a missing container fail create naming the entry, leaving nothing.
badkey=$(printf 'wrong-key-wrong-key-wrong-key!!' | base64 -w0)
for c in "wrong key:inputs:$badkey" "missing container:nosuchcontainer:$key"; do
    what=${c%%:*} rest=${c#*:}
    cont=${rest%%:*} k=${rest#*:}
    printf '{"entries": {"bad": {"type": "azure_blob_mount", "account": "%s", "container": "%s", "endpoint": "%s", "account_key": "%s"}}}\n' \
        "$acct" "$cont" "$ep" "$k" >"$T/bad.json"
    run timeout 60 "$SBX" sandbox create --manifest "$T/bad.json"
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "entry 'bad' (azure_blob_mount)" "$T/err"; then
        ok "a $what fails create naming the entry"; else not_ok "a $what fails create naming the entry"; diag "rc=$rc $(cat "$T/err")"; fi
    if ! grep -q -e "sig=[^*]" -e "${k:0:24}" "$T/err"; then ok "the error shows neither the key nor a signature"; else
        not_ok "the error shows neither the key nor a signature"; diag "$(cat "$T/err")"; fi
    nothing_left "a $what leaves no sandbox"
    if [ -z "$(host_fuse_under "$T/")" ] && no_rclone; then ok "a $what leaves no FUSE mount"; else
        not_ok "a $what leaves no FUSE mount"; fi
done
done_testing
