#!/usr/bin/env bash
# `sbx sandbox exec` streams through sbx_session_exec_stream: stdin forwarded from a pipe, a file,
# /dev/null or a terminal; a command that stops reading an endless stdin still gets its output
# out; output that nobody reads any more ends the command (141); the exit statuses; -t with a
# terminal: its size at start and after SIGWINCH.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

run "$SBX" sandbox create
expect_rc 0 "create"
id=$(tail -n1 "$T/out")

printf 'a\nb\n' | "$SBX" sandbox exec -i "$id" -- sh -c 'cat; echo "end $?"' >"$T/out" 2>"$T/err"
expect_eq "$(cat "$T/out")" "$(printf 'a\nb\nend 0')" "-i forwards a pipe, then EOF"
seq 1 100000 > "$T/in"
run "$SBX" sandbox exec -i "$id" -- sh -c 'wc -l' < "$T/in"
expect_eq "$(tr -d ' ' < "$T/out")" 100000 "-i forwards a file of several chunks"
run "$SBX" sandbox exec -i "$id" -- sh -c 'cat; echo "end $?"' < /dev/null
expect_eq "$(cat "$T/out")" "end 0" "-i with /dev/null: EOF at once"

# The command reads 10 bytes of an endless stdin and then writes 3 MB: the forwarding stalls,
# the output does not (before: sbx waited to send more input while the command waited for its
# output to be read).
timeout 30 "$SBX" sandbox exec -i "$id" -- \
    sh -c 'head -c 10 >/dev/null; head -c 3000000 /dev/zero | tr "\0" x; echo' \
    < /dev/zero > "$T/out" 2>"$T/err"
rc=$?
expect_rc 0 "a command that stops reading stdin ends"
expect_eq "$(wc -c < "$T/out")" 3000001 "and all its output arrives"

# Nobody reads our output any more: as SIGPIPE would, and the command is stopped.
"$SBX" sandbox exec "$id" -- sh -c 'echo $$ > yes.pid; exec yes' 2>"$T/err" | head -n1 > "$T/out"
expect_eq "${PIPESTATUS[0]}" 141 "output gone: status 141"
expect_eq "$(cat "$T/out")" y "the output up to then arrived"
run "$SBX" sandbox exec "$id" -- sh -c \
    'p=$(cat yes.pid); for i in $(seq 100); do kill -0 $p 2>/dev/null || exit 0; sleep 0.05; done; exit 1'
expect_rc 0 "output gone: the command was stopped"

run "$SBX" sandbox exec "$id" -- sh -c 'echo out; echo err >&2; exit 7'
expect_rc 7 "the command's status"
expect_eq "$(cat "$T/out")/$(cat "$T/err")" "out/err" "stdout and stderr kept apart"
run "$SBX" sandbox exec "$id" -- sh -c 'kill -TERM $$'
expect_rc 143 "killed by a signal: 128+N"
run "$SBX" sandbox exec --timeout 0.3 "$id" -- sleep 30
expect_rc 124 "a timeout: 124"
run "$SBX" sandbox exec "$id" -- no-such-command-sbx
expect_rc 127 "not found: 127"
run "$SBX" sandbox exec "$id" -- /etc
expect_rc 126 "cannot run: 126"
run "$SBX" sandbox exec 0000000000000000 -- true
expect_rc 125 "no such sandbox: 125"

# -it reads a terminal: with a piped stdin it refuses as docker does (the pipe's bytes would be
# typed on a terminal that echoes them); -i alone forwards the pipe.
printf 'abc\n' | "$SBX" sandbox exec -it "$id" -- sh -c 'cat; echo end' >"$T/out" 2>"$T/err"
rc=$?
expect_rc 125 "-it with a pipe is refused"
expect_in "$T/err" "the input device is not a TTY" "as docker says it"
expect_not_in "$T/out" "end" "and nothing ran"
printf 'abc\n' | "$SBX" sandbox exec -i "$id" -- sh -c 'cat; echo end' >"$T/out" 2>"$T/err"
rc=$?
expect_rc 0 "-i alone with a pipe works"
expect_eq "$(cat "$T/out")" "abc
end" "-i: the command read the pipe to its EOF"

# -it on a real terminal: the command starts with the terminal's size and follows SIGWINCH.
python3 - "$SBX" "$id" > "$T/out" 2>"$T/err" <<'PY'
import fcntl, os, pty, select, struct, subprocess, sys, termios, time
sbx, sid = sys.argv[1], sys.argv[2]
m, s = pty.openpty()
fcntl.ioctl(m, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 90, 0, 0))
def ctty():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
p = subprocess.Popen([sbx, "sandbox", "exec", "-it", sid, "--", "sh", "-c",
                      "stty size; read x; stty size; exit 5"],
                     stdin=s, stdout=s, stderr=s, preexec_fn=ctty, close_fds=True)
os.close(s)
data, resized, deadline = b"", False, time.time() + 30
while time.time() < deadline:
    r, _, _ = select.select([m], [], [], 0.2)
    if r:
        try:
            b = os.read(m, 65536)
        except OSError:
            break
        if not b:
            break
        data += b
    if not resized and b"30 90" in data:
        fcntl.ioctl(m, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        # The signal is queued before the ioctl returns: sbx sees it before this input.
        os.write(m, b"\r")
        resized = True
    if p.poll() is not None and not r:
        break
if p.poll() is None:
    p.kill()
p.wait()
sys.stdout.write(data.decode(errors="replace"))
sys.exit(p.returncode)
PY
rc=$?
expect_rc 5 "-it on a terminal: the command's status"
expect_in "$T/out" "30 90" "-it: the command starts with the terminal's size"
expect_in "$T/out" "40 100" "-it: SIGWINCH resizes the command's terminal"

done_testing
