#!/usr/bin/env bash
# Install Vercel's npm client @vercel/sandbox (the version tests/hosted/vercel/lib.sh pins) into
# the tests' npm cache, ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}, unless it is there:
# scripts/check runs this once before the tests, which then only read it. A test run alone
# installs it itself (lib.sh, vercel_sdk).
set -u
VERCEL_SDK_VERSION=$(sed -n 's/^VERCEL_SDK_VERSION=//p' "$(dirname "$0")/lib.sh")
dir=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/vercel-sandbox-$VERCEL_SDK_VERSION
command -v node >/dev/null && command -v npm >/dev/null || { echo "install-sdk.sh: node or npm is missing" >&2; exit 1; }
have() { [ "$(node -p "require('$dir/node_modules/@vercel/sandbox/package.json').version" 2>/dev/null)" = "$VERCEL_SDK_VERSION" ]; }
have && exit 0
mkdir -p "$dir"
(
    flock 9
    have || npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@vercel/sandbox@$VERCEL_SDK_VERSION" >&2
) 9>"$dir.lock"
have
