#!/usr/bin/env bash
# The provider conformance suite (tests/conformance/test-provider.c) with the runloop provider
# against the fake Runloop service: every case runs but those of what runloop declares it
# cannot do, which the suite skips with the reason.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"
: "${SBX_CONFORM_EXE:?SBX_CONFORM_EXE must name tests/conformance/test-provider}"

fake=$T/fake
cleanup() {
    "$RUNLOOP_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
runloop_fake_start "$fake"

# Port URLs (https://PORT-KEY.tunnel.DOMAIN) are reached through the fake, which routes them
# by Host as the service's tunnel edge does.
export SBX_CONFORM_PORT_PROXY=${RUNLOOP_BASE_URL#http://}
SBX_CONFORM_PROVIDER=runloop SBX_CONFORM_OPTIONS='{}' SBX_SUPERVISOR="$(dirname "$SBX")/sbx-supervisor" \
    "$SBX_CONFORM_EXE" >"$T/tap" 2>"$T/stderr"
status=$?
while IFS= read -r line; do
    case $line in
    "ok "*"# SKIP "*) tap_n=$((tap_n + 1)); echo "ok $tap_n # SKIP ${line#*# SKIP }" ;;
    "ok "*) ok "${line#ok * - }" ;;
    "not ok "*) not_ok "${line#not ok * - }" ;;
    "#"*) echo "$line" ;;
    "Bail out!"*) not_ok "the suite ran to its end: $line" ;;
    esac
done <"$T/tap"
expect_eq "$status" 0 "the conformance suite passes with --provider runloop"
[ "$status" = 0 ] || diag "$(tail -20 "$T/stderr")"
grep -q '^1\.\.' "$T/tap" && ok "it ran all its cases" || not_ok "it ran all its cases"
skips=$(grep -c '# SKIP' "$T/tap")
expect_eq "$(grep '# SKIP' "$T/tap" | sed 's/.*# SKIP //' | sort | tr '\n' ';')" \
    "provider 'runloop' does not support host-workspace;provider 'runloop' does not support logs;provider 'runloop' does not support mounts;provider 'runloop' does not support pty;" \
    "only what runloop declares unsupported is skipped ($skips)"
expect_eq "$(rl_stat live)" 0 "no devbox is left running at the service"
done_testing
