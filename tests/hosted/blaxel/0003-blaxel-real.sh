#!/usr/bin/env bash
# Blaxel's npm client against the real Blaxel service, when BL_API_KEY_REAL and
# BL_WORKSPACE_REAL are set (and BL_REGION_REAL, default us-pdx-1): sdk-test.mjs without the
# fake's knobs and previews, so that what the fake answers is checked against what Blaxel
# answers (and whether its API takes a plain Authorization: Bearer header). It makes one
# sandbox and deletes it. Skipped, saying so, otherwise: no test sends traffic off this machine
# unless asked to with a real key.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

cleanup() { rm -rf "$T"; }
trap cleanup EXIT

[ -n "${BL_API_KEY_REAL:-}" ] && [ -n "${BL_WORKSPACE_REAL:-}" ] ||
    skip_all "BL_API_KEY_REAL and BL_WORKSPACE_REAL are not set (the real Blaxel service is used only with a real key)"
blaxel_sdk

(cd "$T" && HOME=$T env -u FAKE_BLAXEL_URL -u BL_API_URL -u BL_RUN_URL BL_API_KEY="$BL_API_KEY_REAL" \
    BL_WORKSPACE="$BL_WORKSPACE_REAL" BL_REGION="${BL_REGION_REAL:-us-pdx-1}" DO_NOT_TRACK=1 \
    node "$BLAXEL_HERE/sdk-test.mjs") >"$T/results" 2>"$T/node.err"
node_rc=$?
blaxel_tap "$T/results"
expect_eq "$node_rc" 0 "the SDK script exits 0 against the real service"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"
done_testing
