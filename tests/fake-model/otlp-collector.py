#!/usr/bin/env python3
"""A test OTLP/HTTP collector on 127.0.0.1: otlp-collector.py MODE DIR

MODE ok: every POST body is saved as DIR/N.bin (N from 1) with its path and content type in
DIR/N.meta and its headers in DIR/N.headers (JSON), answered 200; MODE 500: answered 500; MODE slow: answered 200 after 100 s (then DIR/answered exists). Prints its
port on the first line of stdout and exits by itself after 120 s.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE, DIR = sys.argv[1], sys.argv[2]
count = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        global count
        n = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(n) if n <= (64 << 20) else b""
        with lock:
            count += 1
            k = count
        with open(os.path.join(DIR, "%d.bin" % k), "wb") as f:
            f.write(body)
        with open(os.path.join(DIR, "%d.meta" % k), "w") as f:
            f.write("%s %s\n" % (self.path, self.headers.get("content-type", "")))
        with open(os.path.join(DIR, "%d.headers" % k), "w") as f:
            json.dump({h.lower(): v for h, v in self.headers.items()}, f)
        if MODE == "slow":
            time.sleep(100)
            open(os.path.join(DIR, "answered"), "w").close()
        status = 500 if MODE == "500" else 200
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()
        except OSError:
            pass


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
threading.Timer(120, srv.shutdown).start()
srv.serve_forever()
