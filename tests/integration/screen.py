#!/usr/bin/env python3
"""What a person reads on the terminal after a program wrote FILE's bytes to it, one screen
line per output line (for the tests of status lines: tests/integration/4135-run-terminal.sh).

    screen.py FILE

A small terminal: carriage return moves to the start of the line, line feed to the next line,
backspace one column left, ESC [ ... K erases to the end of the line (ESC [ 2 K the whole
line); other control sequences (colours) change nothing of the text. Characters overwrite
what is under the cursor, as on a real terminal.
"""
import re
import sys

CSI = re.compile(r"\x1b\[([0-9;?]*)([@-~])")


def render(data):
    lines = [[]]
    col = 0
    i = 0
    chars = data.decode("utf-8", "replace")
    n = len(chars)
    while i < n:
        c = chars[i]
        if c == "\x1b":
            m = CSI.match(chars, i)
            if m:
                if m.group(2) == "K":
                    if m.group(1) == "2":
                        lines[-1] = [" "] * col
                    else:
                        del lines[-1][col:]
                i = m.end()
                continue
            i += 1
            continue
        if c == "\r":
            col = 0
        elif c == "\n":
            lines.append([])
            col = 0
        elif c == "\b":
            col = max(0, col - 1)
        else:
            line = lines[-1]
            while len(line) < col:
                line.append(" ")
            if col < len(line):
                line[col] = c
            else:
                line.append(c)
            col += 1
        i += 1
    return ["".join(l).rstrip() for l in lines]


def main():
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    for line in render(data):
        print(line)


if __name__ == "__main__":
    main()
