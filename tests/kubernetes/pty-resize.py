#!/usr/bin/env python3
"""Run a command on a pseudo-terminal of 24x80, press Enter until it prints "24 80", resize the
terminal to 40x100 (the kernel sends SIGWINCH to the command), then press Enter until it prints
"40 100", then send "q". Prints what the terminal showed and exits with the command's status;
exits 90 if the first size never showed and 91 if the resize never did.
usage: pty-resize.py COMMAND [ARGS...]"""
import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time


def setsize(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def main():
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(sys.argv[1], sys.argv[1:])
    setsize(fd, 24, 80)
    seen = bytearray()

    def read_until(pattern, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    return False
                if not data:
                    return False
                seen.extend(data)
                if pattern in seen:
                    return True
        return False

    # Enter until the first size shows: the command may start before its terminal has a size.
    first = False
    for _ in range(120):
        os.write(fd, b"\n")
        if read_until(b"24 80", 0.5):
            first = True
            break
    resized = False
    if first:
        setsize(fd, 40, 100)
        for _ in range(120):
            os.write(fd, b"\n")
            if read_until(b"40 100", 0.5):
                resized = True
                break
    os.write(fd, b"q\n")
    read_until(b"\x00never\x00", 10)
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(seen.decode(errors="replace"))
    if not first:
        return 90
    if not resized:
        return 91
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main())
