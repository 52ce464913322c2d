#!/usr/bin/env python3
"""An HTTP proxy on loopback in front of a storage server that lets the first N uploads (PUT)
through and then cuts the connection of every later one without an answer: the network lost
in the middle of a push. With LOG_FILE it also writes "METHOD PATH" for every request there, so
a test can count what a push asked. Usage: cut-proxy.py UPSTREAM_URL N PORT_FILE [LOG_FILE]
(writes its port to PORT_FILE, then serves until killed)."""
import http.client
import os
import http.server
import socketserver
import sys
import threading
import urllib.parse

upstream = urllib.parse.urlsplit(sys.argv[1])
allowed = int(sys.argv[2])
log = open(sys.argv[4], "a", buffering=1) if len(sys.argv) > 4 else None
puts = 0
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        global puts
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        if log:
            with lock:
                log.write("%s %s\n" % (self.command, self.path.split("?")[0]))
        if self.command == "PUT":
            with lock:
                puts += 1
                cut = puts > allowed
            if cut:
                self.close_connection = True
                return
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        headers["Host"] = upstream.netloc
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_HEAD = do_PUT = forward


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


srv = Server(("127.0.0.1", 0), Handler)
with open(sys.argv[3] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[3] + ".tmp", sys.argv[3])
srv.serve_forever()
