#!/usr/bin/env bash
# sbx's runloop provider over HTTPS: the fake Runloop service with a self-signed certificate,
# trusted through the provider's ca_file option (a locator: later by-id commands find it in
# sbx's record). Without it the certificate is refused, saying so. Runloop's own npm client
# over the same HTTPS (NODE_EXTRA_CA_CERTS) first: the fake's TLS is the one the client takes.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$RUNLOOP_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
runloop_sdk
runloop_fake_start "$fake" --tls
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" \
    SBX_RECORDS="$T/me/records"

case $RUNLOOP_BASE_URL in https://*) ok "the fake serves HTTPS" ;; *) not_ok "the fake serves HTTPS" ;; esac
node --input-type=module -e "
import { createRequire } from 'node:module'
const require = createRequire(process.env.RUNLOOP_SDK_DIR + '/')
const { RunloopSDK } = require('@runloop/api-client')
const sdk = new RunloopSDK({ http2: false })
const box = await sdk.devbox.create()
const r = await box.cmd.exec('echo sdk over tls')
process.stdout.write(await r.stdout())
await box.shutdown()
" >"$T/out" 2>"$T/err"
rc=$?
expect_rc 0 "Runloop's npm client works with the fake over HTTPS"
expect_eq "$(cat "$T/out")" "sdk over tls" "(a command's output)"

run "$SBX" sandbox create --provider runloop
expect_rc 1 "an untrusted certificate is refused"
expect_in "$T/err" "certificate" "saying it is the certificate"
run "$SBX" sandbox create --provider runloop -o ca_file="$fake/cert.pem"
expect_rc 0 "with ca_file the devbox is made"
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
expect_eq "$(rl_stat live)" 0 "nothing is left at the service"
done_testing
