#!/usr/bin/env python3
"""Run a command on a new pseudo-terminal that is its controlling terminal, wait until the
terminal shows TEXT, then type Ctrl-C there, as a person would (tests/integration/4135).

    pty-interrupt.py OUT TEXT -- CMD ARGS...

The terminal's line discipline turns the typed ^C into SIGINT for the foreground process
group. Everything the terminal showed goes to OUT; the exit status is the command's (128+N
when a signal N ended it), or 99 when TEXT never appeared within 60 s (the command is killed).
"""
import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time


def main():
    out, want = sys.argv[1], sys.argv[2].encode()
    cmd = sys.argv[sys.argv.index("--") + 1:]
    m, s = pty.openpty()

    def controlling():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen(cmd, stdin=s, stdout=s, stderr=s, close_fds=True, preexec_fn=controlling)
    os.close(s)
    seen = b""
    typed = False
    deadline = time.monotonic() + 60
    while True:
        r, _, _ = select.select([m], [], [], 0.2)
        if r:
            try:
                b = os.read(m, 65536)
            except OSError:
                b = b""
            if not b:
                break
            seen += b
        if not typed and want in seen:
            os.write(m, b"\x03")
            typed = True
            deadline = time.monotonic() + 60
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            open(out, "wb").write(seen)
            sys.exit(99)
        if not r and p.poll() is not None:
            break
    status = p.wait()
    os.close(m)
    open(out, "wb").write(seen)
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main()
