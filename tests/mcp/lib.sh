# Helpers for the MCP tests (tests/integration/414[2-3]-*.sh). Source after lib.sh.
#   mcp_servers_dir          the node_modules dir holding the npm MCP servers (installed by
#                            tests/mcp/install-servers.sh when missing), or skip_all saying why
#   mcp_workspace_copy DIR   a copy of those modules under DIR (hard links where it can, the
#                            symlinks of .bin left out) for a manifest's local_dir entry
#   start_everything_http    server-everything on Streamable HTTP at a free loopback port:
#                            sets EVERY_URL; stop_everything_http stops it
mcp_servers_dir() {
    local d
    command -v node >/dev/null || skip_all "node is not installed: the MCP tests run real npm servers"
    d=$("$SBX_SRCDIR/tests/mcp/install-servers.sh" 2>"$T/npm.err") ||
        skip_all "npm cannot install the MCP servers: $(tail -n1 "$T/npm.err")"
    MCP_NM="$d/node_modules"
}

mcp_workspace_copy() {
    mkdir -p "$1"
    cp -al "$MCP_NM" "$1/node_modules" 2>/dev/null || cp -a "$MCP_NM" "$1/node_modules"
    find "$1/node_modules" -type l -delete
}

EVERY_PID=
stop_everything_http() {
    if [ -n "$EVERY_PID" ]; then
        kill "$EVERY_PID" 2>/dev/null
        wait "$EVERY_PID" 2>/dev/null
        EVERY_PID=
    fi
}

# A free port from the kernel, then the server on it; a port taken in between fails the start,
# and it is tried again on another.
start_everything_http() {
    local port try
    for try in 1 2 3 4 5; do
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        PORT=$port node "$MCP_NM/@modelcontextprotocol/server-everything/dist/index.js" streamableHttp \
            >"$T/every.log" 2>&1 &
        EVERY_PID=$!
        if wait_until grep -q -e "listening on port" -e "Failed" "$T/every.log" &&
            grep -q "listening on port" "$T/every.log"; then
            EVERY_URL="http://127.0.0.1:$port/mcp"
            return 0
        fi
        stop_everything_http
    done
    return 1
}
