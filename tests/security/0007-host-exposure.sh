#!/usr/bin/env bash
# Host exposure (issue 9, items 7, 8, 9, 14): what a sandbox can reach or grow on the host
# through sbx itself: the supervisor log, dangerous grant sources, the harness's own
# credentials, port forwards other local users could reach. Runs as whoever runs it; meson runs
# it again as an unprivileged user when that is root.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
chmod 755 "$T"

if ! "$SBX" sandbox create >"$T/pre" 2>&1; then
    grep -q "namespace" "$T/pre" && skip_all "$(grep -m1 "namespace" "$T/pre")"
    echo "Bail out! cannot create a sandbox: $(cat "$T/pre")"; exit 1
fi
"$SBX" sandbox rm "$(cat "$T/pre")" >/dev/null 2>&1
HAVE_PY=0
"$SBX" sandbox create >"$T/pre" 2>/dev/null &&
    "$SBX" sandbox exec "$(cat "$T/pre")" -- sh -c 'command -v python3' >/dev/null 2>&1 && HAVE_PY=1
"$SBX" sandbox rm "$(cat "$T/pre")" >/dev/null 2>&1

# ---- item 7: the supervisor log is bounded ------------------------------------------------
# Every refused proxy request is logged; a sandbox hammering the proxy must not grow the log
# (in the runtime dir, RAM on most hosts) past its cap of 1 MiB.
if [ "$HAVE_PY" = 1 ]; then
    run "$SBX" sandbox create --network allow:example.invalid
    expect_rc 0 "create a sandbox with network allow"
    ID=$(cat "$T/out")
    run "$SBX" sandbox exec --timeout 60 "$ID" -- python3 -c '
import socket, time
end, n = time.time() + 4, 0
while time.time() < end and n < 200000:
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"GET http://denied.test/" + b"x" * 1500 + b" HTTP/1.1\r\nHost: denied.test\r\n\r\n")
    s.recv(4096)
    s.close()
    n += 1
print("requests", n)'
    expect_in "$T/out" "requests" "the sandbox sent refused requests in a loop"
    diag "$(cat "$T/out")"
    LOG=$RUNBASE/$ID/supervisor.log
    size=$(stat -c %s "$LOG" 2>/dev/null || echo missing)
    diag "supervisor.log: $size bytes"
    if [ "$size" != missing ] && [ "$size" -le 1048576 ]; then ok "the supervisor log stays under its 1 MiB cap"
    else not_ok "the supervisor log stays under its 1 MiB cap"; fi
    expect_in "$LOG" "messages suppressed" "dropped log messages are summarised"
    "$SBX" sandbox rm "$ID" >/dev/null 2>&1
else
    ok "# SKIP no python3 inside the sandbox"
    ok "# SKIP no python3 inside the sandbox"
    ok "# SKIP no python3 inside the sandbox"
    ok "# SKIP no python3 inside the sandbox"
fi

# ---- item 8: dangerous grant sources ---------------------------------------------------------
for src in /proc /sys /dev /run /var/run /proc/self; do
    run "$SBX" sandbox create --ro "$src:/x"
    expect_rc 1 "a grant of '$src' is refused"
    expect_in "$T/err" "--allow-dangerous-grant" "the refusal of '$src' names the override"
done
expect_in "$T/err" "shows the host's own processes" "and says why"
mkdir -p "$T/svc/deep/er"
if command -v python3 >/dev/null; then
    python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$T/svc/deep/er/agent.sock"
else
    ok "# SKIP no python3 on the host"; ok "# SKIP"; ok "# SKIP"; ok "# SKIP"
fi
if [ -S "$T/svc/deep/er/agent.sock" ]; then
    run "$SBX" sandbox create --ro "$T/svc:/x"
    expect_rc 1 "a grant holding a unix socket is refused"
    expect_in "$T/err" "holds the unix socket '$T/svc/deep/er/agent.sock'" "the socket is named"
    run "$SBX" sandbox create --ro "$T/svc:/x" --allow-dangerous-grant "$T/svc"
    expect_rc 0 "the override lets it through"
    expect_in "$T/err" "'$T/svc' is allowed although it is DANGEROUS" "with a loud warning"
    "$SBX" sandbox rm "$(cat "$T/out")" >/dev/null 2>&1
fi
run "$SBX" sandbox create --ro /proc:/x --allow-dangerous-grant /var/run
expect_rc 2 "an override naming no grant is a usage error"
expect_in "$T/err" "names no --ro or --rw source" "and says so"
run "$SBX" sandbox create --ro /var/run:/hostrun --allow-dangerous-grant /run
expect_rc 0 "the override matches a grant by where it leads"
expect_in "$T/err" "DANGEROUS" "and warns"
"$SBX" sandbox rm "$(cat "$T/out")" >/dev/null 2>&1
mkdir -p "$T/plain/sub"
echo tool >"$T/plain/sub/f"
run "$SBX" sandbox create --ro "$T/plain:/opt/plain"
expect_rc 0 "a plain directory is still granted"
expect_not_in "$T/err" "DANGEROUS" "without a warning"
"$SBX" sandbox rm "$(cat "$T/out")" >/dev/null 2>&1

# ---- item 9: the harness's own credentials stay out unless passed ---------------------------
KEY=sk-canary-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
cat >"$T/m.yaml" <<'YAML'
environment:
  STOLEN: {type: secret, env: OPENAI_API_KEY}
YAML
OPENAI_API_KEY=$KEY run "$SBX" sandbox create --manifest "$T/m.yaml"
expect_rc 1 "a manifest asking for OPENAI_API_KEY is refused"
expect_in "$T/err" "harness variable 'OPENAI_API_KEY'" "the variable is named"
expect_in "$T/err" "--pass-secret OPENAI_API_KEY" "the opt-in is named"
expect_not_in "$T/out" "$KEY" "the key is not printed"
[ -s "$T/out" ] && "$SBX" sandbox rm "$(cat "$T/out")" >/dev/null 2>&1
OPENAI_API_KEY=$KEY run "$SBX" sandbox create --pass-secret OPENAI_API_KEY --manifest "$T/m.yaml"
expect_rc 0 "with --pass-secret the sandbox is made"
ID=$(cat "$T/out")
run "$SBX" sandbox exec "$ID" -- printenv STOLEN
expect_in "$T/out" "$KEY" "and the key is inside, as asked"
"$SBX" sandbox rm "$ID" >/dev/null 2>&1
run "$SBX" sandbox create --pass-secret HOME
expect_rc 2 "--pass-secret of a variable that is no credential of sbx is a usage error"
# The same through `sbx run --manifest`, with a one-answer recording.
echo '{"id":"r1","object":"response","status":"completed","model":"m","output":[{"type":"message","id":"m1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"done-9c2","annotations":[]}]}]}' >"$T/one.jsonl"
OPENAI_API_KEY=$KEY run "$SBX" run -m "replay:$T/one.jsonl" --manifest "$T/m.yaml" go
expect_rc 1 "sbx run with that manifest fails"
expect_in "$T/err" "--pass-secret OPENAI_API_KEY" "naming the opt-in"
OPENAI_API_KEY=$KEY run "$SBX" run --pass-secret OPENAI_API_KEY -m "replay:$T/one.jsonl" --manifest "$T/m.yaml" go
expect_rc 0 "sbx run --pass-secret OPENAI_API_KEY runs"

# ---- item 14: a port forward only the caller can reach ---------------------------------------
if [ "$HAVE_PY" = 1 ]; then
    run "$SBX" sandbox create
    ID=$(cat "$T/out")
    "$SBX" sandbox exec --keep-background "$ID" -- sh -c 'mkdir -p /tmp/www && echo unix-forward-5e1 >/tmp/www/index.html &&
        cd /tmp/www && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)' >/dev/null 2>&1
    port_unix() { "$SBX" sandbox port --unix "$ID" 8000 >"$T/sock" 2>"$T/sockerr"; }
    wait_until port_unix
    SOCK=$(cat "$T/sock")
    case "$SOCK" in
    "$RUNBASE/$ID/"*) ok "port --unix answers a socket in the caller's runtime directory" ;;
    *) not_ok "port --unix answers a socket in the caller's runtime directory"; diag "$SOCK" "$(cat "$T/sockerr")" ;;
    esac
    expect_eq "$(stat -c %a "$(dirname "$SOCK")")" 700 "the socket's directory is 0700"
    expect_eq "$(stat -c %a "$SOCK" 2>/dev/null)" 600 "the socket is 0600"
    if command -v curl >/dev/null; then
        run curl -sS -m 10 --unix-socket "$SOCK" http://sandbox/index.html
        expect_in "$T/out" "unix-forward-5e1" "curl --unix-socket reaches the service inside"
    else
        ok "# SKIP no curl on the host"
    fi
    run "$SBX" sandbox port --unix "$ID" 8000
    expect_in "$T/out" "$SOCK" "asking again answers the same socket"
    if [ "$(id -u)" = 0 ] && id sbx-ci >/dev/null 2>&1 && command -v setpriv >/dev/null; then
        run setpriv --reuid=sbx-ci --regid="$(id -g sbx-ci)" --clear-groups env -i PATH=/usr/local/bin:/usr/bin:/bin python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("connected")
except PermissionError:
    print("permission denied")
except OSError as e:
    print("error", e)' "$SOCK"
        expect_in "$T/out" "permission denied" "another local user cannot connect to the socket"
    else
        ok "# SKIP another user's view needs root and the user sbx-ci"
    fi
    "$SBX" sandbox rm "$ID" >/dev/null 2>&1
    if [ -e "$SOCK" ]; then not_ok "rm removes the socket"; else ok "rm removes the socket"; fi
    run "$SBX" sandbox create --network full
    ID=$(cat "$T/out")
    run "$SBX" sandbox port --unix "$ID" 8000
    expect_rc 1 "port --unix on a sandbox without a network of its own fails"
    "$SBX" sandbox rm "$ID" >/dev/null 2>&1
else
    for i in 1 2 3 4 5 6 7 8 9; do ok "# SKIP no python3 inside the sandbox"; done
fi

done_testing
