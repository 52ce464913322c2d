#!/usr/bin/env python3
"""An HTTP server for the remote layer's tests (src/sandbox/wire/), Python standard library only.

Usage: http-fake.py [--tls CERT KEY [--client-ca CA] [--reset-after-handshake]] [--token-file FILE]
It listens on 127.0.0.1 on a port the kernel picks, prints the port on a line of its own, serves
each connection in a thread, and stops when its standard input closes.

With --tls it speaks HTTPS with CERT and KEY; with --client-ca it also requires a client
certificate signed by CA. With --reset-after-handshake it ends every connection with a reset
as soon as the TLS handshake is done, before reading a request (as a TLS 1.3 server that
refuses the client's certificate may look when its alert is lost). With --token-file, requests must carry "Authorization: Bearer T" (or an
X-API-Key: T, or basic auth with password T) where T is the file's content, read on each request;
else 401 with a body that repeats what was sent (a careless server: the tests check that sbx never
repeats a credential).

Paths:
  /json                   200 {"ok": true, "method", "body_len", "auth"} ("auth": whether a
                          credential came)
  /status/N?shape=S       status N with an error body in shape S: k8s, lxd, docker, connect,
                          nested, text, html, echo (repeats the request's credential), none
  /retry/KEY?n=K&code=C&after=A
                          the first K requests of KEY answer C (default 503) with Retry-After: A
                          (when given), then 200 {"attempts": count}
  /stream?n=N             N NDJSON lines {"i": i} sent as separate chunks
  /sse?n=N                N server-sent events "tick" with data i, as separate chunks
  /big?n=BYTES            a body of BYTES bytes (byte i = i % 251)
  /upload                 200 {"len", "sum"} of the request body (sum: bytes added modulo 2^32),
                          chunked bodies too
  /slow?ms=MS             answers after MS milliseconds
  /hijack                 (POST, "Upgrade: tcp") 101, then echoes bytes until the client shuts
                          its side, then sends "bye:<count>" and closes; with ?status=200 answers
                          200 instead of 101
  /cut                    101 to an upgrade, then "partial" and the connection is closed
"""
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

counters = {}
lock = threading.Lock()
token_file = None


def shaped(shape, code, said):
    if shape == "k8s":
        return "application/json", json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                               "message": said, "reason": "Forbidden", "code": code})
    if shape == "lxd":
        return "application/json", json.dumps({"type": "error", "error": said, "error_code": code})
    if shape == "docker":
        return "application/json", json.dumps({"message": said})
    if shape == "connect":
        return "application/json", json.dumps({"code": "permission_denied", "message": said})
    if shape == "nested":
        return "application/json", json.dumps({"error": {"message": said, "type": "x"}})
    if shape == "text":
        return "text/plain", said + "\nsecond line"
    if shape == "html":
        return "text/html", "<html><body>" + said + "</body></html>"
    return "text/plain", ""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, body, ctype="application/json", headers=()):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def credential(self):
        a = self.headers.get("Authorization", "")
        if a.startswith("Bearer "):
            return a[7:]
        if a.startswith("Basic "):
            import base64
            try:
                return base64.b64decode(a[6:]).decode().split(":", 1)[1]
            except Exception:
                return a
        return self.headers.get("X-API-Key", "")

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n) if n else b""

    def handle_any(self):
        u = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        body = self.read_body()
        if token_file:
            with open(token_file) as f:
                want = f.read().strip()
            if self.credential() != want:
                self.send(401, json.dumps({"message": "token '%s' is not valid" % self.credential()}))
                return
        parts = u.path.strip("/").split("/")
        if parts[0] == "json":
            self.send(200, json.dumps({"ok": True, "method": self.command, "body_len": len(body),
                                       "auth": bool(self.credential())}))
        elif parts[0] == "conn":  # the client's port: one connection reused answers one port
            self.send(200, json.dumps({"port": self.client_address[1]}))
        elif parts[0] == "status":
            code = int(parts[1])
            said = "the server says no"
            if q.get("shape") == "echo":
                said = "you sent " + (self.headers.get("Authorization") or
                                      self.headers.get("X-API-Key", ""))
                ctype, text = shaped("k8s", code, said)
            else:
                ctype, text = shaped(q.get("shape", "none"), code, said)
            self.send(code, text, ctype)
        elif parts[0] == "retry":
            key = parts[1]
            with lock:
                counters[key] = counters.get(key, 0) + 1
                count = counters[key]
            if count <= int(q.get("n", "1")):
                hdrs = [("Retry-After", q["after"])] if "after" in q else []
                self.send(int(q.get("code", "503")), json.dumps({"message": "busy"}), headers=hdrs)
            else:
                self.send(200, json.dumps({"attempts": count}))
        elif parts[0] == "stream":
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(int(q.get("n", "3"))):
                line = (json.dumps({"i": i}) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif parts[0] == "sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(int(q.get("n", "3"))):
                ev = ("event: tick\ndata: %d\n\n" % i).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif parts[0] == "big":
            n = int(q.get("n", "0"))
            self.send(200, bytes(i % 251 for i in range(n)), "application/octet-stream")
        elif parts[0] == "upload":
            self.send(200, json.dumps({"len": len(body), "sum": sum(body) & 0xFFFFFFFF}))
        elif parts[0] == "slow":
            time.sleep(int(q.get("ms", "1000")) / 1000)
            self.send(200, "{}")
        elif parts[0] in ("hijack", "cut"):
            self.hijack(parts[0], q)
        else:
            self.send(404, json.dumps({"message": "no route " + u.path}))

    def hijack(self, what, q):
        status = int(q.get("status", "101"))
        self.send_response(status)
        if status == 101:
            self.send_header("Connection", "Upgrade")
            self.send_header("Upgrade", "tcp")
        self.send_header("Content-Type", "application/vnd.docker.raw-stream")
        self.end_headers()
        self.wfile.flush()
        conn = self.connection
        if what == "cut":
            conn.sendall(b"partial")
            self.close_connection = True
            conn.shutdown(socket.SHUT_RDWR)
            return
        count = 0
        while True:
            try:
                data = conn.recv(65536)
            except (ssl.SSLError, OSError):
                data = b""
            if not data:
                break
            count += len(data)
            conn.sendall(data)
        conn.sendall(b"bye:%d" % count)
        self.close_connection = True
        if isinstance(conn, ssl.SSLSocket):
            try:
                conn = conn.unwrap()  # close_notify, as Go's TLS does on close
            except (ssl.SSLError, OSError):
                pass
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    ctx = None
    reset = False

    def finish_request(self, request, client_address):
        if self.ctx:
            request = self.ctx.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
            try:
                request.do_handshake()
            except (ssl.SSLError, OSError):
                # Let the client read the alert before the connection goes (no reset).
                try:
                    request.shutdown(socket.SHUT_WR)
                    request.settimeout(2)
                    while request.recv(4096):
                        pass
                except OSError:
                    pass
                request.close()
                return
            if self.reset:
                request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                request.close()
                return
        self.RequestHandlerClass(request, client_address, self)


def main():
    global token_file
    args = sys.argv[1:]
    ctx = None
    reset = False
    while args:
        a = args.pop(0)
        if a == "--tls":
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(args.pop(0), args.pop(0))
        elif a == "--client-ca":
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(args.pop(0))
        elif a == "--reset-after-handshake":
            reset = True
        elif a == "--token-file":
            token_file = args.pop(0)
    srv = Server(("127.0.0.1", 0), Handler)
    srv.ctx = ctx
    srv.reset = reset
    print(srv.server_address[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
