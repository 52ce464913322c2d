#!/usr/bin/env bash
# The fake over HTTPS (its own certificate, trusted through NODE_EXTRA_CA_CERTS): the SDK's
# core path (create, commands, connect, files, kill) works the same.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$E2B_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

e2b_sdk
command -v openssl >/dev/null || skip_all "openssl is missing"
mkdir -m 0700 "$T/probe" "$T/probe/run"
printf 'version: 1\nroot: /home/user\nusers: [user]\n' >"$T/probe/m.yaml"
probe() { env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
    SBX_SNAPSHOTS="$T/probe/snap" "$SBX" "$@"; }
if ! id=$(probe sandbox create --manifest "$T/probe/m.yaml" 2>"$T/probe/err"); then
    skip_all "sbx cannot create sandboxes here: $(tail -1 "$T/probe/err")"
fi
probe sandbox rm "$id" >/dev/null 2>&1

mkdir "$fake"
"$E2B_HERE/fake.sh" start "$fake" --tls || { not_ok "the fake starts with TLS"; done_testing; exit; }
set -a
. "$fake/env"
set +a
case $E2B_API_URL$E2B_SANDBOX_URL in
https://*https://*) ok "both URLs are https" ;;
*) not_ok "both URLs are https"; diag "$E2B_API_URL $E2B_SANDBOX_URL" ;;
esac
node "$E2B_HERE/sdk-test.mjs" --quick >"$T/results" 2>"$T/node.err"
expect_eq "$?" 0 "the SDK script exits 0"
e2b_tap "$T/results"
[ "$e2b_results" -ge 15 ] && ok "the SDK script ran its checks ($e2b_results)" ||
    { not_ok "the SDK script ran its checks"; diag "only $e2b_results" "$(tail -5 "$T/node.err")"; }
# The same port spoken to in plain HTTP gets no answer.
plain=$(python3 -c 'import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1] + "/health", timeout=10).status)
except Exception as e:
    print(type(e).__name__)' "${E2B_API_URL/https/http}")
case $plain in
[0-9]*) not_ok "plain HTTP is not served"; diag "status $plain" ;;
*) ok "plain HTTP is not served ($plain)" ;;
esac
"$E2B_HERE/fake.sh" stop "$fake"
[ -e "$FAKE_E2B_STATE" ] && not_ok "its state directory is gone" || ok "its state directory is gone"
done_testing
