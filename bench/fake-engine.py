#!/usr/bin/env python3
"""A stand-in Docker engine for bench-remote: the few Engine API calls an sbx docker session
makes to find its sandbox and run commands, on a unix socket, served by one asyncio thread
however many connections are open (the engine is not what is measured).

Usage: fake-engine.py SOCKET LINES INTERVAL_MS
Prints "ready" once it listens; stops when its standard input closes. One sandbox (id
0123456789abcdef) is always running. Every command answers the preamble's verdict at once, then
writes LINES lines of 64 bytes on stdout, INTERVAL_MS apart, then ends with exit code 0.
"""
import asyncio
import json
import os
import struct
import sys

SID = "0123456789abcdef"
CID = "c" * 64
LABELS = {"io.sbx.id": SID, "io.sbx.root": "/workspace", "io.sbx.owner": "",
          "io.sbx.created": "2026-01-01T00:00:00Z", "io.sbx.version": "1"}
execs = {}
counter = [0]


def frame(data, stream=1):
    return struct.pack(">BxxxI", stream, len(data)) + data


def answer(writer, code, body, reason="OK"):
    data = json.dumps(body).encode()
    writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n" % (code, reason.encode(), len(data)) + data)


async def run_exec(eid, writer, lines, interval):
    writer.write(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                 b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
    writer.write(frame(b"S%d\n" % (1000 + int(eid[:6], 16) % 30000)))
    line = b"x" * 63 + b"\n"
    for _ in range(lines):
        await asyncio.sleep(interval / 1000)
        writer.write(frame(line))
        await writer.drain()
    execs[eid] = False
    await writer.drain()


async def handle(reader, writer, lines, interval):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        first = head.split(b"\r\n", 1)[0].decode()
        method, target, _ = first.split(" ", 2)
        length = 0
        for h in head.split(b"\r\n")[1:]:
            if h.lower().startswith(b"content-length:"):
                length = int(h.split(b":", 1)[1])
        if length:
            await reader.readexactly(length)
        path = target.split("?", 1)[0]
        if path.endswith("/_ping"):
            writer.write(b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: 2\r\nConnection: close\r\n\r\nOK")
        elif path.endswith("/version"):
            answer(writer, 200, {"ApiVersion": "1.41", "Version": "fake"})
        elif path.endswith("/containers/json"):
            answer(writer, 200, [{"Id": CID, "State": "running", "Labels": LABELS}])
        elif path.endswith("/containers/%s/json" % CID):
            answer(writer, 200, {"Id": CID, "Config": {"Image": "fake", "Labels": LABELS},
                                 "State": {"Running": True, "Pid": 1}})
        elif path.endswith("/containers/%s/exec" % CID) and method == "POST":
            counter[0] += 1
            eid = "%064x" % counter[0]
            execs[eid] = True
            answer(writer, 201, {"Id": eid})
        elif path.endswith("/start") and method == "POST":
            eid = path.split("/")[-2]
            await run_exec(eid, writer, lines, interval)
        elif "/exec/" in path and path.endswith("/json"):
            eid = path.split("/")[-2]
            answer(writer, 200, {"Running": execs.get(eid, False), "ExitCode": 0})
        else:
            answer(writer, 404, {"message": "no route " + path}, "Not Found")
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main():
    sock, lines, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    server = await asyncio.start_unix_server(
        lambda r, w: handle(r, w, lines, interval), sock, backlog=4096)
    os.write(1, b"ready\n")  # one write: the reader may close its end right after
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()
    os._exit(0)


asyncio.run(main())
