#!/usr/bin/env bash
# Vercel's own npm client (@vercel/sandbox) against the fake Vercel service (fake-vercel.py),
# whose sandboxes are real sbx sandboxes: create, commands with streamed output (wait and
# detached), env/cwd/sudo, kill, files (tar.gz write, read, mkdir), a 429 retried, a wrong
# token, an unknown snapshot or runtime, a native snapshot and a sandbox made from it, get with
# resume, delete. Then nothing is left (sandboxes, processes, files).
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$VERCEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

vercel_sdk
vercel_fake_start "$fake"
node "$VERCEL_HERE/sdk-test.mjs" >"$T/results" 2>"$T/node.err"
node_rc=$?
vercel_tap "$T/results"
expect_eq "$node_rc" 0 "the client script exits 0"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"
[ "$vercel_results" -ge 25 ] && ok "the client script ran all its checks ($vercel_results)" ||
    { not_ok "the client script ran all its checks"; diag "only $vercel_results"; }
if [ -s "$FAKE_VERCEL_STATE/unknown-fields.log" ]; then
    not_ok "every field sent is one the fake knows"; diag "$(sort -u "$FAKE_VERCEL_STATE/unknown-fields.log")"
else ok "every field sent is one the fake knows"; fi
if grep -q Traceback "$FAKE_VERCEL_LOG"; then
    not_ok "the fake logged no exception"; diag "$(grep -B3 -A25 Traceback "$FAKE_VERCEL_LOG" | head -80)"
else ok "the fake logged no exception"; fi
left=$(fakestate sandbox ps --all --json | tr -d ' \n')
expect_eq "$left" "[]" "every sandbox the client deleted is gone from sbx"
"$VERCEL_HERE/fake.sh" stop "$fake"
kill -0 "$FAKE_VERCEL_PID" 2>/dev/null && not_ok "the fake has stopped" || ok "the fake has stopped"
no_process_with_env "XDG_RUNTIME_DIR=$FAKE_VERCEL_STATE/run" "no process of the fake's is left"
done_testing
