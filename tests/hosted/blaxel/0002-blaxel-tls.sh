#!/usr/bin/env bash
# The fake Blaxel service over HTTPS (a certificate made for the test) held to Blaxel's npm
# client: without the certificate trusted the client refuses the service; with it
# (NODE_EXTRA_CA_CERTS) every check of sdk-test.mjs passes, previews included.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$BLAXEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

blaxel_sdk
blaxel_probe
command -v openssl >/dev/null || skip_all "openssl is missing (it makes the fake's certificate)"

mkdir "$fake"
"$BLAXEL_HERE/fake.sh" start "$fake" --tls || { not_ok "the fake starts over HTTPS"; done_testing; exit; }
set -a
. "$fake/env"
set +a
case $BL_API_URL in https://*) ok "the fake's API is HTTPS" ;; *) not_ok "the fake's API is HTTPS"; diag "$BL_API_URL" ;; esac

(cd "$T" && HOME=$T NODE_EXTRA_CA_CERTS= node "$BLAXEL_HERE/sdk-test.mjs") >"$T/untrusted" 2>&1
rc=$?
[ "$rc" != 0 ] && ok "an untrusted certificate fails the client" || not_ok "an untrusted certificate fails the client"
if grep -q -i -E "certificate|self.signed" "$T/untrusted"; then ok "the failure names the certificate"; else
    not_ok "the failure names the certificate"; diag "$(tail -5 "$T/untrusted")"
fi
"$BLAXEL_HERE/fake.sh" stop "$fake"
"$BLAXEL_HERE/fake.sh" start "$fake" --tls || { not_ok "the fake starts again"; done_testing; exit; }
set -a
. "$fake/env"
set +a

(cd "$T" && HOME=$T node "$BLAXEL_HERE/sdk-test.mjs") >"$T/results" 2>"$T/node.err"
node_rc=$?
blaxel_tap "$T/results"
expect_eq "$node_rc" 0 "the SDK script exits 0 over HTTPS"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"
[ "$blaxel_results" -ge 37 ] && ok "the SDK script ran all its checks ($blaxel_results)" ||
    { not_ok "the SDK script ran all its checks"; diag "only $blaxel_results"; }
if grep -q Traceback "$FAKE_BLAXEL_LOG"; then
    not_ok "the fake logged no exception"; diag "$(grep -B3 -A25 Traceback "$FAKE_BLAXEL_LOG" | head -80)"
else ok "the fake logged no exception"; fi
"$BLAXEL_HERE/fake.sh" stop "$fake"
no_process_with_env "XDG_RUNTIME_DIR=$FAKE_BLAXEL_STATE/run" "no process of the fake's is left"
done_testing
