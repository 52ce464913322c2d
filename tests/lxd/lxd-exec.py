#!/usr/bin/env python3
"""Run a command in an LXD instance through the REST API and its WebSockets, as the LXD
provider will: POST /1.0/instances/NAME/exec with wait-for-websocket, then one WebSocket per
stream (0 stdin, 1 stdout, 2 stderr) plus the control one, then the operation's exit status.
A small RFC 6455 client on the standard library, over mTLS (client certificate, the cluster
certificate as the only CA).

usage: lxd-exec.py [--project P] [--timeout S] URL INSTANCE -- COMMAND...
  Certificates from SBX_TEST_LXD_CLIENT_CERT, SBX_TEST_LXD_CLIENT_KEY, SBX_TEST_LXD_SERVER_CERT.
  Relays its stdin, stdout and stderr; exits with the command's status, or prints
  "lxd-exec: <why>" and exits 125 when the exec itself fails (no status from the server).
"""
import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import sys
import threading
import urllib.parse

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_FRAME = 16 << 20


class ExecError(Exception):
    pass


def tls_context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(os.environ["SBX_TEST_LXD_SERVER_CERT"])
    ctx.load_cert_chain(os.environ["SBX_TEST_LXD_CLIENT_CERT"], os.environ["SBX_TEST_LXD_CLIENT_KEY"])
    return ctx


class Conn:
    """One TLS connection: an HTTP/1.1 request, then optionally WebSocket frames."""

    def __init__(self, ctx, host, port, timeout):
        raw = socket.create_connection((host, port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname=host)
        self.host = host
        self.buf = b""
        self.wlock = threading.Lock()

    def _recv(self):
        data = self.sock.recv(65536)
        if not data:
            raise ExecError("connection closed by the server")
        self.buf += data

    def _take(self, n):
        while len(self.buf) < n:
            self._recv()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def request(self, method, path, body=None, headers=()):
        data = json.dumps(body).encode() if body is not None else b""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", f"Content-Length: {len(data)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        head.extend(headers)
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 65536:
                raise ExecError("response header too large")
            self._recv()
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        return status, hdrs

    def json_request(self, method, path, body=None):
        status, hdrs = self.request(method, path, body)
        if "content-length" not in hdrs:
            raise ExecError(f"{method} {path}: no Content-Length in the answer")
        n = int(hdrs["content-length"])
        if n > MAX_FRAME:
            raise ExecError(f"{method} {path}: answer too large")
        doc = json.loads(self._take(n))
        if doc.get("type") == "error":
            raise ExecError(f"{method} {path}: {doc.get('error')} ({doc.get('error_code')})")
        return status, doc

    def upgrade(self, path):
        key = base64.b64encode(os.urandom(16))
        status, hdrs = self.request("GET", path, None, [
            "Upgrade: websocket", "Connection: Upgrade",
            "Sec-WebSocket-Key: " + key.decode(), "Sec-WebSocket-Version: 13"])
        want = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        if status != 101 or hdrs.get("sec-websocket-accept") != want:
            raise ExecError(f"websocket {path.split('?')[0]}: HTTP {status}, not an upgrade")

    def send_frame(self, opcode, payload=b""):
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        with self.wlock:
            self.sock.sendall(head + mask + masked)

    def recv_message(self):
        """(opcode, payload) of the next data or close message; answers pings."""
        parts, first = [], None
        while True:
            b0, b1 = self._take(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._take(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._take(8))[0]
            if n > MAX_FRAME:
                raise ExecError("websocket frame too large")
            mask = self._take(4) if b1 & 0x80 else None
            data = self._take(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            op = b0 & 0x0F
            if op == 0x9:
                self.send_frame(0xA, data)
                continue
            if op == 0xA:
                continue
            if op == 0x8:
                return op, data
            if first is None:
                first = op
            parts.append(data)
            if b0 & 0x80:
                return first, b"".join(parts)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def main():
    args = sys.argv[1:]
    project, timeout = "default", 60.0
    while args and args[0].startswith("--") and args[0] != "--":
        opt = args.pop(0)
        if opt == "--project":
            project = args.pop(0)
        elif opt == "--timeout":
            timeout = float(args.pop(0))
        else:
            raise SystemExit(f"lxd-exec: unknown option '{opt}'")
    if len(args) < 4 or args[2] != "--":
        raise SystemExit(__doc__)
    url, name, command = urllib.parse.urlsplit(args[0]), args[1], args[3:]
    ctx = tls_context()
    host, port = url.hostname, url.port or 8443
    q = urllib.parse.quote
    api = Conn(ctx, host, port, timeout)
    _, op = api.json_request("POST", f"/1.0/instances/{q(name)}/exec?project={q(project)}", {
        "command": command, "environment": {}, "interactive": False,
        "wait-for-websocket": True, "record-output": False})
    op_path = urllib.parse.urlsplit(op["operation"]).path
    fds = op["metadata"]["metadata"]["fds"]
    socks = {}
    for fd in ("control", "0", "1", "2"):
        c = Conn(ctx, host, port, timeout)
        c.upgrade(f"{op_path}/websocket?secret={q(fds[fd])}&project={q(project)}")
        socks[fd] = c
    errors = []

    def pump_out(fd, out):
        try:
            while True:
                opcode, data = socks[fd].recv_message()
                if opcode == 0x8 or (opcode == 0x1 and not data):
                    return  # close, or the empty text message LXD sends at end of stream
                out.write(data)
                out.flush()
        except (OSError, ExecError) as e:
            errors.append(f"stream {fd}: {e}")

    def pump_in():
        try:
            while True:
                data = os.read(0, 65536)
                if not data:
                    break
                socks["0"].send_frame(0x2, data)
            socks["0"].send_frame(0x1, b"")  # end of stdin
        except OSError:
            pass

    readers = [threading.Thread(target=pump_out, args=(fd, out), daemon=True)
               for fd, out in (("1", sys.stdout.buffer), ("2", sys.stderr.buffer))]
    for t in readers:
        t.start()
    threading.Thread(target=pump_in, daemon=True).start()
    for t in readers:
        t.join()
    try:
        _, doc = api.json_request("GET", f"{op_path}/wait?timeout={int(timeout)}&project={q(project)}")
    except (OSError, ExecError) as e:
        errors.append(f"operation: {e}")
        raise ExecError("; ".join(errors))
    md = doc["metadata"]
    if md.get("status") != "Success" or "return" not in (md.get("metadata") or {}):
        errors.append(f"operation {md.get('status')}: {md.get('err') or 'no exit status'}")
        raise ExecError("; ".join(errors))
    for c in socks.values():
        c.close()
    return md["metadata"]["return"]


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ExecError, KeyError, ValueError) as e:
        print(f"lxd-exec: {e}", file=sys.stderr)
        sys.exit(125)
