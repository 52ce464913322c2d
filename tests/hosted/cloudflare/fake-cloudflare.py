#!/usr/bin/env python3
"""A loopback fake of Cloudflare's Sandbox Bridge worker for tests: the bridge's HTTP API, whose
commands and files are real, in local sbx sandboxes.

usage: fake-cloudflare.py --state-dir DIR [--port N] [--sbx PATH] [--tls-cert FILE --tls-key FILE]

One listener on 127.0.0.1 (port 0: a free one, written to DIR/port), HTTPS with --tls-cert. The key the worker wants
(its SANDBOX_API_KEY) is $CLOUDFLARE_SANDBOX_API_KEY; unset, no key is asked for, as the
bridge does. The routes, their checks and their answers follow the bridge's own route code in
@cloudflare/sandbox/bridge (the version tests/hosted/cloudflare/lib.sh pins):

  POST   /v1/sandbox                    {"id": 26 lowercase base32 characters}
  POST   /v1/sandbox/{id}/exec          {"argv": [...], "timeout_ms"?, "cwd"?} -> SSE events
                                        stdout/stderr (base64), exit {"exit_code"}, error
  GET    /v1/sandbox/{id}/file/{path}   the file's bytes (path without its leading slash)
  PUT    /v1/sandbox/{id}/file/{path}   the body becomes the file -> {"ok": true}
  GET    /v1/sandbox/{id}/running       {"running": bool}
  POST   /v1/sandbox/{id}/persist       a tar of /workspace (?excludes=a,b)
  POST   /v1/sandbox/{id}/hydrate       a tar body unpacked into /workspace -> {"ok": true}
  POST   /v1/sandbox/{id}/tunnel/{port} {"id", "port", "url", "hostname", "createdAt"} (the
                                        same tunnel again for the same port)
  DELETE /v1/sandbox/{id}/tunnel/{port} 204
  DELETE /v1/sandbox/{id}               204

As in the bridge, a sandbox id names a container that the worker's pool starts at the first
request that needs one: any well-formed id works, and a sandbox whose container went away (the
knob "expire") comes back empty. Each container is an sbx sandbox whose workspace root is
/workspace; a command runs as the bridge runs it, its argv quoted into one bash line in
/workspace. Paths are resolved as the bridge does (lexically, inside /workspace). A tunnel's URL
is not a trycloudflare.com one: it is sbx's own relay to the sandbox's port on loopback (`sbx
sandbox port`), so a client on this host reaches the port as it would through the tunnel.

Errors are the bridge's {"error": ..., "code": ...}. Test knobs (no key, not the bridge's):
POST /_fake/knobs with {"rate_limit_next": N, "retry_after": S} (the next N requests get 429
with Retry-After: S, as Cloudflare's edge answers a limited worker), {"capacity_next": N} (the
next N requests that need a container get the pool's 503 capacity_exceeded), {"expire": ID}
(the container of sandbox ID goes away, as a slept container does); GET /_fake/stats gives
{"requests", "rate_limited", "containers", "execs"}.
"""
import argparse
import base64
import http.server
import json
import os
import re
import secrets
import signal
import ssl
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse

ROOT = "/workspace"
MAX_WRITE = 32 * 1024 * 1024
MAX_HYDRATE = 32 * 1024 * 1024
MAX_JSON = 4 << 20
ID_RE = re.compile(r"^[a-z2-7]{1,128}$")
SAFE_ARG = re.compile(r"^[A-Za-z0-9@%+=:,./-]+$")


def log(msg):
    sys.stderr.write("fake-cloudflare: %s\n" % msg)
    sys.stderr.flush()


def shell_quote(arg):
    """An argument as the bridge quotes it into its bash line."""
    if SAFE_ARG.match(arg):
        return arg
    s = arg.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return "$'" + s.replace("\r", "\\r").replace("\t", "\\t") + "'"


def resolve_workspace_path(p):
    """The bridge's lexical resolution: the absolute path, or None when it leaves /workspace."""
    if not p.startswith("/"):
        p = ROOT + "/" + p
    parts = []
    for seg in p.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if parts:
                parts.pop()
        else:
            parts.append(seg)
    out = "/" + "/".join(parts)
    if out == ROOT or out.startswith(ROOT + "/"):
        return out
    return None


def base32_id():
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    bits, value, out = 0, 0, []
    for b in secrets.token_bytes(16):
        value = (value << 8) | b
        bits += 8
        while bits >= 5:
            out.append(alphabet[(value >> (bits - 5)) & 31])
            bits -= 5
    if bits:
        out.append(alphabet[(value << (5 - bits)) & 31])
    return "".join(out)


class BridgeError(Exception):
    def __init__(self, status, error, code, headers=None):
        super().__init__(error)
        self.status, self.error, self.code, self.headers = status, error, code, headers or {}


class Sbx:
    def __init__(self, binary, state_dir):
        self.binary = binary
        self.env = dict(os.environ)
        self.env.pop("CLOUDFLARE_SANDBOX_API_KEY", None)
        for var, sub in (("XDG_RUNTIME_DIR", "run"), ("SBX_WORKSPACES", "ws"),
                         ("SBX_STOPPED", "stopped"), ("SBX_SNAPSHOTS", "snapshots"),
                         ("XDG_STATE_HOME", "state")):
            p = os.path.join(state_dir, sub)
            os.makedirs(p, mode=0o700, exist_ok=True)
            self.env[var] = p
        self.manifest = os.path.join(state_dir, "manifest.yaml")
        with open(self.manifest, "w") as f:
            f.write("version: 1\nroot: %s\n" % ROOT)

    def run(self, *args, input=None, timeout=300):
        return subprocess.run([self.binary] + list(args), input=input, capture_output=True,
                              env=self.env, timeout=timeout)

    def exec_argv(self, sbx_id, argv, stdin=False):
        out = [self.binary, "sandbox", "exec", "--keep-background"]
        if stdin:
            out.append("-i")
        return out + [sbx_id, "--"] + list(argv)

    def sh(self, sbx_id, script, *args, input=None, timeout=300):
        argv = self.exec_argv(sbx_id, ["/bin/sh", "-c", script, "sh"] + list(args),
                              stdin=input is not None)
        return subprocess.run(argv, input=input, capture_output=True, env=self.env,
                              timeout=timeout)


class Fake:
    def __init__(self, sbx, api_key):
        self.sbx = sbx
        self.api_key = api_key
        self.lock = threading.Lock()
        self.containers = {}   # sandbox id -> sbx sandbox id
        self.tunnels = {}      # (sandbox id, port) -> the tunnel's JSON
        self.id_locks = {}
        self.knobs = {"rate_limit_next": 0, "retry_after": 1, "capacity_next": 0}
        self.stats = {"requests": 0, "rate_limited": 0, "execs": 0}

    def id_lock(self, sid):
        with self.lock:
            return self.id_locks.setdefault(sid, threading.Lock())

    def container(self, sid):
        """The pool's getContainer: the sandbox's container, started when it has none."""
        with self.lock:
            if self.knobs["capacity_next"] > 0:
                self.knobs["capacity_next"] -= 1
                raise BridgeError(503, "instance limit reached: no container is free",
                                  "capacity_exceeded")
        with self.id_lock(sid):
            with self.lock:
                have = self.containers.get(sid)
            if have:
                return have
            r = self.sbx.run("sandbox", "create", "--manifest", self.sbx.manifest)
            if r.returncode != 0:
                raise BridgeError(502, "pool error: " + r.stderr.decode(errors="replace").strip(),
                                  "pool_error")
            sbx_id = r.stdout.decode().strip().splitlines()[-1]
            with self.lock:
                self.containers[sid] = sbx_id
            log("sandbox %s is sbx sandbox %s" % (sid, sbx_id))
            return sbx_id

    def lookup(self, sid):
        with self.lock:
            return self.containers.get(sid)

    def destroy(self, sid):
        with self.id_lock(sid):
            with self.lock:
                sbx_id = self.containers.pop(sid, None)
            with self.lock:
                for k in [k for k in self.tunnels if k[0] == sid]:
                    del self.tunnels[k]
            if sbx_id:
                self.sbx.run("sandbox", "rm", sbx_id)
                log("sandbox %s removed (sbx sandbox %s)" % (sid, sbx_id))

    def shutdown(self):
        with self.lock:
            ids = list(self.containers)
        for sid in ids:
            self.destroy(sid)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-cloudflare"
    fake = None

    def log_message(self, fmt, *args):
        if os.environ.get("FAKE_CLOUDFLARE_VERBOSE"):
            sys.stderr.write("fake-cloudflare: " + fmt % args + "\n")

    def iter_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                data = self.rfile.read(size)
                self.rfile.readline(8)
                yield data
        else:
            n = int(self.headers.get("Content-Length") or 0)
            while n > 0:
                data = self.rfile.read(min(n, 1 << 16))
                if not data:
                    return
                n -= len(data)
                yield data

    def read_body(self, limit, what):
        self.drained = True
        out = bytearray()
        over = False
        for chunk in self.iter_body():
            if not over:
                out += chunk
                over = len(out) > limit
        if over:
            raise BridgeError(413 if what == "file" else 400,
                              "payload too large: more than %d bytes" % limit,
                              "payload_too_large" if what == "file" else "invalid_request")
        return bytes(out)

    def send_bytes(self, status, body, ctype, headers=None):
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status, obj, headers=None):
        self.send_bytes(status, json.dumps(obj, separators=(",", ":")).encode(),
                        "application/json", headers)

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        self.drained = False  # one handler serves every request of a kept-alive connection
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        query = urllib.parse.parse_qs(url.query)
        try:
            if path.startswith("/_fake/"):
                return self.knob(method, path)
            fake = self.fake
            with fake.lock:
                fake.stats["requests"] += 1
                limited = fake.knobs["rate_limit_next"] > 0
                if limited:
                    fake.knobs["rate_limit_next"] -= 1
                    fake.stats["rate_limited"] += 1
            if limited:
                self.drain()
                raise BridgeError(429, "rate limited: too many requests to this worker",
                                  "rate_limited", {"Retry-After": str(fake.knobs["retry_after"])})
            self.route(method, path, query)
        except BridgeError as e:
            self.drain()
            self.send_json(e.status, {"error": e.error, "code": e.code}, e.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def drain(self):
        if not self.drained:
            self.drained = True
            for _ in self.iter_body():
                pass

    def authenticate(self):
        if not self.fake.api_key:
            return
        h = self.headers.get("Authorization", "")
        given = h[7:] if h.lower().startswith("bearer ") else ""
        if not secrets.compare_digest(given.encode(), self.fake.api_key.encode()):
            raise BridgeError(401, "Unauthorized", "unauthorized")

    def knob(self, method, path):
        fake = self.fake
        if path == "/_fake/knobs" and method == "POST":
            data = json.loads(self.read_body(MAX_JSON, "json") or b"{}")
            for k, v in data.items():
                if k == "expire":
                    fake.destroy(v)
                    continue
                with fake.lock:
                    if k not in fake.knobs:
                        return self.send_json(400, {"error": "unknown knob " + k})
                    fake.knobs[k] = int(v)
            with fake.lock:
                return self.send_json(200, dict(fake.knobs))
        if path == "/_fake/stats" and method == "GET":
            with fake.lock:
                return self.send_json(200, dict(fake.stats, containers=len(fake.containers)))
        raise BridgeError(404, "no such knob", "not_found")

    def route(self, method, path, query):
        if path == "/v1/sandbox" and method == "POST":
            self.authenticate()
            self.drain()
            return self.send_json(200, {"id": base32_id()})
        parts = path.split("/")
        if len(parts) < 4 or parts[1] != "v1" or parts[2] != "sandbox":
            self.drain()
            return self.send_bytes(404, b"404 Not Found", "text/plain; charset=UTF-8")
        sid = parts[3]
        if sid and not ID_RE.match(sid):
            raise BridgeError(400, "Invalid sandbox ID format", "invalid_request")
        self.authenticate()
        rest = parts[4:]
        if not rest:
            if method != "DELETE":
                self.drain()
                return self.send_bytes(404, b"404 Not Found", "text/plain; charset=UTF-8")
            self.fake.destroy(sid)
            return self.send_bytes(204, b"", None)
        op = rest[0]
        known = {("POST", "exec"), ("GET", "file"), ("PUT", "file"), ("GET", "running"),
                 ("POST", "persist"), ("POST", "hydrate"), ("POST", "tunnel"),
                 ("DELETE", "tunnel")}
        if (method, op) not in known or (op not in ("file", "tunnel") and len(rest) != 1) or \
                (op == "tunnel" and len(rest) != 2):
            self.drain()
            return self.send_bytes(404, b"404 Not Found", "text/plain; charset=UTF-8")
        sbx_id = self.fake.container(sid)
        if op == "exec":
            return self.exec(sbx_id)
        if op == "file":
            marker = "/v1/sandbox/%s/file/" % sid
            rel = path[len(marker):] if path.startswith(marker) else ""
            return self.file(method, sbx_id, urllib.parse.unquote(rel))
        if op == "tunnel":
            return self.tunnel(method, sid, sbx_id, rest[1])
        if op == "running":
            r = self.fake.sbx.sh(sbx_id, "true", timeout=60)
            return self.send_json(200, {"running": r.returncode == 0})
        if op == "persist":
            return self.persist(sbx_id, query)
        return self.hydrate(sbx_id)

    def exec(self, sbx_id):
        try:
            body = json.loads(self.read_body(MAX_JSON, "json"))
        except ValueError:
            raise BridgeError(400, "Invalid JSON body", "invalid_request")
        argv = body.get("argv") if isinstance(body, dict) else None
        if not isinstance(argv, list) or not argv:
            raise BridgeError(400, "argv must be a non-empty array", "invalid_request")
        cwd = ROOT
        if isinstance(body.get("cwd"), str):
            cwd = resolve_workspace_path(body["cwd"])
            if cwd is None:
                raise BridgeError(403, "cwd must resolve to a location within /workspace",
                                  "invalid_request")
        timeout_ms = body.get("timeout_ms")
        line = " ".join(shell_quote(str(a)) for a in argv)
        with self.fake.lock:
            self.fake.stats["execs"] += 1
        # The container's session: bash in the working directory, the command line as given.
        p = subprocess.Popen(
            self.fake.sbx.exec_argv(sbx_id, ["/bin/bash", "-c", 'cd -- "$0" && eval "$1"',
                                             cwd, line]),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.fake.sbx.env, close_fds=True)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        wlock = threading.Lock()
        gone = [False]

        def event(name, data):
            payload = "\n".join("data: " + l for l in data.split("\n"))
            chunk = ("event: %s\n%s\n\n" % (name, payload)).encode()
            with wlock:
                if gone[0]:
                    return
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                except OSError:
                    gone[0] = True  # the client left; the command goes on, as in a container

        def pump(f, name):
            while True:
                b = os.read(f.fileno(), 65536)
                if not b:
                    break
                event(name, base64.b64encode(b).decode())

        readers = [threading.Thread(target=pump, args=(p.stdout, "stdout"), daemon=True),
                   threading.Thread(target=pump, args=(p.stderr, "stderr"), daemon=True)]
        for t in readers:
            t.start()
        timed_out = False
        try:
            p.wait(timeout=timeout_ms / 1000 if isinstance(timeout_ms, (int, float)) and
                   timeout_ms > 0 else None)
        except subprocess.TimeoutExpired:
            timed_out = True
            p.kill()  # the exec client: sbx's supervisor ends the command with it
            p.wait()
        for t in readers:
            t.join()
        p.stdout.close()
        p.stderr.close()
        if timed_out:
            event("error", json.dumps({"error": "Command timed out after %dms" % timeout_ms,
                                       "code": "exec_error"}, separators=(",", ":")))
        else:
            event("exit", json.dumps({"exit_code": p.returncode}, separators=(",", ":")))
        with wlock:
            if not gone[0]:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
        self.close_connection = True

    def file(self, method, sbx_id, rel):
        if not rel:
            raise BridgeError(400, "file path must not be empty", "invalid_request")
        abs_path = resolve_workspace_path("/" + rel)
        if abs_path is None:
            raise BridgeError(403, "path must resolve to a location within /workspace",
                              "invalid_request")
        sbx = self.fake.sbx
        if method == "GET":
            r = sbx.sh(sbx_id, 'test -e "$1" || exit 3; test -d "$1" && exit 4; exec cat -- "$1"',
                       abs_path)
            if r.returncode == 3:
                raise BridgeError(404, "File not found: " + abs_path, "workspace_read_not_found")
            if r.returncode != 0:
                why = "is a directory" if r.returncode == 4 else r.stderr.decode(errors="replace")
                raise BridgeError(502, "read failed: %s: %s" % (abs_path, why.strip()),
                                  "exec_transport_error")
            return self.send_bytes(200, r.stdout, "application/octet-stream")
        data = self.read_body(MAX_WRITE, "file")
        r = sbx.sh(sbx_id, 'exec cat > "$1"', abs_path, input=data)
        if r.returncode != 0:
            raise BridgeError(502, "write failed: " + r.stderr.decode(errors="replace").strip(),
                              "workspace_archive_write_error")
        return self.send_json(200, {"ok": True})

    def tunnel(self, method, sid, sbx_id, port_s):
        try:
            port = int(port_s)
        except ValueError:
            port = 0
        if port < 1024 or port > 65535 or port == 3000:
            raise BridgeError(400, "Invalid port", "invalid_request")
        self.drain()
        key = (sid, port)
        if method == "DELETE":
            with self.fake.lock:
                self.fake.tunnels.pop(key, None)
            return self.send_bytes(204, b"", None)
        with self.fake.lock:
            have = self.fake.tunnels.get(key)
        if have:
            return self.send_json(200, have)
        r = self.fake.sbx.run("sandbox", "port", sbx_id, str(port), timeout=60)
        if r.returncode != 0:
            raise BridgeError(502, "tunnel failed: " + r.stderr.decode(errors="replace").strip(),
                              "tunnel_error")
        url = r.stdout.decode().strip().splitlines()[-1]
        t = {"id": secrets.token_hex(16), "port": port, "url": url,
             "hostname": urllib.parse.urlsplit(url).netloc,
             "createdAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())}
        with self.fake.lock:
            t = self.fake.tunnels.setdefault(key, t)
        return self.send_json(200, t)

    def persist(self, sbx_id, query):
        excludes = [e for e in ",".join(query.get("excludes", [])).split(",") if e]
        for e in excludes:
            if ".." in e:
                raise BridgeError(400, 'exclude paths must not contain ".."', "invalid_request")
        self.drain()
        args = []
        for e in excludes:
            args += ["--exclude", "./" + re.sub(r"^\./", "", e)]
        r = self.fake.sbx.sh(sbx_id, 'exec tar cf - "$@" -C /workspace .', *args)
        if r.returncode != 0:
            raise BridgeError(502, "tar failed (exit %d): %s" % (
                r.returncode, r.stderr.decode(errors="replace")), "workspace_archive_read_error")
        return self.send_bytes(200, r.stdout, "application/octet-stream")

    def hydrate(self, sbx_id):
        data = self.read_body(MAX_HYDRATE, "tar")
        if not data:
            raise BridgeError(400, "Empty tar payload", "invalid_request")
        r = self.fake.sbx.sh(sbx_id, "mkdir -p /workspace && exec tar xf - -C /workspace",
                             input=data)
        if r.returncode != 0:
            raise BridgeError(502, "tar extract failed (exit %d): %s" % (
                r.returncode, r.stderr.decode(errors="replace")), "workspace_archive_write_error")
        return self.send_json(200, {"ok": True})


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--sbx", default=os.environ.get("SBX", "sbx"))
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    a = ap.parse_args()
    os.makedirs(a.state_dir, exist_ok=True)
    fake = Fake(Sbx(a.sbx, a.state_dir), os.environ.get("CLOUDFLARE_SANDBOX_API_KEY", ""))
    Handler.fake = fake
    srv = Server(("127.0.0.1", a.port), Handler)
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)

    def stop(*_):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = os.path.join(a.state_dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, os.path.join(a.state_dir, "port"))
    log("listening on 127.0.0.1:%d" % srv.server_address[1])
    try:
        srv.serve_forever()
    finally:
        fake.shutdown()
        log("stopped")


if __name__ == "__main__":
    main()
