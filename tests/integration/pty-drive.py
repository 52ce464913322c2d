#!/usr/bin/env python3
"""Drive a command on a pseudo-terminal the way a person would, for the tests of terminal
prompts (tests/integration/4132-approval-prompt.sh, 4131-state-trust.sh).

    pty-drive.py OUT 'EXPECT=>ANSWER' ... -- CMD ARGS...

The command runs with stdin, stdout and stderr on a new pty (80x24). For each step in order,
the driver reads the terminal until the text EXPECT has appeared (after the previous step's
match), then types ANSWER followed by Enter ("\\n" in ANSWER is a newline too). After the last
step it reads until the command ends. Everything the terminal showed goes to OUT. A step
whose text does not appear within 60 s fails the driver with status 99 (the command is killed);
otherwise the command's own exit status is returned.
"""
import os
import pty
import select
import signal
import subprocess
import sys
import time


def main():
    out = sys.argv[1]
    sep = sys.argv.index("--")
    steps = [s.split("=>", 1) for s in sys.argv[2:sep]]
    cmd = sys.argv[sep + 1:]
    m, s = pty.openpty()
    os.set_blocking(m, False)
    p = subprocess.Popen(cmd, stdin=s, stdout=s, stderr=s, close_fds=True, start_new_session=True)
    os.close(s)
    seen = b""
    pos = 0

    def pump(timeout):
        nonlocal seen
        r, _, _ = select.select([m], [], [], timeout)
        if not r:
            return True
        try:
            b = os.read(m, 65536)
        except OSError:
            return False
        if not b:
            return False
        seen += b
        return True

    status = None
    for want, answer in steps:
        deadline = time.monotonic() + 60
        wb = want.encode()
        while wb not in seen[pos:]:
            if time.monotonic() > deadline or not pump(0.2) and p.poll() is not None:
                break
        if wb not in seen[pos:]:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            open(out, "wb").write(seen)
            sys.stderr.write("pty-drive: never saw %r\n" % want)
            sys.exit(99)
        pos = seen.index(wb, pos) + len(wb)
        os.write(m, answer.replace("\\n", "\n").encode() + b"\n")
    deadline = time.monotonic() + 120
    while pump(0.2):
        if p.poll() is not None and not select.select([m], [], [], 0.2)[0]:
            break
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            break
    status = p.wait()
    os.close(m)
    open(out, "wb").write(seen)
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main()
