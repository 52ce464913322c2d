#!/usr/bin/env bash
# Remote snapshot stores against s3rver and Azurite on loopback (tests/storage/servers.sh): a
# sandbox snapshotted into a bucket restores in a new sandbox under another state directory;
# a second push uploads no blob again (the server's object files are not rewritten); a
# tampered object and a lost one are refused naming the blob, leaving the local store as it
# was; bad credentials and a missing bucket are refused with their message; a push cut short
# leaves no header naming a missing blob; the same round trip on Azurite (Shared Key and SAS);
# no credential in any file the state directories hold (docs/internals/snapshots.md).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
STORAGE_DIR="$SBX_SRCDIR/tests/storage"
for p in node npm python3 curl; do
    command -v "$p" >/dev/null || { echo "Bail out! $p is missing"; exit 1; }
done
PROXY_PID=
remote_cleanup() {
    [ -z "$PROXY_PID" ] || kill "$PROXY_PID" 2>/dev/null
    "$STORAGE_DIR/servers.sh" stop "$T/servers" >/dev/null 2>&1
    sandbox_cleanup
}
trap remote_cleanup EXIT
if ! "$STORAGE_DIR/servers.sh" start "$T/servers" >"$T/servers.out" 2>&1; then
    echo "Bail out! cannot start the test storage servers: $(tail -3 "$T/servers.out")"
    exit 1
fi
. "$T/servers/env"

# The credentials by reference: the URL names the variables.
export SNAP_KEY=$SBX_TEST_S3_ACCESS_KEY SNAP_SECRET=$SBX_TEST_S3_SECRET_KEY
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3
unset AZURE_STORAGE_KEY AZURE_STORAGE_SAS_TOKEN
S3="s3://snaps/team/ws?endpoint=$SBX_TEST_S3_ENDPOINT&key_env=SNAP_KEY&secret_env=SNAP_SECRET"
curl -sf -X PUT "$SBX_TEST_S3_ENDPOINT/snaps" >/dev/null || { echo "Bail out! cannot make the bucket"; exit 1; }
OBJ="$T/servers/s3/snaps/team/ws" # where s3rver keeps the objects

# A fresh state: XDG_STATE_HOME elsewhere, and no store, record or workspace of this test's.
in_fresh() { # in_fresh N CMD...: CMD under state directory $T/fresh-N
    env -u SBX_SNAPSHOTS -u SBX_STOPPED -u SBX_RECORDS XDG_STATE_HOME="$T/fresh-$1" \
        SBX_WORKSPACES="$T/fresh-$1/ws" "${@:2}"
}

run "$SBX" sandbox create
expect_rc 0 "create a sandbox"
id=$(cat "$T/out")
"$SBX" sandbox exec "$id" -- sh -c 'mkdir -p /workspace/src && echo "remote snapshot" > /workspace/src/a.txt &&
    head -c 300000 /dev/urandom > /workspace/big.bin && echo same > /workspace/one && echo same > /workspace/two &&
    chmod 750 /workspace/src/a.txt && ln -s src/a.txt /workspace/link' >/dev/null 2>&1
sum=$("$SBX" sandbox exec "$id" -- sha256sum /workspace/big.bin | cut -d' ' -f1)

run "$SBX" sandbox snapshot "$id" --store "$S3"
expect_rc 0 "sandbox snapshot --store s3://... takes and pushes"
ref=$(cat "$T/out")
expect_in "$T/err" "pushed ${ref:0:19} to 's3://snaps/team/ws'" "it says where it pushed"
blobs=$(find "$OBJ/blobs" -name '*._S3rver_object' | wc -l)
expect_eq "$blobs" 3 "the bucket holds each distinct content once (two equal files, one blob)"
if [ -f "$OBJ/trees/${ref#sha256:}.json._S3rver_object" ] && [ -f "$OBJ/headers/${ref#sha256:}.json._S3rver_object" ]; then
    ok "the tree and its header are in the bucket under the reference"; else
    not_ok "the tree and its header are in the bucket under the reference"; find "$OBJ" | head -20 | sed 's/^/# /'; fi

# Second push: nothing uploaded again, the server's object files untouched.
# (times in nanoseconds and the inode: a rewrite moves one of them)
find "$OBJ/blobs" -name '*._S3rver_object' -exec stat -c '%n %.9Y %.9Z %i %s' {} + | sort >"$T/before"
run "$SBX" snapshot push "$ref" --store "$S3" --json
expect_rc 0 "push again"
expect_in "$T/out" '"transferred": 0' "the second push uploads no blob"
expect_in "$T/out" '"present": 3' "it finds all three in the bucket"
find "$OBJ/blobs" -name '*._S3rver_object' -exec stat -c '%n %.9Y %.9Z %i %s' {} + | sort >"$T/after"
if cmp -s "$T/before" "$T/after"; then ok "no object of the bucket was written again"; else
    not_ok "no object of the bucket was written again"; diff "$T/before" "$T/after" | sed 's/^/# /'; fi

# One file changed: one blob goes up.
"$SBX" sandbox exec "$id" -- sh -c 'echo changed > /workspace/one' >/dev/null 2>&1
run "$SBX" sandbox snapshot "$id" --store "$S3"
expect_rc 0 "a second snapshot of the sandbox"
ref2=$(cat "$T/out")
expect_in "$T/err" "1 of 4 blobs uploaded" "only the changed file's blob is uploaded"

run "$SBX" snapshot ls --store "$S3"
expect_rc 0 "ls --store lists the bucket's snapshots"
expect_in "$T/out" "${ref:0:19}" "the first snapshot is listed"
expect_in "$T/out" "${ref2:0:19}" "the second snapshot is listed"

# Restore in a new sandbox on another state directory, straight from the bucket.
run in_fresh 1 "$SBX" sandbox create --snapshot "${ref:0:19}" --store "$S3"
expect_rc 0 "create --snapshot PREFIX --store URL under a fresh XDG_STATE_HOME"
id2=$(cat "$T/out")
[ "$rc" = 0 ] || diag "$(cat "$T/err")"
run in_fresh 1 "$SBX" sandbox exec "$id2" -- sh -c 'cat /workspace/src/a.txt; stat -c %a /workspace/src/a.txt; readlink /workspace/link; cat /workspace/one; sha256sum /workspace/big.bin'
expect_in "$T/out" "remote snapshot" "the restored sandbox has the file"
expect_in "$T/out" "750" "with its mode"
expect_in "$T/out" "src/a.txt" "and the symlink"
expect_in "$T/out" "$sum" "the large file is the same bytes"
expect_not_in "$T/out" "changed" "it is the first snapshot's content"
if [ -d "$T/fresh-1/sbx/snapshots/trees" ] && ls "$T/fresh-1/sbx/snapshots/trees" | grep -q "${ref#sha256:}"; then
    ok "the pulled snapshot is in the fresh state's own store"; else
    not_ok "the pulled snapshot is in the fresh state's own store"; ls -R "$T/fresh-1" | head -20 | sed 's/^/# /'; fi
in_fresh 1 "$SBX" sandbox rm "$id2" >/dev/null 2>&1

run in_fresh 9 "$SBX" snapshot pull 0123456789abcdef --store "$S3"
expect_rc 1 "a pull of a reference the bucket does not have fails"
expect_in "$T/err" "no snapshot '0123456789abcdef' in 's3://snaps/team/ws'" "saying so"

# gs:// is the same S3 code path with another endpoint (Cloud Storage's XML API, HMAC keys).
GS="gs://snaps/gcs?endpoint=$SBX_TEST_S3_ENDPOINT&key_env=SNAP_KEY&secret_env=SNAP_SECRET"
run "$SBX" snapshot push "$ref" --store "$GS"
expect_rc 0 "push to gs:// (endpoint pointed at s3rver)"
run in_fresh 8 "$SBX" snapshot pull "${ref:0:19}" --store "$GS"
expect_rc 0 "and pull from it"

# A pull of a snapshot the local store has costs no download.
run in_fresh 1 "$SBX" snapshot pull "$ref" --store "$S3" --json
expect_in "$T/out" '"transferred": 0' "a second pull downloads nothing"

# A tampered object is refused naming the blob; the store stays as it was.
blob=$(ls "$OBJ/blobs"/*/ | grep '_S3rver_object$' | head -1)
bhex=${blob%%.*}
bfile=$(find "$OBJ/blobs" -name "$blob")
cp "$bfile" "$T/blob.orig"
printf 'X' | dd of="$bfile" bs=1 seek=0 conv=notrunc 2>/dev/null
run in_fresh 2 "$SBX" snapshot pull "$ref" --store "$S3"
expect_rc 1 "a pull with a tampered blob fails"
expect_in "$T/err" "blob '${bhex:0:12}' in 's3://snaps/team/ws' is corrupt" "the error names the blob and the store"
run in_fresh 2 "$SBX" snapshot ls
expect_not_in "$T/out" "${ref:0:19}" "the snapshot did not enter the local store"
left=$(find "$T/fresh-2/sbx/snapshots/blobs" "$T/fresh-2/sbx/snapshots/packs" "$T/fresh-2/sbx/snapshots/tmp" -type f 2>/dev/null | wc -l)
expect_eq "$left" 0 "no blob of the failed pull is left in the local store"
cp "$T/blob.orig" "$bfile"

# A blob the bucket lost.
mv "$bfile" "$T/blob.lost"
run in_fresh 3 "$SBX" snapshot pull "$ref" --store "$S3"
expect_rc 1 "a pull with a lost blob fails"
expect_in "$T/err" "blob '${bhex:0:12}' in 's3://snaps/team/ws' is missing (the bucket lost it)" "the error says the bucket lost it"
mv "$T/blob.lost" "$bfile"

# Bad credentials and a missing bucket, before anything is sent.
run env SNAP_KEY=nobody "$SBX" snapshot push "$ref" --store "$S3"
expect_rc 1 "a push with an unknown key fails"
expect_in "$T/err" "cannot push '$ref' to 's3://snaps/team/ws': snapshot store 's3://snaps/team/ws': access denied (HTTP 403): check the credentials" "bad key: access denied, check the credentials"
run "$SBX" snapshot push "$ref" --store "s3://nope?endpoint=$SBX_TEST_S3_ENDPOINT&key_env=SNAP_KEY&secret_env=SNAP_SECRET"
expect_in "$T/err" "the bucket 'nope' does not exist" "a missing bucket is named"
run env -u SNAP_SECRET "$SBX" snapshot ls --store "$S3"
expect_in "$T/err" "the variable 'SNAP_SECRET' is not set" "a reference to an unset variable is refused"
run "$SBX" snapshot push "$ref" --store "s3://snaps?endpoint=http://127.0.0.1:9&key_env=SNAP_KEY&secret_env=SNAP_SECRET"
expect_rc 1 "a store that does not answer fails"
expect_in "$T/err" "s3://snaps" "naming the store"

# A push cut short (a blob cannot be read) leaves no header, so nothing names a missing blob.
# (Over 256 KiB, so that the blob is a file of its own, not in a pack.)
run "$SBX" sandbox exec "$id" -- sh -c 'head -c 300000 /dev/urandom > /workspace/fresh.bin'
run "$SBX" sandbox snapshot "$id"
ref3=$(cat "$T/out")
fhex=$("$SBX" snapshot ls-files --json "$ref3" | python3 -c 'import json,sys; print([e["sha256"] for e in json.load(sys.stdin) if e["path"]=="fresh.bin"][0])')
chmod u+w "$SBX_SNAPSHOTS/blobs/${fhex:0:2}"
mv "$SBX_SNAPSHOTS/blobs/${fhex:0:2}/$fhex" "$T/fresh.blob"
run "$SBX" snapshot push "$ref3" --store "$S3"
expect_rc 1 "a push that cannot read a blob fails"
if [ ! -e "$OBJ/headers/${ref3#sha256:}.json._S3rver_object" ] && [ ! -e "$OBJ/trees/${ref3#sha256:}.json._S3rver_object" ]; then
    ok "the failed push wrote neither the tree nor the header"; else not_ok "the failed push wrote neither the tree nor the header"; fi
run "$SBX" snapshot ls --store "$S3"
expect_not_in "$T/out" "${ref3:0:19}" "ls does not show the incomplete snapshot"
mv "$T/fresh.blob" "$SBX_SNAPSHOTS/blobs/${fhex:0:2}/$fhex"

# The network lost in the middle of a push (a proxy that cuts every upload after the second):
# the push fails, no header names the blobs that did not arrive, and the next push sends only
# those.
"$SBX" sandbox exec "$id" -- sh -c 'mkdir /workspace/cut && for i in 1 2 3 4 5 6; do head -c 20000 /dev/urandom > /workspace/cut/$i; done' >/dev/null 2>&1
run "$SBX" sandbox snapshot "$id"
ref4=$(cat "$T/out")
missing() { # how many of ref4's blobs the bucket lacks
    "$SBX" snapshot ls-files --json "$ref4" | python3 -c 'import json,os,sys
d=sys.argv[1]; s={e["sha256"] for e in json.load(sys.stdin) if e["type"]=="file"}
print(sum(not os.path.exists("%s/blobs/%s/%s._S3rver_object" % (d, h[:2], h)) for h in s))' "$OBJ"
}
before=$(missing)
python3 "$STORAGE_DIR/cut-proxy.py" "$SBX_TEST_S3_ENDPOINT" 2 "$T/proxy.port" </dev/null >"$T/proxy.log" 2>&1 &
PROXY_PID=$!
for i in $(seq 1 100); do [ -s "$T/proxy.port" ] && break; sleep 0.1; done
CUT="s3://snaps/team/ws?endpoint=http://127.0.0.1:$(cat "$T/proxy.port")&key_env=SNAP_KEY&secret_env=SNAP_SECRET"
run "$SBX" snapshot push "$ref4" --store "$CUT"
expect_rc 1 "a push whose connection is cut fails"
expect_in "$T/err" "cannot push '$ref4' to 's3://snaps/team/ws': PUT 's3://snaps/team/ws/blobs/" "naming the upload that failed"
if [ ! -e "$OBJ/headers/${ref4#sha256:}.json._S3rver_object" ] && [ ! -e "$OBJ/trees/${ref4#sha256:}.json._S3rver_object" ]; then
    ok "the cut push left no tree and no header in the bucket"; else not_ok "the cut push left no tree and no header in the bucket"; fi
after=$(missing)
expect_eq "$((before - after))" 2 "the two uploads that went through are in the bucket ($before missing before)"
kill "$PROXY_PID" 2>/dev/null; wait "$PROXY_PID" 2>/dev/null; PROXY_PID=
run "$SBX" snapshot push "$ref4" --store "$S3" --json
expect_rc 0 "the push again, on a working network"
expect_in "$T/out" "\"transferred\": $after" "it uploads only the blobs the cut push did not"
run in_fresh 7 "$SBX" snapshot pull "$ref4" --store "$S3"
expect_rc 0 "and the snapshot pulls whole"

# Azure Blob on Azurite: Shared Key by reference, then a SAS.
SAS=$(python3 - "$SBX_TEST_AZURE_ACCOUNT" "$SBX_TEST_AZURE_KEY" <<'PY'
import base64, hashlib, hmac, sys, urllib.parse
acct, key = sys.argv[1:3]
f = dict(sv="2019-02-02", ss="b", srt="sco", sp="rwdlacup", se="2099-01-01T00:00:00Z", spr="https,http")
s = "\n".join([acct, f["sp"], f["ss"], f["srt"], "", f["se"], "", f["spr"], f["sv"], ""])
f["sig"] = base64.b64encode(hmac.new(base64.b64decode(key), s.encode(), hashlib.sha256).digest()).decode()
print(urllib.parse.urlencode(f))
PY
)
curl -sf -X PUT -H 'Content-Length: 0' "$SBX_TEST_AZURE_ENDPOINT/snaps?restype=container&$SAS" >/dev/null ||
    { echo "Bail out! cannot make the container"; exit 1; }
export AZ_KEY=$SBX_TEST_AZURE_KEY
AZ="azure://$SBX_TEST_AZURE_ACCOUNT/snaps/team?endpoint=$SBX_TEST_AZURE_ENDPOINT&key_env=AZ_KEY"
run "$SBX" snapshot push "$ref" --store "$AZ"
expect_rc 0 "push to Azurite with the account key"
expect_in "$T/err" "3 of 3 blobs uploaded" "all three blobs go up"
run "$SBX" snapshot push "$ref" --store "$AZ"
expect_in "$T/err" "0 of 3 blobs uploaded" "the second push to Azurite uploads none"
run in_fresh 4 "$SBX" sandbox create --snapshot "$ref" --store "$AZ"
expect_rc 0 "create from Azurite under a fresh XDG_STATE_HOME"
id4=$(cat "$T/out")
run in_fresh 4 "$SBX" sandbox exec "$id4" -- sh -c 'cat /workspace/src/a.txt; sha256sum /workspace/big.bin'
expect_in "$T/out" "remote snapshot" "the sandbox restored from Azurite has the file"
expect_in "$T/out" "$sum" "and the same large file"
in_fresh 4 "$SBX" sandbox rm "$id4" >/dev/null 2>&1
run in_fresh 5 env AZURE_STORAGE_SAS_TOKEN="$SAS" "$SBX" snapshot pull "${ref:0:19}" --store "azure://$SBX_TEST_AZURE_ACCOUNT/snaps/team?endpoint=$SBX_TEST_AZURE_ENDPOINT"
expect_rc 0 "pull from Azurite with a SAS instead of the key"
run env AZ_KEY="$(printf 'not the key' | base64)" "$SBX" snapshot ls --store "$AZ"
expect_rc 1 "a wrong account key fails"
expect_in "$T/err" "access denied (HTTP 403, AuthorizationFailure): check the credentials" "Azure: access denied, check the credentials"

# sbx run: --snapshot-out store pushes what the run leaves; a run on a fresh state directory
# starts from it with --snapshot REF --store URL (the coding example, offline).
EX="$SBX_SRCDIR/examples/coding-task"
run env -u OPENAI_BASE_URL -u OPENAI_API_KEY "$SBX" run --snapshot-out store --store "$S3" \
    --trace "$T/run-trace.json" \
    -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" "Do the task in TASK.md."
expect_rc 0 "run --snapshot-out store --store URL"
rref=$(sed -n 's/^snapshot \(sha256:[0-9a-f]*\) .*/\1/p' "$T/err")
expect_in "$T/err" "pushed ${rref:0:19} to 's3://snaps/team/ws'" "the run's snapshot is pushed when it ends"
expect_in "$T/run-trace.json" "snapshot" "the run wrote its trace (searched for credentials below)"
run in_fresh 6 env -u OPENAI_BASE_URL -u OPENAI_API_KEY "$SBX" run --json --snapshot "${rref:0:19}" \
    --store "$S3" -m "replay:$EX/followup.jsonl" -a "$EX/agent.yaml" "Add a test for the mean of a single value."
expect_rc 0 "a run on a fresh state directory from the bucket's snapshot"
expect_in "$T/out" "return sum(values) / len(values)" "it sees the first run's fix"
expect_in "$T/err" "pulled ${rref:0:19} from 's3://snaps/team/ws'" "pulled first"

# Many blobs (a thousand and more): one listing of the bucket's blobs instead of a HEAD each.
# Counted at a logging proxy: on Azurite the listing answers (no HEAD for any blob, the second
# push uploads nothing); s3rver cannot page a listing of more than 1000 keys, so its second push
# falls back to a HEAD per blob and still uploads nothing.
"$SBX" sandbox exec "$id" -- sh -c 'mkdir /workspace/many && i=0 && while [ $i -lt 1000 ]; do echo "file $i" > /workspace/many/$i; i=$((i + 1)); done' >/dev/null 2>&1
run "$SBX" sandbox snapshot "$id"
ref5=$(cat "$T/out")
start_proxy() { # start_proxy UPSTREAM: a proxy that cuts nothing, logging to $T/requests
    rm -f "$T/proxy.port" "$T/requests"
    python3 "$STORAGE_DIR/cut-proxy.py" "$1" 1000000 "$T/proxy.port" "$T/requests" </dev/null >"$T/proxy.log" 2>&1 &
    PROXY_PID=$!
    for i in $(seq 1 100); do [ -s "$T/proxy.port" ] && break; sleep 0.1; done
}
stop_proxy() { kill "$PROXY_PID" 2>/dev/null; wait "$PROXY_PID" 2>/dev/null; PROXY_PID=; }
count() { grep -c "^$1 .*/blobs/" "$T/requests"; } # requests of method $1 on blobs
start_proxy "$SBX_TEST_AZURE_ENDPOINT"
AZP="azure://$SBX_TEST_AZURE_ACCOUNT/snaps/team?endpoint=http://127.0.0.1:$(cat "$T/proxy.port")/$SBX_TEST_AZURE_ACCOUNT&key_env=AZ_KEY"
run "$SBX" snapshot push "$ref5" --store "$AZP" --json
expect_rc 0 "push of a thousand files to Azurite"
expect_eq "$(count HEAD)" 0 "no blob is asked for one by one (the listing said)"
expect_eq "$(count PUT)" "$(sed -n 's/.*"transferred": \([0-9]*\).*/\1/p' "$T/out")" "one PUT per blob uploaded"
: >"$T/requests"
run "$SBX" snapshot push "$ref5" --store "$AZP" --json
expect_in "$T/out" '"transferred": 0' "the second push uploads nothing"
expect_eq "$(count HEAD)/$(count PUT)" "0/0" "and sends no request per blob"
stop_proxy
run in_fresh 10 "$SBX" snapshot pull "$ref5" --store "$AZ"
expect_rc 0 "the thousand-file snapshot pulls whole from Azurite"
start_proxy "$SBX_TEST_S3_ENDPOINT"
S3P="s3://snaps/team/ws?endpoint=http://127.0.0.1:$(cat "$T/proxy.port")&key_env=SNAP_KEY&secret_env=SNAP_SECRET"
run "$SBX" snapshot push "$ref5" --store "$S3P"
expect_rc 0 "push of a thousand files to s3rver"
: >"$T/requests"
run "$SBX" snapshot push "$ref5" --store "$S3P" --json
expect_rc 0 "a second push to s3rver, whose listing of the blobs cannot page"
expect_in "$T/out" '"transferred": 0' "uploads nothing"
if [ "$(count HEAD)" -ge 1000 ] && [ "$(count PUT)" = 0 ]; then ok "asking blob by blob instead"; else
    not_ok "asking blob by blob instead"; diag "HEAD $(count HEAD), PUT $(count PUT)"; fi
stop_proxy

# No credential in any file of the state directories (stores, records, workspaces, runtime) or
# in the run's trace.
leaks=$(grep -rlF -e "$SBX_TEST_AZURE_KEY" -e "${SAS##*sig=}" "$T/state" "$T"/fresh-* "$SBX_SNAPSHOTS" "$T/run-trace.json" \
    "$XDG_RUNTIME_DIR" "$SBX_WORKSPACES" "$SBX_RECORDS" 2>/dev/null)
leaks3=$(grep -rlw -e "$SBX_TEST_S3_SECRET_KEY" "$T/state" "$T"/fresh-* "$SBX_SNAPSHOTS" "$T/run-trace.json" "$XDG_RUNTIME_DIR" "$SBX_RECORDS" 2>/dev/null)
if [ -z "$leaks$leaks3" ]; then ok "no credential in the state directories"; else
    not_ok "no credential in the state directories"; diag $leaks $leaks3; fi
"$SBX" sandbox rm "$id" >/dev/null 2>&1
done_testing
