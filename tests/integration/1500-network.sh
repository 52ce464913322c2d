#!/usr/bin/env bash
# Network of isolated sandboxes: mode allow:<domains> through the host-side proxy, mode none,
# and port forwards from the host into the sandbox's network namespace. No traffic leaves this
# machine: the only upstream is a local server, reached through test names that
# $SBX_TEST_PROXY_HOSTS maps to 127.0.0.1 (a test-only switch that also lets the proxy connect
# to loopback), and every refused name is refused before any lookup or connection.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

command -v curl >/dev/null || skip_all "curl is not installed"
PY=$(command -v python3) || skip_all "python3 is not installed"

# The host upstream: a local HTTP server on a free loopback port.
mkdir -p "$T/www"
echo "upstream-marker-7d41" >"$T/www/index.html"
"$PY" - "$T/www" >"$T/up.port" 2>"$T/up.log" <<'EOF' &
import functools, http.server, sys
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
print(s.server_address[1], flush=True)
s.serve_forever()
EOF
UP_PID=$!
cleanup() {
    kill "$UP_PID" 2>/dev/null
    wait "$UP_PID" 2>/dev/null
    sandbox_cleanup
}
trap cleanup EXIT
wait_until test -s "$T/up.port" || { echo "Bail out! the upstream server did not start"; exit 1; }
UP=$(cat "$T/up.port")

export SBX_TEST_PROXY_HOSTS="up.test=127.0.0.1,sub.up.test=127.0.0.1,meta.test=169.254.169.254,lan.test=10.1.2.3"

if ! "$SBX" sandbox create --network allow:up.test >"$T/pre" 2>&1; then
    if grep -q "namespace" "$T/pre"; then skip_all "$(grep -m1 "namespace" "$T/pre")"; fi
fi
"$SBX" sandbox rm "$(cat "$T/pre")" >/dev/null 2>&1

# ---- creation errors
run "$SBX" sandbox create --network allow:
expect_rc 2 "allow: without domains is a usage error"
expect_in "$T/err" "wants domains" "the missing domains are named"
run "$SBX" sandbox create --network allow:'*'
expect_rc 1 "a '*' pattern is refused"
expect_in "$T/err" "allow-list pattern '*'" "the bad pattern is named"
run "$SBX" sandbox create --network allow:'*.com'
expect_rc 1 "a wildcard over a top-level domain is refused"
expect_in "$T/err" "too wide" "and why"
run "$SBX" sandbox create --isolation none --network allow:up.test
expect_rc 1 "allow without isolation is refused"
expect_in "$T/err" "network 'allow' needs isolation" "the reason is given"
run "$SBX" sandbox create --allow-port 8080
expect_rc 1 "allowed ports without mode allow are refused"
expect_in "$T/err" "need network 'allow'" "the reason is given"
run "$SBX" sandbox create --port-bind localhost
expect_rc 1 "a port bind address that is not an IP address is refused"
expect_in "$T/err" "port bind address 'localhost' is not an IP address" "the address is named"

# ---- mode allow
run "$SBX" sandbox create --network 'allow:up.test,meta.test,lan.test,*.up.test' --allow-port "$UP" \
    --allow-port 80 --allow-port 443
expect_rc 0 "create a sandbox with network allow"
ID=$(cat "$T/out")

run "$SBX" sandbox exec "$ID" -- sh -c 'env | sort'
expect_in "$T/out" "HTTP_PROXY=http://127.0.0.1:3128" "HTTP_PROXY is set inside"
expect_in "$T/out" "https_proxy=http://127.0.0.1:3128" "https_proxy is set inside"
expect_in "$T/out" "NO_PROXY=localhost,127.0.0.1,::1" "NO_PROXY is set inside"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 "http://up.test:$UP/index.html"
expect_rc 0 "curl to an allowed name works"
expect_in "$T/out" "upstream-marker-7d41" "the upstream's page comes back through the proxy"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 -p "http://up.test:$UP/index.html"
expect_in "$T/out" "upstream-marker-7d41" "a CONNECT tunnel to an allowed name works"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 --noproxy "" "http://2130706433:$UP/index.html"
expect_in "$T/out" "the domain '127.0.0.1' is not in the sandbox's allow list" \
    "an IPv4 literal in decimal form is normalized and checked against the list"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 "http://sub.up.test:$UP/index.html"
expect_in "$T/out" "upstream-marker-7d41" "a name below a wildcard pattern works"

if "$SBX" sandbox exec "$ID" -- sh -c 'command -v python3' >/dev/null 2>&1; then
    run "$SBX" sandbox exec "$ID" -- python3 -c "import urllib.request as u; print(u.urlopen('http://up.test:$UP/index.html', timeout=10).read().decode())"
    expect_rc 0 "python3 urllib through the proxy works"
    expect_in "$T/out" "upstream-marker-7d41" "urllib reads the upstream's page"
else
    ok "# SKIP no python3 inside the sandbox"
    ok "# SKIP no python3 inside the sandbox"
fi

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 -w '\n%{http_code}\n' http://denied.test/
expect_in "$T/out" "403" "a name outside the allow list gets 403"
expect_in "$T/out" "the domain 'denied.test' is not in the sandbox's allow list (allowed: up.test, meta.test, lan.test, *.up.test)" \
    "the 403 body names the rule and the allow list"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 -o /dev/null -w '%{http_code}' https://denied.test/
expect_in "$T/err" "CONNECT tunnel failed, response 403" "a CONNECT to a name outside the list gets 403"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 -w '\n%{http_code}\n' http://meta.test/latest/meta-data/
expect_in "$T/out" "403" "an allowed name resolving to the metadata address gets 403"
expect_in "$T/out" "address 169.254.169.254 is in a refused range: cloud metadata" "the body names the range"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 http://lan.test/
expect_in "$T/out" "address 10.1.2.3 is in a refused range: private (RFC 1918, 10.0.0.0/8)" \
    "an allowed name resolving to a private address is refused"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 http://up.test:22/
expect_in "$T/out" "port 22 is not allowed" "a port outside the allowed ports is refused"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 10 -H 'Host: evil.example' "http://up.test:$UP/index.html"
expect_in "$T/out" "upstream-marker-7d41" "the Host header does not decide where a request goes"

run "$SBX" sandbox exec "$ID" -- curl -sS -m 5 --noproxy '*' "http://127.0.0.1:$UP/index.html"
expect_not_in "$T/out" "upstream-marker-7d41" "without the proxy nothing gets out of an allow sandbox"
run "$SBX" sandbox exec "$ID" -- sh -c 'cat /proc/net/dev'
expect_not_in "$T/out" "eth" "the sandbox's namespace has no interface but loopback"

"$SBX" sandbox rm "$ID" >/dev/null 2>&1

# ---- mode none and port forwards
run "$SBX" sandbox create --port 8000 --port 8001
expect_rc 0 "create a sandbox with network none"
ID=$(cat "$T/out")
run "$SBX" sandbox exec "$ID" -- sh -c 'env'
expect_not_in "$T/out" "HTTP_PROXY" "mode none sets no proxy"
run "$SBX" sandbox exec "$ID" -- curl -sS -m 5 "http://127.0.0.1:$UP/index.html"
expect_not_in "$T/out" "upstream-marker-7d41" "with network none nothing gets out"
run "$SBX" sandbox exec "$ID" -- curl -sS -m 5 -x http://127.0.0.1:3128 "http://up.test:$UP/index.html"
expect_not_in "$T/out" "upstream-marker-7d41" "mode none has no proxy either"

run "$SBX" sandbox port "$ID" 8000
expect_rc 1 "a port nothing listens on does not resolve"
expect_in "$T/err" "nothing listens on port 8000" "and says so"

# A server inside on 8000 (python3's when the sandbox has it, else a shell loop with nc is not
# portable: skip).
if "$SBX" sandbox exec "$ID" -- sh -c 'command -v python3' >/dev/null 2>&1; then
    "$SBX" sandbox exec "$ID" -- sh -c 'mkdir -p /tmp/www && echo inside-marker-52c9 >/tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1' 2>/dev/null &
    EXEC_PID=$!
    listening() { "$SBX" sandbox port "$ID" 8000 >/dev/null 2>&1; }
    wait_until listening
    run "$SBX" sandbox port "$ID" 8000
    expect_rc 0 "a listening port resolves"
    URL=$(cat "$T/out")
    case "$URL" in
    http://127.0.0.1:[0-9]*) ok "the URL is on the host's loopback ($URL)" ;;
    *) not_ok "the URL is on the host's loopback"; diag "got '$URL'" ;;
    esac
    run curl -sS -m 10 "$URL/index.html"
    expect_in "$T/out" "inside-marker-52c9" "the host reaches the server inside through the forward"
    run "$SBX" sandbox port "$ID" 8000
    expect_eq "$(cat "$T/out")" "$URL" "resolving again gives the same forward"
    run "$SBX" sandbox port "$ID" 8002
    expect_rc 1 "a port that is not exposed does not resolve"
    # a service on the IPv6 loopback only
    "$SBX" sandbox exec "$ID" -- sh -c 'cd /tmp/www && exec python3 -m http.server 8001 --bind ::1 >/dev/null 2>&1' 2>/dev/null &
    EXEC6_PID=$!
    listening6() { "$SBX" sandbox port "$ID" 8001 >/dev/null 2>&1; }
    wait_until listening6
    run "$SBX" sandbox port "$ID" 8001
    expect_rc 0 "a port listening on ::1 resolves"
    URL6=$(cat "$T/out")
    run curl -sS -m 10 "$URL6/index.html"
    expect_in "$T/out" "inside-marker-52c9" "the forward reaches a service on ::1 inside"
    "$SBX" sandbox rm "$ID" >/dev/null 2>&1
    wait "$EXEC_PID" "$EXEC6_PID" 2>/dev/null
    run curl -sS -m 5 "$URL/index.html"
    expect_not_in "$T/out" "inside-marker-52c9" "the forward ends with the sandbox"
else
    for i in 1 2 3 4 5 6 7 8 9 10; do ok "# SKIP no python3 inside the sandbox to serve a port"; done
    "$SBX" sandbox rm "$ID" >/dev/null 2>&1
fi

done_testing
