#!/usr/bin/env bash
# -p HOST:PORT (and ADDR:HOST:PORT, PORT): fixed host ports forwarded to a sandbox's port from
# its start, kept across stop and start; an address the host does not have, a host port that is
# taken, or a sandbox on the host's network is refused at create with a clear error.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

# A free host port, and the next one (the kernel picks; nothing here keeps them).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
get() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().strip())' "$1" 2>/dev/null; }
serve() { # ID: a web server on 127.0.0.1:8000 inside, serving www/i.txt
    "$SBX" sandbox exec --keep-background "$1" -- sh -c \
        'mkdir -p www && echo "served by $0" > www/i.txt && (python3 -m http.server 8000 --bind 127.0.0.1 --directory www >/dev/null 2>&1 &)' "$1"
}
command -v python3 >/dev/null || skip_all "no python3"
probe=$("$SBX" sandbox create 2>"$T/probe.err") || skip_all "cannot create an isolated sandbox here: $(cat "$T/probe.err")"
"$SBX" sandbox rm "$probe" >/dev/null

hp=$(free_port)
run "$SBX" sandbox create --name pub -p "$hp:8000"
expect_rc 0 "create -p HOST:PORT"
id=$(cat "$T/out")
serve "$id"
answer() { [ "$(get "http://127.0.0.1:$hp/i.txt")" = "served by $id" ]; }
wait_until answer && ok "host port $hp reaches port 8000 of the sandbox" || not_ok "host port $hp reaches port 8000 of the sandbox"
run "$SBX" sandbox port pub 8000
expect_eq "$(cat "$T/out")" "http://127.0.0.1:$hp" "sandbox port names the fixed host port"
run "$SBX" sandbox state --no-snapshot pub
expect_in "$T/out" "\"127.0.0.1:$hp:8000\"" "the state keeps the forward"

# The same host port again: taken.
run "$SBX" sandbox create -p "$hp:8001"
expect_rc 1 "a host port that is taken fails the create"
expect_in "$T/err" "-p 127.0.0.1:$hp:8001" "naming the forward"
expect_in "$T/err" "address already in use" "and why"
# An address this host does not have (TEST-NET-1): refused before anything is made.
run "$SBX" sandbox create -p "192.0.2.1:$(free_port):8000"
expect_rc 1 "an address the host does not have fails the create"
expect_in "$T/err" "this host has no address '192.0.2.1'" "saying so"
run "$SBX" sandbox create --port-bind 192.0.2.1
expect_rc 1 "so does --port-bind with such an address"
expect_in "$T/err" "this host has no address '192.0.2.1'" "saying so too"
run "$SBX" sandbox create -p 99999:80
expect_rc 2 "a port out of range is a usage error"
expect_in "$T/err" "-p wants PORT, HOST:PORT or ADDR:HOST:PORT" "saying what -p wants"
run "$SBX" sandbox create --network full -p "$(free_port):80"
expect_rc 1 "-p on the host's network is refused"
expect_in "$T/err" "needs a sandbox with a network of its own" "saying why"
run "$SBX" sandbox create --provider docker --image img -p 8080:80
expect_rc 2 "a provider that does not declare -p refuses it"
expect_in "$T/err" "option '--publish' is for the local provider" "naming whose it is"
expect_eq "$("$SBX" sandbox ps -q)" "$id" "the refused creates left nothing"

# Stop and start: the same host port again.
"$SBX" sandbox stop pub >/dev/null && "$SBX" sandbox start pub >/dev/null
serve "$id"
wait_until answer && ok "after stop and start the fixed port serves again" || not_ok "after stop and start the fixed port serves again"
run "$SBX" sandbox rm pub
run "$SBX" sandbox create -p "$hp:8000"
expect_rc 0 "rm frees the host port"
"$SBX" sandbox rm "$(cat "$T/out")" >/dev/null

# -p PORT alone: a free host port of the kernel's choosing, from the start.
run "$SBX" sandbox create -p 8000
expect_rc 0 "create -p PORT"
id=$(cat "$T/out")
serve "$id"
answer2() { url=$("$SBX" sandbox port "$id" 8000 2>/dev/null) && [ "$(get "$url/i.txt")" = "served by $id" ]; }
wait_until answer2 && ok "-p PORT serves on the port sandbox port names" || not_ok "-p PORT serves on the port sandbox port names"
case $url in http://127.0.0.1:*) ok "on 127.0.0.1 by default" ;; *) not_ok "on 127.0.0.1 by default ($url)" ;; esac
"$SBX" sandbox rm "$id" >/dev/null
done_testing
