#!/usr/bin/env bash
# Certificates for TLS tests, made with openssl at test time (never kept in the tree):
#   mkcerts.sh DIR [HOST...]
# DIR/ca.{crt,key}          a CA
# DIR/server.{crt,key}      the server's, signed by the CA, for 127.0.0.1, localhost and HOSTs
#                           (names or IP addresses)
# DIR/client.{crt,key}      a client's, signed by the CA (mutual TLS)
# DIR/expired.{crt,key}     a client's signed by the CA whose validity ended before it began
# DIR/other-ca.{crt,key}    another CA, which signed nothing of the above
# DIR/other-client.{crt,key} a client's signed by the other CA
# Keys are P-256, certificates valid for two days.
set -euo pipefail
dir=$1
shift
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # ca NAME CN
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 2 -subj "/CN=$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}
leaf() { # leaf NAME CN CA DAYS EXTFILE
    key "$1.key"
    openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial -days "$4" \
        -out "$1.crt" -extfile "$5" 2>/dev/null
    rm -f "$1.csr"
}
ca ca sbx-test-ca
ca other-ca sbx-other-ca
san="IP:127.0.0.1,DNS:localhost"
for h in "$@"; do
    case $h in
    *[!0-9.]*) san="$san,DNS:$h" ;;
    *) san="$san,IP:$h" ;;
    esac
done
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" >server.ext
printf 'extendedKeyUsage=clientAuth\n' >client.ext
leaf server localhost ca 2 server.ext
leaf client sbx-client ca 2 client.ext
leaf expired sbx-expired ca -1 client.ext
leaf other-client sbx-other other-ca 2 client.ext
rm -f ./*.srl server.ext client.ext
