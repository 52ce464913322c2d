#!/usr/bin/env bash
# sbx's blaxel provider against the fake Blaxel service over HTTPS (a certificate made for the
# test): the certificate is refused until the ca_file option names it; then create, a command,
# a file in and out, a snapshot restored on local, and rm.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip_all "openssl is missing (it makes the fake's certificate)"

fake=$T/fake
cleanup() {
    if [ -d "$T/me/run" ]; then
        for id in $("$SBX" sandbox ps --all -q 2>/dev/null); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    fi
    "$BLAXEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
blaxel_fake_start "$fake" --tls
ca=$NODE_EXTRA_CA_CERTS
unset NODE_EXTRA_CA_CERTS
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"

run "$SBX" sandbox create --provider blaxel
expect_rc 1 "an untrusted certificate fails the create"
expect_in "$T/err" "certificate" "naming the certificate"
expect_eq "$(NODE_EXTRA_CA_CERTS=$ca blaxel_live)" 0 "and makes no sandbox"
run "$SBX" sandbox create --provider blaxel -o ca_file="$ca"
expect_rc 0 "with ca_file naming it, a sandbox is made"
id=$(tail -1 "$T/out")
run "$SBX" sandbox exec "$id" -- sh -c 'echo over https; echo err >&2; exit 4'
expect_eq "$rc|$(cat "$T/out")|$(cat "$T/err")" "4|over https|err" "a command's output, stderr and status"
printf 'tls file\n' >"$T/f.txt"
run "$SBX" sandbox cp "$T/f.txt" "$id:f.txt"
run "$SBX" sandbox cp "$id:f.txt" "$T/g.txt"
blaxel_same "$T/f.txt" "$T/g.txt" "a file in and out"
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "a snapshot"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
lid=$(tail -1 "$T/out")
run "$SBX" sandbox exec "$lid" -- cat f.txt
expect_eq "$(cat "$T/out")" "tls file" "restores on local"
"$SBX" sandbox rm "$lid" >/dev/null 2>&1
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
expect_eq "$(NODE_EXTRA_CA_CERTS=$ca blaxel_live)" 0 "deletes it at the service"
done_testing
