#!/usr/bin/env bash
# The Docker provider against a remote engine through the real binary: a dockerd --tlsverify on
# tcp:// at an address inside a network namespace (tests/docker/engines.sh start-tls), this test
# in the namespace of its clients (tests/docker/in-netns.sh runs it there), certificates made by
# openssl when the engine started. A sandbox made with the --docker-tls-* flags, found again by
# id through its record and through DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH as the
# docker CLI reads them, a port reached through the relay, a snapshot streamed into the store
# and restored; and the errors a user meets: a wrong CA, no client certificate, an expired one,
# one the engine does not trust, plain HTTP to the TLS port, an address nobody serves. Traffic
# goes only to the namespaces the engine's start made.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
if [ -z "${SBX_TEST_DOCKER_TLS_HOST:-}" ] || [ -z "${SBX_TEST_DOCKER_TLS_CERTS:-}" ] ||
    [ ! -S "${SBX_TEST_DOCKER_TLS_SOCKET:-}" ]; then
    if [ "${SBX_TEST_DOCKER_TLS_REQUIRED:-0}" = 1 ]; then
        not_ok "SBX_TEST_DOCKER_TLS_REQUIRED=1 but no TLS engine"
        done_testing
        exit 1
    fi
    echo "1..0 # SKIP no TLS docker engine (tests/docker/engines.sh start-tls)"
    exit 0
fi
H=$SBX_TEST_DOCKER_TLS_HOST C=$SBX_TEST_DOCKER_TLS_CERTS S=$SBX_TEST_DOCKER_TLS_SOCKET
IMG=${SBX_TEST_DOCKER_IMAGE:-sbx-test:1}
unset DOCKER_HOST DOCKER_TLS_VERIFY DOCKER_CERT_PATH
api() { curl -s --max-time 20 --unix-socket "$S" "$@"; }
: >"$T/ids"
tls_cleanup() {
    local id c
    while read -r id; do
        [ -n "$id" ] || continue
        for c in $(api -G "http://d/v1.41/containers/json" --data-urlencode all=1 \
            --data-urlencode "filters={\"label\":[\"io.sbx.id=$id\"]}" | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4); do
            api -X DELETE "http://d/v1.41/containers/$c?force=1" >/dev/null
        done
        pkill -f -- "__relay $id " 2>/dev/null
    done <"$T/ids"
    sandbox_cleanup
}
trap tls_cleanup EXIT

tls=(--docker-host "$H" --docker-tls-ca "$C/ca.crt" --docker-tls-cert "$C/client.crt"
    --docker-tls-key "$C/client.key")
run "$SBX" sandbox create --provider docker --image "$IMG" "${tls[@]}"
expect_rc 0 "create on a tcp:// engine with the client certificate"
id=$(head -n1 "$T/out")
echo "$id" >>"$T/ids"
run "$SBX" sandbox exec "$id" -- sh -c 'echo hi; echo err >&2; exit 4'
expect_rc 4 "exec by id (its record names the engine and the certificate files)"
expect_eq "$(cat "$T/out")" "hi" "the command's output over TLS"
expect_in "$T/err" "err" "and its stderr"
run "$SBX" sandbox exec "$id" -- sh -c 'head -c 3000000 /dev/zero | wc -c'
expect_eq "$(tr -d ' ' <"$T/out")" "3000000" "megabytes of output through the event loop"
printf 'typed input\n' >"$T/in"
run "$SBX" sandbox exec -i "$id" -- cat <"$T/in"
expect_eq "$(cat "$T/out")" "typed input" "stdin reaches the command and its end closes it"
grep -q "$C" "$SBX_RECORDS/$id.json" && ok "the record keeps the certificate paths" ||
    not_ok "the record keeps the certificate paths"
grep -q "BEGIN" "$SBX_RECORDS/$id.json" && not_ok "no key material in the record" ||
    ok "no key material in the record"

# The docker CLI's environment instead of flags.
mkdir -p "$T/dockercfg"
cp "$C/ca.crt" "$T/dockercfg/ca.pem"
cp "$C/client.crt" "$T/dockercfg/cert.pem"
cp "$C/client.key" "$T/dockercfg/key.pem"
run env DOCKER_HOST="$H" DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH="$T/dockercfg" \
    "$SBX" sandbox create --provider docker --image "$IMG"
expect_rc 0 "create with DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH"
id2=$(head -n1 "$T/out")
echo "$id2" >>"$T/ids"
run env DOCKER_HOST="$H" DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH="$T/dockercfg" \
    "$SBX" sandbox ps
expect_in "$T/out" "$id2" "ps lists it through the same environment"

# A port of the sandbox: the engine runs on this host, so the relay reaches it.
run "$SBX" sandbox exec "$id" -- sh -c 'echo served > page; (httpd -p 127.0.0.1:8080 -h . &); sleep 0.5'
run "$SBX" sandbox port "$id" 8080
expect_rc 0 "port on a tcp:// engine running here"
url=$(head -n1 "$T/out")
expect_eq "$(curl -s --max-time 10 "$url/page")" "served" "the relay reaches the container's port"

# A snapshot streams into the store; a sandbox made from it has the content.
run "$SBX" sandbox exec "$id" -- sh -c 'mkdir -p d && echo kept > d/f && ln -s /etc/passwd out'
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "snapshot of a remote workspace"
ref=$(grep -o 'sha256:[0-9a-f]*' "$T/out" | head -n1)
run "$SBX" sandbox create --provider docker --image "$IMG" "${tls[@]}" --snapshot "$ref"
expect_rc 0 "create from that snapshot"
id3=$(head -n1 "$T/out")
echo "$id3" >>"$T/ids"
run "$SBX" sandbox exec "$id3" -- sh -c 'cat d/f; test -e out || echo "no link out"'
expect_eq "$(cat "$T/out")" "$(printf 'kept\nno link out')" "restored, without the link out"

# The errors a user meets.
SBX_RECORDS=$T/no-records
export SBX_RECORDS
mkdir -p "$SBX_RECORDS"
try() { # try WHAT FLAGS...: a by-id exec that must fail, its message in $T/err
    local what=$1
    shift
    run "$SBX" sandbox exec --docker-host "$H" "$@" "$id" -- true
    expect_rc 125 "$what fails"
}
try "a wrong CA" --docker-tls-ca "$C/other-ca.crt" --docker-tls-cert "$C/client.crt" \
    --docker-tls-key "$C/client.key"
expect_in "$T/err" "the Docker engine at '$H': TLS: the server's certificate is not trusted" \
    "a wrong CA is said plainly"
try "no client certificate" --docker-tls-ca "$C/ca.crt"
expect_in "$T/err" "TLS: the server wants a client certificate and none was given" \
    "a missing client certificate is said plainly"
try "an expired client certificate" --docker-tls-ca "$C/ca.crt" --docker-tls-cert "$C/expired.crt" \
    --docker-tls-key "$C/expired.key"
expect_in "$T/err" "TLS: the server refused sbx's client certificate: it expired on" \
    "an expired client certificate is said plainly"
try "a certificate of another CA" --docker-tls-ca "$C/ca.crt" \
    --docker-tls-cert "$C/other-client.crt" --docker-tls-key "$C/other-client.key"
expect_in "$T/err" "TLS: the server refused sbx's client certificate (" \
    "a certificate the engine does not trust is said plainly"
try "a key that is not the certificate's" --docker-tls-ca "$C/ca.crt" \
    --docker-tls-cert "$C/client.crt" --docker-tls-key "$C/other-client.key"
expect_in "$T/err" "cannot use the client certificate or its key" "a mismatched key is said plainly"
try "plain HTTP to the TLS port"
expect_in "$T/err" "Client sent an HTTP request to an HTTPS server" "plain HTTP to a TLS port says so"
addr=${H#tcp://}
run "$SBX" sandbox exec --docker-host "tcp://${addr%:*}:1" --docker-tls-ca "$C/ca.crt" "$id" -- true
expect_rc 125 "a port nobody serves fails"
expect_in "$T/err" "cannot reach the Docker engine at 'tcp://${addr%:*}:1'" "unreachable is said plainly"

done_testing
