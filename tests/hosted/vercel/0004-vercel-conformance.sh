#!/usr/bin/env bash
# The provider conformance suite (tests/conformance/test-provider.c) with the vercel provider
# against the fake Vercel service: every case runs but those of what vercel declares it cannot
# do (a terminal, host workspaces, storage mounts, stats, logs), which the suite skips with the
# reason. Port URLs (https://NAME-PORT.vercel.run) are reached through the fake, which routes
# them by Host as the service's edge does (SBX_CONFORM_PORT_PROXY).
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"
: "${SBX_CONFORM_EXE:?SBX_CONFORM_EXE must name tests/conformance/test-provider}"

fake=$T/fake
cleanup() {
    "$VERCEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

vercel_fake_start "$fake"
export SBX_CONFORM_PORT_PROXY=${VERCEL_API_URL#http://}
SBX_CONFORM_PROVIDER=vercel SBX_CONFORM_OPTIONS='{"exposed_ports": [8731, 7]}' \
    SBX_SUPERVISOR="$(dirname "$SBX")/sbx-supervisor" \
    "$SBX_CONFORM_EXE" >"$T/tap" 2>"$T/stderr"
status=$?
# The suite's own TAP, renumbered into this script's.
while IFS= read -r line; do
    case $line in
    "ok "*"# SKIP "*) tap_n=$((tap_n + 1)); echo "ok $tap_n # SKIP ${line#*# SKIP }" ;;
    "ok "*) ok "${line#ok * - }" ;;
    "not ok "*) not_ok "${line#not ok * - }" ;;
    "#"*) echo "$line" ;;
    "Bail out!"*) not_ok "the suite ran to its end: $line" ;;
    esac
done <"$T/tap"
expect_eq "$status" 0 "the conformance suite passes with --provider vercel"
[ "$status" = 0 ] || diag "$(tail -20 "$T/stderr")"
grep -q '^1\.\.' "$T/tap" && ok "it ran all its cases" || not_ok "it ran all its cases"
skips=$(grep -c '# SKIP' "$T/tap")
expect_eq "$(grep '# SKIP' "$T/tap" | sed 's/.*# SKIP //' | sort | tr '\n' ';')" \
    "provider 'vercel' does not support host-workspace;provider 'vercel' does not support logs;provider 'vercel' does not support mounts;provider 'vercel' does not support pty;provider 'vercel' does not support stats;" \
    "only what vercel declares unsupported is skipped ($skips)"
expect_eq "$(fake_stat sandboxes)" 0 "no sandbox is left at the service"
if [ -s "$FAKE_VERCEL_STATE/unknown-fields.log" ]; then
    not_ok "every field sent is one the fake knows"; diag "$(sort -u "$FAKE_VERCEL_STATE/unknown-fields.log")"
else ok "every field sent is one the fake knows"; fi
grep -q Traceback "$FAKE_VERCEL_LOG" && { not_ok "the fake logged no exception"; diag "$(grep -A20 Traceback "$FAKE_VERCEL_LOG" | head -40)"; } ||
    ok "the fake logged no exception"
done_testing
