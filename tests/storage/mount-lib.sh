# Shared set-up for the storage mount tests (17xx). Source it after lib.sh and sandbox-lib.sh.
# Starts s3rver and Azurite (servers.sh) and gives the test an rclone config of its own
# ($RCONF, remotes "s3" and "az") to fill buckets and check what the sandbox wrote.
STORAGE_DIR="$SBX_SRCDIR/tests/storage"
[ -e /dev/fuse ] || skip_all "no /dev/fuse on this machine"
for p in rclone fusermount3 node npm; do
    if ! command -v "$p" >/dev/null; then
        echo "Bail out! $p is missing (scripts/deps.txt installs rclone and fuse3; Node.js comes with the machine)"
        exit 1
    fi
done
# Without access to /dev/fuse (a 0600 device and no root) mounts cannot work: what sbx owes then
# is a clear error naming the entry, and nothing left behind.
if [ ! -r /dev/fuse ] || [ ! -w /dev/fuse ]; then
    printf '{"entries": {"data": {"type": "s3_mount", "bucket": "b", "endpoint_url": "http://127.0.0.1:9"}}}\n' >"$T/nofuse.json"
    run "$SBX" sandbox create --manifest "$T/nofuse.json"
    if [ "$rc" != 0 ] && grep -q "entry 'data' (s3_mount): FUSE is not available to this user" "$T/err"; then
        ok "without access to /dev/fuse create fails naming the entry"; else
        not_ok "without access to /dev/fuse create fails naming the entry"; diag "$(cat "$T/err")"; fi
    nothing_left "and leaves nothing"
    diag "/dev/fuse is not readable and writable by $(id -un): mounts need it (mode 0666) without root"
    done_testing
    exit $?
fi
mount_cleanup() {
    "$STORAGE_DIR/servers.sh" stop "$T/servers" >/dev/null 2>&1
    sandbox_cleanup
}
trap mount_cleanup EXIT
if ! "$STORAGE_DIR/servers.sh" start "$T/servers" >"$T/servers.out" 2>&1; then
    echo "Bail out! cannot start the test storage servers: $(tail -3 "$T/servers.out")"
    exit 1
fi
. "$T/servers/env"
RCONF="$T/rclone.conf"
cat >"$RCONF" <<CONF
[s3]
type = s3
provider = Other
env_auth = false
access_key_id = $SBX_TEST_S3_ACCESS_KEY
secret_access_key = $SBX_TEST_S3_SECRET_KEY
endpoint = $SBX_TEST_S3_ENDPOINT
region = us-east-1
force_path_style = true
CONF
# rclone as the host side sees the storage (its own config, an empty environment: Debian's
# rclone 1.60 refuses a CA bundle variable that points nowhere).
hrclone() { env -i PATH=/usr/bin:/bin HOME="$T" rclone --config "$RCONF" --retries 1 --low-level-retries 1 "$@"; }

# FUSE mounts on the host under path $1 (none is the expected answer).
host_fuse_under() { awk -v p="$1" 'index($5, p) == 1 && $0 ~ / - fuse/' /proc/self/mountinfo; }
# Remote "az" in $RCONF: the host side's view of Azurite, an account SAS signed with the
# development key (Debian's rclone takes a custom Azure endpoint only as a SAS URL).
host_azure_remote() {
    local sas
sas=$(python3 - "$SBX_TEST_AZURE_ACCOUNT" "$SBX_TEST_AZURE_KEY" "$SBX_TEST_AZURE_ENDPOINT" <<'PY'
import base64, hashlib, hmac, sys, urllib.parse
acct, key, ep = sys.argv[1:4]
f = dict(sv="2019-02-02", ss="b", srt="sco", sp="rwdlacup", se="2099-01-01T00:00:00Z", spr="https,http")
s = "\n".join([acct, f["sp"], f["ss"], f["srt"], "", f["se"], "", f["spr"], f["sv"], ""])
f["sig"] = base64.b64encode(hmac.new(base64.b64decode(key), s.encode(), hashlib.sha256).digest()).decode()
print(ep + "?" + urllib.parse.urlencode(f))
PY
)
printf '[az]\ntype = azureblob\nsas_url = %s\n' "$sas" >>"$RCONF"
}
