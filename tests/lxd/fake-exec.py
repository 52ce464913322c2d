#!/usr/bin/env python3
"""Just enough of LXD's exec API, on a unix socket, for the LXD provider's relay
(src/providers/lxd/relay.c), Python standard library only.

usage: fake-exec.py SOCKET MODE SIZE
It listens on SOCKET, prints "ready" and serves until its standard input closes. One exec at a
time: POST /1.0/instances/NAME/exec answers an operation with four stream secrets; once the
four WebSockets (/1.0/operations/ID/websocket?secret=S) are connected the "command" runs: on
stdout the preamble's verdict ("S42\\n") then the end of the stream (an empty text message), on
stderr SIZE bytes ("e" * SIZE) in binary messages of 64 KiB, then
  whole  the end of the stream (an empty text message), as LXD does when all went out
  cut    only the first half of the bytes, then the sending side shut down without the end of
         the stream: what LXD before 5.14 does to a reader that fell behind (canonical/lxd#11422)
and the operation ends with "return": 0 (GET /1.0/operations/ID/wait answers then)."""
import base64
import hashlib
import json
import os
import socket
import struct
import sys
import threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
SECRETS = {"0": "a0", "1": "a1", "2": "a2", "control": "ac"}
CHUNK = 65536

mode, size = sys.argv[2], int(sys.argv[3])
lock = threading.Condition()
state = {"op": 0, "conns": {}, "done": False}


def read_request(f):
    line = f.readline()
    if not line:
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers = {}
    while True:
        h = f.readline().decode("latin-1").strip()
        if not h:
            break
        name, _, value = h.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = f.read(int(headers.get("content-length", "0") or 0))
    return method, target, headers, body


def answer(sock, status, doc):
    body = json.dumps(doc).encode()
    reason = {200: "OK", 202: "Accepted", 404: "Not Found"}[status]
    sock.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (status, reason.encode(), len(body)) + body)


def frame(op, data):
    n = len(data)
    if n < 126:
        head = struct.pack(">BB", 0x80 | op, n)
    elif n <= 0xFFFF:
        head = struct.pack(">BBH", 0x80 | op, 126, n)
    else:
        head = struct.pack(">BBQ", 0x80 | op, 127, n)
    return head + data


def run_command(conns):
    out, err = conns["1"], conns["2"]
    out.sendall(frame(2, b"S42\n") + frame(1, b""))
    total = size if mode == "whole" else size // 2
    sent = 0
    try:
        while sent < total:
            n = min(CHUNK, total - sent)
            err.sendall(frame(2, b"e" * n))
            sent += n
        if mode == "whole":
            err.sendall(frame(1, b""))
    except OSError:
        pass
    # The server's side ends here (no close frame either way); what the client sends is still
    # read by the stream's own thread, which closes the socket when the client goes.
    try:
        err.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    with lock:
        state["done"] = True
        lock.notify_all()


def upgrade(sock, target, headers):
    secret = target.partition("secret=")[2].split("&", 1)[0]
    name = next((k for k, v in SECRETS.items() if v == secret), None)
    if name is None:
        answer(sock, 404, {"type": "error", "error": "not found", "error_code": 404})
        return
    accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + GUID).digest())
    sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    with lock:
        state["conns"][name] = sock
        ready = len(state["conns"]) == 4
    if ready:
        threading.Thread(target=run_command, args=(dict(state["conns"]),), daemon=True).start()
    # What the client sends (stdin's end, a close) is read and dropped until it goes.
    try:
        while sock.recv(65536):
            pass
    except OSError:
        pass
    sock.close()


def serve(sock):
    f = sock.makefile("rb")
    while True:
        req = read_request(f)
        if req is None:
            return
        method, target, headers, body = req
        path = target.split("?", 1)[0]
        if method == "POST" and path.endswith("/exec"):
            with lock:
                state["op"] += 1
                state["conns"] = {}
                state["done"] = False
                op = "0000000%d" % state["op"]
            answer(sock, 202, {"type": "async", "status": "Operation created", "status_code": 100,
                               "operation": "/1.0/operations/" + op,
                               "metadata": {"id": op, "class": "websocket", "status": "Running",
                                            "metadata": {"fds": SECRETS}}})
        elif path.endswith("/websocket"):
            upgrade(sock, target, headers)
            return
        elif path.endswith("/wait"):
            with lock:
                lock.wait_for(lambda: state["done"], timeout=30)
                done = state["done"]
            md = {"id": "op", "status": "Success" if done else "Running",
                  "status_code": 200 if done else 103, "err": "",
                  "metadata": {"return": 0} if done else {}}
            answer(sock, 200, {"type": "sync", "status": "Success", "status_code": 200,
                               "metadata": md})
        else:
            answer(sock, 404, {"type": "error", "error": "not found", "error_code": 404})


def main():
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sys.argv[1])
    srv.listen(16)

    def accept_loop():
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.read()
    os.unlink(sys.argv[1])


main()
