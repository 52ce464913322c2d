#!/usr/bin/env bash
# sbx node ca init / cert issue, held to openssl: the chains and purposes (`openssl verify`),
# the names and extensions (`openssl x509`), and real mutual TLS 1.3 handshakes on loopback
# between `openssl s_server` with a node's certificate and `openssl s_client` with a harness's:
# accepted with the right certificates, refused with a node certificate as a client, with a
# certificate of another CA, and with a host name the node's certificate does not carry.
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip_all "no openssl program to check the certificates with"
SRV_PID=
trap '[ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
cd "$T" || exit 1

"$SBX" node ca init ca --name "test deployment" >out 2>err
if [ $? = 0 ] && [ "$(stat -c %a ca)" = 700 ] && [ "$(stat -c %a ca/ca.key)" = 600 ]; then
    ok "ca init makes ca/ (0700) with ca.pem and ca.key (0600)"
else not_ok "ca init makes ca/ (0700) with ca.pem and ca.key (0600)"; diag "$(cat err)"; fi
grep -q '^pin:         sha256//' out && grep -Eq '^sha-256:     [0-9a-f]{64}$' out &&
    ok "ca init prints the fingerprint and the pin" || { not_ok "ca init prints the fingerprint and the pin"; diag "$(cat out)"; }
"$SBX" node ca init ca >out 2>err
[ $? = 1 ] && grep -q "already exists" err && ok "a second ca init in the folder is refused" ||
    { not_ok "a second ca init in the folder is refused"; diag "$(cat err)"; }

"$SBX" node cert issue node-a --ca ca --node --host 127.0.0.1 --host node-a.test >out 2>err &&
    "$SBX" node cert issue --harness --ca=ca harness-1 >>out 2>>err &&
    ok "a node's and a harness's certificates are issued" ||
    { not_ok "a node's and a harness's certificates are issued"; diag "$(cat err)"; }
[ "$(stat -c %a node-a.key)" = 600 ] && [ "$(stat -c %a harness-1.key)" = 600 ] &&
    ok "their keys are 0600" || not_ok "their keys are 0600"

check_verify() { # WHAT PURPOSE CERT WANT(0|1)
    openssl verify -CAfile ca/ca.pem -purpose "$2" "$3" >vout 2>&1
    local rc=$?
    if { [ "$4" = 0 ] && [ $rc = 0 ]; } || { [ "$4" = 1 ] && [ $rc != 0 ]; }; then ok "$1"
    else not_ok "$1"; diag "$(cat vout)"; fi
}
check_verify "openssl verify: the node certificate is a TLS server's" sslserver node-a.pem 0
check_verify "openssl verify: the node certificate is no TLS client's" sslclient node-a.pem 1
check_verify "openssl verify: the harness certificate is a TLS client's" sslclient harness-1.pem 0
check_verify "openssl verify: the harness certificate is no TLS server's" sslserver harness-1.pem 1
check_verify "openssl verify: the ca certificate verifies as itself" any ca/ca.pem 0

openssl x509 -in node-a.pem -noout -subject -ext subjectAltName,basicConstraints >x 2>&1
grep -q "O = sbx-node, OU = node, CN = node-a" x && grep -q "DNS:node-a, IP Address:127.0.0.1, DNS:node-a.test" x &&
    grep -q "CA:FALSE" x && ok "the node certificate's subject and alternative names" ||
    { not_ok "the node certificate's subject and alternative names"; diag "$(cat x)"; }
openssl x509 -in ca/ca.pem -noout -subject -ext basicConstraints,keyUsage >x 2>&1
grep -q "CN = test deployment" x && grep -q "CA:TRUE, pathlen:0" x && grep -q "Certificate Sign" x &&
    ok "the ca certificate's name, constraints and key usage" || { not_ok "the ca certificate"; diag "$(cat x)"; }

"$SBX" node cert issue node-a --ca ca --node >out 2>err
[ $? = 1 ] && grep -q "node-a.key' already exists" err && cmp -s node-a.pem <(openssl x509 -in node-a.pem) &&
    ok "issuing node-a again is refused" || { not_ok "issuing node-a again is refused"; diag "$(cat err)"; }
"$SBX" node cert issue h2 --ca ca --harness --host 10.0.0.1 >out 2>err
[ $? = 1 ] && [ ! -e h2.key ] && ok "a harness certificate takes no --host" || { not_ok "a harness certificate takes no --host"; diag "$(cat err)"; }
"$SBX" node cert issue h3 --ca ca >out 2>err
[ $? = 2 ] && grep -q -- "--node" err && ok "--node or --harness is required" || not_ok "--node or --harness is required"

# Another deployment: its CA and a harness of its own.
"$SBX" node ca init other >/dev/null 2>&1 && "$SBX" node cert issue stranger --ca other --harness >/dev/null 2>&1

# Real handshakes: the node's s_server requires a client certificate of the CA (TLS 1.3).
handshake() { # HOSTNAME CERT KEY -> s_client's status; its output (the server's page) in cli
    local port
    for _ in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 40000))
        openssl s_server -accept "127.0.0.1:$port" -cert node-a.pem -key node-a.key \
            -CAfile ca/ca.pem -Verify 1 -verify_return_error -tls1_3 -naccept 1 -www \
            -no-CApath -no-CAstore </dev/null >srv 2>&1 &
        SRV_PID=$!
        for _ in $(seq 50); do
            ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN && break
            kill -0 "$SRV_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$SRV_PID" 2>/dev/null && break
        wait "$SRV_PID" 2>/dev/null
    done
    printf 'GET / HTTP/1.0\r\n\r\n' | timeout 20 openssl s_client -connect "127.0.0.1:$port" -tls1_3 \
        -CAfile ca/ca.pem -no-CApath -no-CAstore -verify_return_error -verify_hostname "$1" \
        -cert "$2" -key "$3" -quiet -ign_eof >cli 2>&1
    local rc=$?
    sleep 0.2
    kill "$SRV_PID" 2>/dev/null
    wait "$SRV_PID" 2>/dev/null
    SRV_PID=
    return $rc
}
if handshake node-a harness-1.pem harness-1.key && grep -q "HTTP/1.0 200 ok" cli; then
    ok "mutual tls: a harness certificate opens the node's server, which answers its request"
else not_ok "mutual tls: a harness certificate opens the node's server"; diag "$(cat cli srv)"; fi
handshake node-a.test harness-1.pem harness-1.key && grep -q "HTTP/1.0 200 ok" cli &&
    ok "mutual tls: the node is also reached by its --host name" || { not_ok "mutual tls: by its --host name"; diag "$(cat cli srv)"; }
handshake node-a node-a.pem node-a.key
if ! grep -q "HTTP/1.0 200 ok" cli && grep -q "unsuitable certificate purpose" srv; then
    ok "mutual tls: a node certificate is refused as a client (its purpose)"
else not_ok "mutual tls: a node certificate is refused as a client"; diag "$(cat cli srv)"; fi
handshake node-a stranger.pem stranger.key
if ! grep -q "HTTP/1.0 200 ok" cli && grep -q "unable to get local issuer certificate" srv; then
    ok "mutual tls: a certificate of another ca is refused"
else not_ok "mutual tls: a certificate of another ca is refused"; diag "$(cat cli srv)"; fi
if ! handshake elsewhere.test harness-1.pem harness-1.key && grep -q "hostname mismatch" cli; then
    ok "mutual tls: the client refuses a name the node's certificate does not carry"
else not_ok "mutual tls: the client refuses a name the node's certificate does not carry"; diag "$(cat cli)"; fi
done_testing
