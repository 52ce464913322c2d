#!/usr/bin/env bash
# Install E2B's npm SDK (the version tests/hosted/e2b/lib.sh pins) into the tests' npm cache,
# ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}, unless it is there: scripts/check runs this once
# before the tests, which then run in parallel, as root and as the unprivileged user, and only
# read it. A test run alone installs it itself (lib.sh, e2b_sdk).
set -u
E2B_SDK_VERSION=$(sed -n 's/^E2B_SDK_VERSION=//p' "$(dirname "$0")/lib.sh")
dir=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/e2b-$E2B_SDK_VERSION
command -v node >/dev/null && command -v npm >/dev/null || { echo "install-sdk.sh: node or npm is missing" >&2; exit 1; }
have() { [ "$(node -p "require('$dir/node_modules/e2b/package.json').version" 2>/dev/null)" = "$E2B_SDK_VERSION" ]; }
have && exit 0
mkdir -p "$dir"
(
    flock 9
    have || npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "e2b@$E2B_SDK_VERSION" >&2
) 9>"$dir.lock"
have
