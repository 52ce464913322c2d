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

done_testing
