#!/usr/bin/env bash
# Install @cloudflare/sandbox (the version tests/hosted/cloudflare/lib.sh pins) into the tests'
# npm cache, ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}, unless it is there: scripts/check runs
# this once before the tests, which only read it. A test run alone installs it (lib.sh).
set -u
CLOUDFLARE_SDK_VERSION=$(sed -n 's/^CLOUDFLARE_SDK_VERSION=//p' "$(dirname "$0")/lib.sh")
dir=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/cloudflare-sandbox-$CLOUDFLARE_SDK_VERSION
command -v node >/dev/null && command -v npm >/dev/null || { echo "install-sdk.sh: node or npm is missing" >&2; exit 1; }
have() { [ "$(node -p "require('$dir/node_modules/@cloudflare/sandbox/package.json').version" 2>/dev/null)" = "$CLOUDFLARE_SDK_VERSION" ]; }
have && exit 0
mkdir -p "$dir"
(
    flock 9
    have || npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@cloudflare/sandbox@$CLOUDFLARE_SDK_VERSION" >&2
) 9>"$dir.lock"
have
