#!/usr/bin/env bash
# The provider conformance suite (tests/conformance/test-provider.c) with the cloudflare provider
# against the fake Sandbox Bridge: every case runs but those of what cloudflare declares it
# cannot do (a terminal, host workspaces, stop and start, mounts, stats, logs, a
# listing), which the suite skips with the reason.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"
: "${SBX_CONFORM_EXE:?SBX_CONFORM_EXE must name tests/conformance/test-provider}"

fake=$T/fake
cleanup() {
    "$CF_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
cf_fake_start "$fake"

SBX_CONFORM_PROVIDER=cloudflare SBX_CONFORM_OPTIONS='{}' SBX_SUPERVISOR="$(dirname "$SBX")/sbx-supervisor" \
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
expect_eq "$status" 0 "the conformance suite passes with --provider cloudflare"
[ "$status" = 0 ] || diag "$(tail -20 "$T/stderr")"
grep -q '^1\.\.' "$T/tap" && ok "it ran all its cases" || not_ok "it ran all its cases"
skips=$(grep -c '# SKIP' "$T/tap")
expect_eq "$(grep '# SKIP' "$T/tap" | sed 's/.*# SKIP //' | sort | tr '\n' ';')" \
    "provider 'cloudflare' does not support host-workspace;provider 'cloudflare' does not support logs;provider 'cloudflare' does not support mounts;provider 'cloudflare' does not support pty;provider 'cloudflare' does not support stats;provider 'cloudflare' does not support stop-start;provider 'cloudflare' lists no sandboxes: the Sandbox Bridge lists no sandboxes: sbx's records find them;" \
    "only what cloudflare declares unsupported is skipped ($skips)"
expect_eq "$(cf_stat containers)" 0 "no container is left at the worker"
done_testing
