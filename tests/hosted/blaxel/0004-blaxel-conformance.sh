#!/usr/bin/env bash
# The provider conformance suite (tests/conformance/test-provider.c) with the blaxel provider
# against the fake Blaxel service: every case runs but those of what blaxel declares it cannot
# do, which the suite skips with the reason.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"
: "${SBX_CONFORM_EXE:?SBX_CONFORM_EXE must name tests/conformance/test-provider}"

fake=$T/fake
cleanup() {
    "$BLAXEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
blaxel_fake_start "$fake"

# Preview URLs (http://ID.preview.blaxel.test:PORT) are reached through the fake, which routes
# them by Host as Blaxel's edge does.
export SBX_CONFORM_PORT_PROXY=${FAKE_BLAXEL_URL#http://}
SBX_CONFORM_PROVIDER=blaxel SBX_CONFORM_OPTIONS='{}' SBX_SUPERVISOR="$(dirname "$SBX")/sbx-supervisor" \
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
expect_eq "$status" 0 "the conformance suite passes with --provider blaxel"
[ "$status" = 0 ] || diag "$(tail -20 "$T/stderr")"
grep -q '^1\.\.' "$T/tap" && ok "it ran all its cases" || not_ok "it ran all its cases"
skips=$(grep -c '# SKIP' "$T/tap")
expect_eq "$(grep '# SKIP' "$T/tap" | sed 's/.*# SKIP //' | sort | tr '\n' ';')" \
    "provider 'blaxel' does not support host-workspace;provider 'blaxel' does not support logs;provider 'blaxel' does not support mounts;provider 'blaxel' does not support pty;provider 'blaxel' does not support stop-start;" \
    "only what blaxel declares unsupported is skipped ($skips)"
expect_eq "$(blaxel_live)" 0 "no sandbox is left at the service"
done_testing
