#!/usr/bin/env bash
# Install the MCP servers the MCP tests run (@modelcontextprotocol/server-everything and
# server-filesystem, at the versions pinned here) into the tests' npm cache,
# ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}, unless they are there: scripts/check runs this once
# before the tests; a test run alone installs them itself (tests/mcp/lib.sh, mcp_servers).
set -u
MCP_SERVERS_VERSION=2026.8.31
dir=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/mcp-servers-$MCP_SERVERS_VERSION
command -v node >/dev/null && command -v npm >/dev/null || { echo "install-servers.sh: node or npm is missing" >&2; exit 1; }
have() {
    [ -f "$dir/node_modules/@modelcontextprotocol/server-everything/package.json" ] &&
        [ -f "$dir/node_modules/@modelcontextprotocol/server-filesystem/package.json" ]
}
have && { echo "$dir"; exit 0; }
mkdir -p "$dir"
(
    flock 9
    have || npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/server-everything@$MCP_SERVERS_VERSION" \
        "@modelcontextprotocol/server-filesystem@$MCP_SERVERS_VERSION" >&2
) 9>"$dir.lock"
have && echo "$dir"
