#!/usr/bin/env python3
"""A small WebSocket (RFC 6455) server for sbx's framing tests, Python standard library only.

It listens on 127.0.0.1 on a port the kernel picks, prints that port on a line of its own, and
serves each connection in a thread. It stops when its standard input closes (the test that
started it has gone). With "--tls CERT KEY" it speaks TLS (wss).

The request path picks the behaviour:
  /echo       echo text and binary messages; answer pings; commands in text messages:
                cmd:fragment          send "fragmented" in three fragments with a ping between
                cmd:large N           send one binary message of N bytes (byte i = i % 251)
                cmd:ping DATA         ping with DATA, then send "pong DATA" if the pong matched
                cmd:close CODE REASON close with CODE and REASON, wait for the client's close
                cmd:expect-close      tell ("closed CODE") what close the client sends next
  /bad-accept answer the handshake with a wrong Sec-WebSocket-Accept
  /masked     send a masked frame (only clients mask)
  /oversized  send a binary frame claiming 100 MiB
  /refuse     answer 403 Forbidden
  /mute       read everything, answer nothing (not even pings): a peer gone silent
A query "?proto=NAME" makes the server choose that subprotocol (it must have been offered);
otherwise it chooses the first one offered.
"""
import base64
import hashlib
import os
import socket
import ssl
import struct
import sys
import threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return None, b""
        data += chunk
        if len(data) > 65536:
            return None, b""
    head, rest = data.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


class Conn:
    def __init__(self, sock, rest):
        self.sock = sock
        self.buf = rest

    def need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self):
        b0, b1 = self.need(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self.need(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self.need(8))[0]
        if not b1 & 0x80:
            raise ValueError("client frame not masked")
        mask = self.need(4)
        data = bytes(b ^ mask[i & 3] for i, b in enumerate(self.need(n)))
        return b0 >> 7, b0 & 0x0F, data

    def read_message(self):
        """Data messages reassembled; pings answered; (opcode, payload) of data or close."""
        parts, first = [], None
        while True:
            fin, op, data = self.read_frame()
            if op == 0x9:
                self.send(0xA, data)
                continue
            if op == 0xA:
                return op, data
            if op == 0x8:
                return op, data
            if op in (1, 2):
                first = op
            parts.append(data)
            if fin:
                return first, b"".join(parts)

    def send(self, op, data, fin=True, masked=False):
        n = len(data)
        head = bytes([(0x80 if fin else 0) | op])
        mbit = 0x80 if masked else 0
        if n < 126:
            head += bytes([mbit | n])
        elif n <= 0xFFFF:
            head += bytes([mbit | 126]) + struct.pack(">H", n)
        else:
            head += bytes([mbit | 127]) + struct.pack(">Q", n)
        if masked:
            mask = b"\x01\x02\x03\x04"
            data = bytes(b ^ mask[i & 3] for i, b in enumerate(data))
            head += mask
        self.sock.sendall(head + data)

    def close(self, code, reason=b""):
        self.send(0x8, struct.pack(">H", code) + reason)


def command(c, text):
    words = text.split(" ", 2)
    if words[0] == "cmd:fragment":
        c.send(0x1, b"frag", fin=False)
        c.send(0x9, b"between")
        c.send(0x0, b"ment", fin=False)
        c.send(0x0, b"ed", fin=True)
    elif words[0] == "cmd:large":
        n = int(words[1])
        c.send(0x2, bytes(i % 251 for i in range(n)))
    elif words[0] == "cmd:ping":
        data = text[len("cmd:ping "):].encode()
        c.send(0x9, data)
        op, got = c.read_message()
        c.send(0x1, b"pong " + got if op == 0xA and got == data else b"pong mismatch")
    elif words[0] == "cmd:close":
        c.close(int(words[1]), words[2].encode() if len(words) > 2 else b"")
        op, got = c.read_message()
        return "closed"
    elif words[0] == "cmd:expect-close":
        op, got = c.read_message()
        code = struct.unpack(">H", got[:2])[0] if len(got) >= 2 else 1005
        c.close(code) if op == 0x8 else None
        return "closed"
    return None


def handshake(sock, head, rest):
    lines = head.split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    path, _, query = target.partition("?")
    if path == "/refuse":
        sock.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        return None, path
    key = headers.get("sec-websocket-key", "").encode()
    if (method != "GET" or headers.get("upgrade", "").lower() != "websocket"
            or headers.get("sec-websocket-version") != "13" or len(base64.b64decode(key)) != 16):
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        return None, path
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    if path == "/bad-accept":
        accept = base64.b64encode(hashlib.sha1(key + b"x").digest())
    offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    chosen = offered[0] if offered else None
    if query.startswith("proto="):
        chosen = query[len("proto="):]
    answer = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n")
    if chosen:
        answer += b"Sec-WebSocket-Protocol: " + chosen.encode() + b"\r\n"
    sock.sendall(answer + b"\r\n")
    return Conn(sock, rest), path


def serve(sock, ctx=None):
    try:
        if ctx:
            sock = ctx.wrap_socket(sock, server_side=True)
        head, rest = read_head(sock)
        if head is None:
            return
        c, path = handshake(sock, head, rest)
        if c is None:
            return
        if path == "/masked":
            c.send(0x1, b"masked", masked=True)
        elif path == "/oversized":
            sock.sendall(b"\x82\x7f" + struct.pack(">Q", 100 << 20) + b"x" * 1000)
        while path == "/mute" and sock.recv(65536):
            pass
        while path == "/echo":
            op, data = c.read_message()
            if op == 0x8:
                code = data[:2] if len(data) >= 2 else b""
                c.send(0x8, code)
                break
            if op == 0x1 and data.startswith(b"cmd:"):
                if command(c, data.decode()) == "closed":
                    break
                continue
            if op in (0x1, 0x2):
                c.send(op, data)
        # let the client read what was sent before the connection goes
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
    except (EOFError, ConnectionError, ValueError, OSError):
        pass
    finally:
        sock.close()


def main():
    ctx = None
    if sys.argv[1:2] == ["--tls"]:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    print(srv.getsockname()[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, ctx), daemon=True).start()


if __name__ == "__main__":
    main()
