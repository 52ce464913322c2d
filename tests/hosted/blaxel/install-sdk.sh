#!/usr/bin/env bash
# Install Blaxel's npm client (the version tests/hosted/blaxel/lib.sh pins) into the tests' npm
# cache, ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}, unless it is there: scripts/check runs this
# once before the tests, which then only read it. A test run alone installs it itself (lib.sh).
set -u
BLAXEL_SDK_VERSION=$(sed -n 's/^BLAXEL_SDK_VERSION=//p' "$(dirname "$0")/lib.sh")
dir=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/blaxel-$BLAXEL_SDK_VERSION
command -v node >/dev/null && command -v npm >/dev/null || { echo "install-sdk.sh: node or npm is missing" >&2; exit 1; }
have() { [ "$(node -p "require('$dir/node_modules/@blaxel/core/package.json').version" 2>/dev/null)" = "$BLAXEL_SDK_VERSION" ]; }
have && exit 0
mkdir -p "$dir"
(
    flock 9
    have || npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@blaxel/core@$BLAXEL_SDK_VERSION" >&2
) 9>"$dir.lock"
have
