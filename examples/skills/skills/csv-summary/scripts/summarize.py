#!/usr/bin/env python3
"""Summarise a CSV file: row count, then total/mean/min/max of every numeric column."""
import csv
import sys


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def main(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    print("rows: %d" % len(rows))
    if not rows:
        return
    for col in rows[0].keys():
        values = [number(r[col]) for r in rows]
        if any(v is None for v in values):
            print("%s: text" % col)
            continue
        total = sum(values)
        print("%s: total=%g mean=%g min=%g max=%g"
              % (col, total, total / len(values), min(values), max(values)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py FILE.csv")
    main(sys.argv[1])
