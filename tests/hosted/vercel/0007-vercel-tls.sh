#!/usr/bin/env bash
# sbx's vercel provider over HTTPS: the fake Vercel service with a self-signed certificate,
# trusted through the provider's ca_file option (a locator: later by-id commands find it in
# sbx's record). Without it the certificate is refused, saying so.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$VERCEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
vercel_fake_start "$fake" --tls
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" \
    SBX_RECORDS="$T/me/records"

case $VERCEL_API_URL in https://*) ok "the fake serves HTTPS" ;; *) not_ok "the fake serves HTTPS" ;; esac
run "$SBX" sandbox create --provider vercel
expect_rc 1 "an untrusted certificate is refused"
expect_in "$T/err" "certificate" "saying it is the certificate"
run "$SBX" sandbox create --provider vercel -o ca_file="$fake/cert.pem"
expect_rc 0 "with ca_file the sandbox is made"
id=$(tail -1 "$T/out")
run "$SBX" sandbox exec "$id" -- sh -c 'echo over tls; exit 4'
expect_rc 4 "a command runs over HTTPS (exit status 4)"
expect_eq "$(cat "$T/out")" "over tls" "with its output"
printf 'tls bytes\n' >"$T/f"
run "$SBX" sandbox cp "$T/f" "$id:f"
run "$SBX" sandbox exec "$id" -- cat f
expect_eq "$(cat "$T/out")" "tls bytes" "a file goes up and is read"
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "a snapshot comes down"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
expect_eq "$(fake_stat sandboxes)" 0 "nothing is left at the service"
done_testing
