#!/usr/bin/env bash
# The provider conformance suite (tests/conformance/test-provider.c) with the e2b provider
# against the fake E2B service: every case runs but those of what e2b declares it cannot do
# (host workspaces, storage mounts), which the suite skips with the reason. Port URLs
# (https://PORT-ID.DOMAIN) are reached through the fake, which routes them by Host as E2B's
# edge proxy does (SBX_CONFORM_PORT_PROXY).
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"
: "${SBX_CONFORM_EXE:?SBX_CONFORM_EXE must name tests/conformance/test-provider}"

fake=$T/fake
cleanup() {
    "$E2B_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
e2b_fake_start "$fake"

export SBX_CONFORM_PORT_PROXY=${E2B_SANDBOX_URL#http://}
SBX_CONFORM_PROVIDER=e2b SBX_CONFORM_OPTIONS='{}' SBX_SUPERVISOR="$(dirname "$SBX")/sbx-supervisor" \
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
expect_eq "$status" 0 "the conformance suite passes with --provider e2b"
[ "$status" = 0 ] || diag "$(tail -20 "$T/stderr")"
grep -q '^1\.\.' "$T/tap" && ok "it ran all its cases" || not_ok "it ran all its cases"
skips=$(grep -c '# SKIP' "$T/tap")
expect_eq "$(grep '# SKIP' "$T/tap" | sed 's/.*# SKIP //' | sort | tr '\n' ';')" \
    "provider 'e2b' does not support host-workspace;provider 'e2b' does not support logs;provider 'e2b' does not support mounts;provider 'e2b' does not support stats;" \
    "only what e2b declares unsupported is skipped ($skips)"
expect_eq "$(fake_stat sandboxes)" 0 "no sandbox is left at the service"
done_testing
