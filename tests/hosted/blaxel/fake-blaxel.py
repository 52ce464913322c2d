#!/usr/bin/env python3
"""A loopback fake of Blaxel for tests: the control plane's sandbox resources and each sandbox's
own API (processes and filesystem), whose commands and files are real, in local sbx sandboxes.

usage: fake-blaxel.py --state-dir DIR [--port N] [--image NAME]... [--tls-cert F --tls-key F]
       (the key and workspace the fake accepts: BL_API_KEY and BL_WORKSPACE in its environment)

One listener on 127.0.0.1 (port 0: a free one, written to DIR/port):
  /v0/...                             the control plane (what BL_API_URL names)
  /run/{workspace}/sandboxes/{name}/  the sandbox's own API (each sandbox's metadata.url, and
                                      what BL_RUN_URL + /{workspace}/sandboxes/{name} names)
  Host: {id}.preview.blaxel.test      a preview (spec.url https://{id}.preview.blaxel.test, as
                                      Blaxel's edge names them; requests come to this listener
                                      with that Host): relayed to the preview's port on loopback
                                      inside the sandbox; a private one wants its token as
                                      ?bl_preview_token= or X-Blaxel-Preview-Token
Both want `X-Blaxel-Authorization: Bearer KEY` and `X-Blaxel-Workspace: WORKSPACE` (or
`Authorization: Bearer KEY`, as plain HTTP clients send it).

Every Blaxel sandbox is an sbx sandbox made with a manifest whose workspace root is /workspace
and whose one user is "blaxel" (Blaxel runs commands as the image's user; sbx sandboxes have one
unprivileged user); commands and file operations run as that user. sbx keeps its sandboxes
under DIR (XDG_RUNTIME_DIR, SBX_WORKSPACES, SBX_STOPPED, SBX_SNAPSHOTS, XDG_STATE_HOME); each is
removed when its Blaxel sandbox is deleted and all of them on SIGTERM/SIGINT.

Errors are Blaxel's structured shape {"error": {"code", "message", "retryable"}}, but a refused
credential (401), which is {"code": 401, "error": "Unauthorized"} as Blaxel documents it.

Test knobs (no key needed, not part of Blaxel): POST /_fake/knobs with JSON
  {"rate_limit_next": N, "retry_after": S}  the next N requests get 429 with Retry-After: S
  {"bad_key": true}                          every key is refused (401 AUTHENTICATION_FAILED)
  {"forget": NAME}                           sandbox NAME is gone (as if it expired: 404)
  {"max_sandboxes": N}                       creating more than N: 402 USAGE_LIMIT_EXCEEDED
  {"keepalive_s": S}                         a command's event stream sends a keepalive event
                                             after S seconds without output (default 5, as
                                             Blaxel's sandbox API)
  {"stream_error_next": N}                   the next N event streams answer an "error" event
                                             instead of running their command
GET /_fake/stats: {"rate_limited": N, "sandboxes": N, "requests": N, "streams": N}.
"""
import argparse
import email.parser
import email.policy
import http.server
import json
import os
import secrets
import signal
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

ROOT = "/workspace"
USER = "blaxel"
DEFAULT_IMAGE = "blaxel/base-image:latest"
PREVIEW_DOMAIN = "preview.blaxel.test"
MAX_BODY = 256 << 20
CHUNK = 32 << 10

# Run in the sandbox for the filesystem API's metadata operations: an op and JSON arguments in,
# one JSON line out ({"ok": ...} or {"error": [status, code, message]}).
FS_OPS = r'''
import grp, json, os, pwd, shutil, stat, sys, time
op, a = sys.argv[1], json.loads(sys.argv[2])
def name_of(fn, i):
    try:
        return fn(i)[0]
    except KeyError:
        return str(i)
def entry(p, st):
    return {"path": p, "name": os.path.basename(p.rstrip("/")) or "/", "size": st.st_size,
            "permissions": "%o" % stat.S_IMODE(st.st_mode),
            "owner": name_of(pwd.getpwuid, st.st_uid), "group": name_of(grp.getgrgid, st.st_gid),
            "lastModified": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime))}
def main():
    p = a["path"]
    try:
        if op == "get":
            st = os.stat(p)
            if not stat.S_ISDIR(st.st_mode):
                return {"kind": "file"}
            files, dirs = [], []
            for n in sorted(os.listdir(p)):
                q = os.path.join(p, n)
                try:
                    s = os.stat(q)
                except OSError:
                    continue
                if stat.S_ISDIR(s.st_mode):
                    dirs.append({"path": q, "name": n})
                else:
                    files.append(entry(q, s))
            return {"kind": "dir", "path": p, "name": os.path.basename(p) or "/",
                    "files": files, "subdirectories": dirs}
        if op == "mkdir":
            os.makedirs(p, int(a.get("mode") or "755", 8), exist_ok=True)
            return {"path": p}
        if op == "rm":
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                if a.get("recursive"):
                    shutil.rmtree(p)
                else:
                    os.rmdir(p)
            else:
                os.unlink(p)
            return {"path": p}
        if op == "chmod":
            os.chmod(p, int(a["mode"], 8))
            return {"path": p}
    except FileNotFoundError:
        return {"error": [404, "NOT_FOUND", "no such file or directory: %s" % p]}
    except NotADirectoryError:
        return {"error": [400, "BAD_REQUEST", "not a directory: %s" % p]}
    except OSError as e:
        return {"error": [400, "BAD_REQUEST", "%s: %s" % (p, e.strerror)]}
    return {"error": [400, "BAD_REQUEST", "unknown op " + op]}
print(json.dumps(main()))
'''


def log(msg):
    sys.stderr.write("fake-blaxel: %s\n" % msg)
    sys.stderr.flush()


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ApiError(Exception):
    def __init__(self, status, code, message, headers=None, retryable=False):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers, self.retryable = headers or {}, retryable


class Sbx:
    """The sbx binary with the fake's private state directories."""

    def __init__(self, binary, state_dir):
        self.binary = binary
        self.env = dict(os.environ)
        for var, sub in (("XDG_RUNTIME_DIR", "run"), ("SBX_WORKSPACES", "ws"),
                         ("SBX_STOPPED", "stopped"), ("SBX_SNAPSHOTS", "snapshots"),
                         ("XDG_STATE_HOME", "state")):
            p = os.path.join(state_dir, sub)
            os.makedirs(p, mode=0o700, exist_ok=True)
            self.env[var] = p
        self.manifest = os.path.join(state_dir, "manifest.yaml")
        with open(self.manifest, "w") as f:
            f.write("version: 1\nroot: %s\nusers: [%s]\nroot_owner: %s\n" % (ROOT, USER, USER))

    def run(self, *args, input=None, timeout=120):
        return subprocess.run([self.binary] + list(args), input=input, capture_output=True,
                              env=self.env, timeout=timeout)

    def argv(self, sbx_id, argv, *, stdin=False, env=None, cwd=None):
        # What a command leaves running in the background stays, as in a Blaxel sandbox.
        out = [self.binary, "sandbox", "exec", "--user", USER, "--keep-background"]
        if stdin:
            out.append("-i")
        for k, v in (env or {}).items():
            out += ["--env", "%s=%s" % (k, v)]
        # The working directory is entered by a shell in the sandbox, then the command runs.
        return out + [sbx_id, "--", "/bin/sh", "-c", 'cd -- "$0" || exit 1; exec "$@"',
                      cwd or ROOT] + list(argv)

    def fs(self, sbx_id, op, args):
        r = subprocess.run(self.argv(sbx_id, ["python3", "-c", FS_OPS, op, json.dumps(args)]),
                           capture_output=True, env=self.env, timeout=300)
        try:
            ans = json.loads(r.stdout.split(b"\n", 1)[0])
        except ValueError:
            raise ApiError(500, "INTERNAL_ERROR", "sandbox did not answer: %s" %
                           r.stderr.decode(errors="replace").strip())
        if "error" in ans:
            raise ApiError(*ans["error"])
        return ans


class Process:
    """One process of a sandbox: an `sbx sandbox exec` whose output is kept as the sandbox API
    keeps it (stdout, stderr and both interleaved) for every reader and follower."""

    def __init__(self, sb, sbx, pid, req):
        self.pid, self.name = pid, req.get("name") or pid
        self.command = req["command"]
        self.cwd = req.get("workingDir") or ROOT
        self.started = now_iso()
        self.completed = None
        self.cond = threading.Condition()
        self.chunks = []  # (1|2, bytes) in arrival order
        self.exit_code = None
        self.status = "running"
        self.signalled = None
        env = dict(sb.envs)
        env.update(req.get("env") or {})
        self.popen = subprocess.Popen(
            sbx.argv(sb.sbx_id, ["/bin/sh", "-c", self.command], stdin=True, env=env, cwd=self.cwd),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=sbx.env,
            close_fds=True)
        if not req.get("stdin"):
            self.popen.stdin.close()
        readers = [threading.Thread(target=self.reader, args=(self.popen.stdout, 1), daemon=True),
                   threading.Thread(target=self.reader, args=(self.popen.stderr, 2), daemon=True)]
        for t in readers:
            t.start()
        threading.Thread(target=self.waiter, args=(readers, req.get("timeout")), daemon=True).start()

    def reader(self, f, stream):
        while True:
            b = os.read(f.fileno(), CHUNK)
            if not b:
                break
            with self.cond:
                self.chunks.append((stream, b))
                self.cond.notify_all()

    def waiter(self, readers, timeout):
        try:
            rc = self.popen.wait(timeout=timeout if timeout else None)
        except subprocess.TimeoutExpired:
            self.signal("killed")
            rc = self.popen.wait()
        for t in readers:
            t.join()
        with self.cond:
            self.exit_code = rc if rc >= 0 else 128 - rc
            if self.signalled:
                self.status = self.signalled
            else:
                self.status = "completed" if self.exit_code == 0 else "failed"
            self.completed = now_iso()
            self.cond.notify_all()

    def signal(self, how):
        with self.cond:
            if self.exit_code is not None:
                return
            self.signalled = how
        try:
            (self.popen.kill if how == "killed" else self.popen.terminate)()
        except ProcessLookupError:
            pass

    def stdin_write(self, data):
        try:
            self.popen.stdin.write(data)
            self.popen.stdin.flush()
        except (OSError, ValueError) as e:
            raise ApiError(409, "BAD_REQUEST", "stdin of process %s is closed: %s" % (self.pid, e))

    def stdin_close(self):
        try:
            self.popen.stdin.close()
        except OSError:
            pass

    def wait(self):
        with self.cond:
            while self.exit_code is None:
                self.cond.wait()

    def obj(self):
        with self.cond:
            out = b"".join(b for s, b in self.chunks if s == 1).decode(errors="replace")
            err = b"".join(b for s, b in self.chunks if s == 2).decode(errors="replace")
            both = b"".join(b for _, b in self.chunks).decode(errors="replace")
            return {"pid": self.pid, "name": self.name, "command": self.command,
                    "workingDir": self.cwd, "status": self.status, "startedAt": self.started,
                    "completedAt": self.completed or "", "exitCode": self.exit_code
                    if self.exit_code is not None else 0, "stdout": out, "stderr": err,
                    "logs": both}


class Sandbox:
    def __init__(self, name, sbx_id, body, url):
        self.name, self.sbx_id, self.body, self.url = name, sbx_id, body, url
        runtime = body.get("spec", {}).get("runtime") or {}
        self.envs = {e["name"]: e.get("value", "") for e in runtime.get("envs") or []
                     if isinstance(e, dict) and e.get("name")}
        self.created = now_iso()
        self.procs = {}
        self.previews = {}  # name -> {"metadata", "spec", "id", "tokens": {token: expiry}}
        self.next_pid = 1000
        self.lock = threading.Lock()


class Fake:
    def __init__(self, sbx, key, workspace, images, port, scheme):
        self.sbx, self.key, self.workspace = sbx, key, workspace
        self.images = set(images) | {DEFAULT_IMAGE}
        self.port, self.scheme = port, scheme
        self.lock = threading.Lock()
        self.sandboxes = {}
        self.knobs = {"rate_limit_next": 0, "retry_after": 1, "bad_key": False, "max_sandboxes": 0,
                      "keepalive_s": 5.0, "stream_error_next": 0}
        self.stats = {"rate_limited": 0, "sandboxes": 0, "requests": 0, "streams": 0}

    def base(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def create(self, body):
        meta = body.get("metadata") or {}
        runtime = (body.get("spec") or {}).get("runtime") or {}
        image = runtime.get("image") or DEFAULT_IMAGE
        if image not in self.images:
            raise ApiError(400, "BAD_REQUEST", "image %s not found in workspace %s" % (image, self.workspace))
        name = meta.get("name") or "sandbox-" + secrets.token_hex(4)
        with self.lock:
            if name in self.sandboxes:
                raise ApiError(409, "CONFLICT", "sandbox %s already exists" % name)
            limit = self.knobs["max_sandboxes"]
            if limit and len(self.sandboxes) >= limit:
                raise ApiError(402, "USAGE_LIMIT_EXCEEDED", "workspace %s may have at most %d sandboxes"
                               % (self.workspace, limit))
            self.sandboxes[name] = None  # reserved while sbx makes it
        r = self.sbx.run("sandbox", "create", "--manifest", self.sbx.manifest)
        if r.returncode != 0:
            with self.lock:
                del self.sandboxes[name]
            raise ApiError(500, "INTERNAL_ERROR", "sbx create failed: %s" % r.stderr.decode(errors="replace").strip())
        sbx_id = r.stdout.decode().strip().splitlines()[-1]
        sb = Sandbox(name, sbx_id, body, "%s/run/%s/sandboxes/%s" % (self.base(), self.workspace, name))
        with self.lock:
            self.sandboxes[name] = sb
            self.stats["sandboxes"] += 1
        log("sandbox %s is sbx sandbox %s" % (name, sbx_id))
        return sb

    def get(self, name):
        with self.lock:
            sb = self.sandboxes.get(name)
        if sb is None:
            raise ApiError(404, "WORKLOAD_NOT_FOUND", "sandbox %s not found" % name)
        return sb

    def delete(self, sb):
        with sb.lock:
            procs = list(sb.procs.values())
        for p in procs:
            p.signal("killed")
        for p in procs:
            p.wait()
        r = self.sbx.run("sandbox", "rm", sb.sbx_id)
        log("sandbox %s deleted (sbx sandbox %s)%s" % (sb.name, sb.sbx_id, "" if r.returncode == 0 else
                                                      ": " + r.stderr.decode(errors="replace").strip()))
        with self.lock:
            self.sandboxes.pop(sb.name, None)

    def shutdown(self):
        with self.lock:
            all_sb = [sb for sb in self.sandboxes.values() if sb is not None]
        for sb in all_sb:
            self.delete(sb)

    def sandbox_obj(self, sb, status="DEPLOYED"):
        spec = json.loads(json.dumps(sb.body.get("spec") or {}))
        spec.setdefault("runtime", {}).setdefault("image", DEFAULT_IMAGE)
        meta = dict(sb.body.get("metadata") or {})
        meta.update({"name": sb.name, "displayName": sb.name, "workspace": self.workspace,
                     "url": sb.url, "createdAt": sb.created, "updatedAt": sb.created})
        return {"metadata": meta, "spec": spec, "status": status, "events": [],
                "lastUsedAt": sb.created}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None

    def log_message(self, fmt, *args):
        if os.environ.get("FAKE_BLAXEL_VERBOSE"):
            log("%s %s" % (self.address_string(), fmt % args))

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    raise ApiError(413, "BAD_REQUEST", "request body too large")
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ApiError(413, "BAD_REQUEST", "request body too large")
        return self.rfile.read(n) if n else b""

    def send_bytes(self, status, body, ctype, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status, obj, headers=None):
        self.send_bytes(status, json.dumps(obj).encode(), "application/json", headers)

    def send_error_json(self, e):
        if e.status == 401:
            # As Blaxel documents its API's refusal of a credential.
            return self.send_json(401, {"code": 401, "error": "Unauthorized"}, e.headers)
        self.send_json(e.status, {"error": {"code": e.code, "message": e.message,
                                            "retryable": e.retryable}}, e.headers)

    def start_stream(self, ctype):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        raw, _, qs = self.path.partition("?")
        query = dict(urllib.parse.parse_qsl(qs))
        try:
            data = self.read_body()
            if raw.startswith("/_fake/"):
                return self.knob(method, raw, data)
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
            if host.endswith("." + PREVIEW_DOMAIN):
                return self.preview(method, host[:-len(PREVIEW_DOMAIN) - 1], raw, query, data)
            with self.fake.lock:
                self.fake.stats["requests"] += 1
            self.authenticate()
            self.limit()
            if raw.startswith("/v0/"):
                return self.control(method, [urllib.parse.unquote(x) for x in raw[4:].split("/") if x],
                                    query, data)
            prefix = "/run/%s/sandboxes/" % self.fake.workspace
            if raw.startswith(prefix):
                name, _, rest = raw[len(prefix):].partition("/")
                sb = self.fake.get(urllib.parse.unquote(name))
                return self.sandbox_api(sb, method, rest, query, data)
            if raw.startswith("/run/"):
                raise ApiError(404, "WORKSPACE_NOT_FOUND", "workspace not found")
            raise ApiError(404, "ROUTE_NOT_FOUND", "no route for %s %s" % (method, raw))
        except ApiError as e:
            self.send_error_json(e)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def authenticate(self):
        auth = self.headers.get("X-Blaxel-Authorization") or self.headers.get("Authorization") or ""
        if not auth.startswith("Bearer "):
            raise ApiError(401, "AUTHENTICATION_REQUIRED", "no credentials were given")
        if self.fake.knobs["bad_key"] or not secrets.compare_digest(auth[7:], self.fake.key):
            raise ApiError(401, "AUTHENTICATION_FAILED", "the API key is not valid")
        ws = self.headers.get("X-Blaxel-Workspace")
        if ws is not None and ws != self.fake.workspace:
            raise ApiError(404, "WORKSPACE_NOT_FOUND", "workspace %s not found" % ws)

    def limit(self):
        with self.fake.lock:
            if self.fake.knobs["rate_limit_next"] <= 0:
                return
            self.fake.knobs["rate_limit_next"] -= 1
            self.fake.stats["rate_limited"] += 1
            after = str(self.fake.knobs["retry_after"])
        raise ApiError(429, "TOO_MANY_REQUESTS", "rate limit exceeded, retry later",
                       {"Retry-After": after}, retryable=True)

    def knob(self, method, raw, data):
        if raw == "/_fake/stats" and method == "GET":
            with self.fake.lock:
                return self.send_json(200, dict(self.fake.stats))
        if raw == "/_fake/knobs" and method == "POST":
            req = json.loads(data or b"{}")
            forget = req.pop("forget", None)
            if forget:
                sb = self.fake.get(forget)
                self.fake.delete(sb)
            with self.fake.lock:
                self.fake.knobs.update(req)
            return self.send_json(200, {"ok": True})
        raise ApiError(404, "ROUTE_NOT_FOUND", "no such knob")

    def control(self, method, p, query, data):
        if p == ["sandboxes"] and method == "GET":
            with self.fake.lock:
                all_sb = [sb for sb in self.fake.sandboxes.values() if sb is not None]
            items = [self.fake.sandbox_obj(sb) for sb in all_sb]
            if (self.headers.get("Blaxel-Version") or "") >= "2026-04-28":
                return self.send_json(200, {"data": items, "meta": {"hasMore": False}})
            return self.send_json(200, items)
        if p == ["sandboxes"] and method == "POST":
            body = json.loads(data or b"{}")
            name = (body.get("metadata") or {}).get("name")
            if name and query.get("createIfNotExist") == "true":
                with self.fake.lock:
                    sb = self.fake.sandboxes.get(name)
                if sb is not None:
                    return self.send_json(200, self.fake.sandbox_obj(sb))
            return self.send_json(200, self.fake.sandbox_obj(self.fake.create(body)))
        if len(p) >= 3 and p[0] == "sandboxes" and p[2] == "previews":
            return self.previews(self.fake.get(p[1]), method, p[3:], query, data)
        if len(p) == 2 and p[0] == "sandboxes":
            sb = self.fake.get(p[1])
            if method == "GET":
                return self.send_json(200, self.fake.sandbox_obj(sb))
            if method == "DELETE":
                obj = self.fake.sandbox_obj(sb, "DELETING")
                self.fake.delete(sb)
                return self.send_json(200, obj)
        raise ApiError(404, "ROUTE_NOT_FOUND", "no route for %s /v0/%s" % (method, "/".join(p)))

    def preview_obj(self, sb, pv):
        return {"metadata": pv["metadata"], "spec": pv["spec"], "status": "DEPLOYED", "events": []}

    def previews(self, sb, method, p, query, data):
        if not p and method == "GET":
            with sb.lock:
                return self.send_json(200, [self.preview_obj(sb, x) for x in sb.previews.values()])
        if not p and method == "POST":
            req = json.loads(data or b"{}")
            name = (req.get("metadata") or {}).get("name")
            spec = req.get("spec") or {}
            port = spec.get("port")
            if not name or not isinstance(port, int) or not 1 <= port <= 65535:
                raise ApiError(400, "BAD_REQUEST", "a preview needs metadata.name and spec.port")
            pid = secrets.token_hex(8)
            pv = {"id": pid, "tokens": {},
                  "metadata": {"name": name, "resourceName": sb.name, "resourceType": "sandbox",
                               "workspace": self.fake.workspace, "createdAt": now_iso()},
                  "spec": {"port": port, "public": bool(spec.get("public")), "region": "us-pdx-1",
                           "url": "https://%s.%s" % (pid, PREVIEW_DOMAIN)}}
            with sb.lock:
                if name in sb.previews and query.get("force") != "true":
                    raise ApiError(409, "CONFLICT", "preview %s already exists" % name)
                sb.previews[name] = pv
            return self.send_json(200, self.preview_obj(sb, pv))
        with sb.lock:
            pv = sb.previews.get(p[0])
        if pv is None:
            raise ApiError(404, "NOT_FOUND", "preview %s not found" % p[0])
        if len(p) == 1 and method == "GET":
            return self.send_json(200, self.preview_obj(sb, pv))
        if len(p) == 1 and method == "DELETE":
            with sb.lock:
                sb.previews.pop(p[0], None)
            return self.send_json(200, self.preview_obj(sb, pv))
        if p[1:] == ["tokens"] and method == "POST":
            req = json.loads(data or b"{}")
            expires = (req.get("spec") or {}).get("expiresAt") or ""
            token = secrets.token_urlsafe(24)
            with sb.lock:
                pv["tokens"][token] = expires
            return self.send_json(200, {"metadata": {"name": (req.get("metadata") or {}).get("name") or "token",
                                                     "previewName": p[0], "resourceName": sb.name},
                                        "spec": {"token": token, "expiresAt": expires, "expired": False}})
        raise ApiError(404, "ROUTE_NOT_FOUND", "no route for %s previews/%s" % (method, "/".join(p)))

    def preview(self, method, pid, raw, query, data):
        """A preview's URL: the request relayed to its port on loopback inside the sandbox."""
        with self.fake.lock:
            found = [(sb, pv) for sb in self.fake.sandboxes.values() if sb is not None
                     for pv in list(sb.previews.values()) if pv["id"] == pid]
        if not found:
            raise ApiError(404, "ROUTE_NOT_FOUND", "no preview %s" % pid)
        sb, pv = found[0]
        if not pv["spec"]["public"]:
            token = query.get("bl_preview_token") or self.headers.get("X-Blaxel-Preview-Token") or ""
            expiry = pv["tokens"].get(token)
            if expiry is None or (expiry and expiry < now_iso()):
                raise ApiError(401, "AUTHENTICATION_FAILED", "a private preview wants a valid token")
        relay = ("import socket,sys\ns=socket.create_connection(('127.0.0.1',%d))\n"
                 "s.sendall(sys.stdin.buffer.read())\ns.shutdown(socket.SHUT_WR)\n"
                 "while True:\n b=s.recv(65536)\n if not b: break\n sys.stdout.buffer.write(b)\n"
                 % pv["spec"]["port"])
        head = "%s %s HTTP/1.0\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n" % (method, raw, len(data))
        sbx = self.fake.sbx
        r = subprocess.run(sbx.argv(sb.sbx_id, ["python3", "-c", relay], stdin=True),
                           input=head.encode() + data, capture_output=True, env=sbx.env, timeout=60)
        if r.returncode != 0 or not r.stdout:
            raise ApiError(502, "BAD_GATEWAY", "nothing answers on port %d" % pv["spec"]["port"])
        self.wfile.write(r.stdout)
        self.wfile.flush()
        self.close_connection = True

    def sandbox_api(self, sb, method, rest, query, data):
        if rest == "health" and method == "GET":
            return self.send_json(200, {"status": "ok"})
        if rest == "process" or rest.startswith("process/"):
            return self.process(sb, method, [urllib.parse.unquote(x) for x in rest.split("/")[1:]], data)
        if rest.startswith("filesystem/"):
            path = urllib.parse.unquote(rest[len("filesystem/"):])
            path = "/" + path.lstrip("/")
            return self.filesystem(sb, method, os.path.normpath(path), query, data)
        raise ApiError(404, "ROUTE_NOT_FOUND", "no route for %s %s" % (method, rest))

    def find(self, sb, ident):
        with sb.lock:
            proc = sb.procs.get(ident)
            if proc is None:
                proc = next((x for x in sb.procs.values() if x.name == ident), None)
        if proc is None:
            raise ApiError(404, "NOT_FOUND", "process %s not found" % ident)
        return proc

    def process(self, sb, method, p, data):
        if not p and method == "GET":
            with sb.lock:
                procs = list(sb.procs.values())
            return self.send_json(200, [x.obj() for x in procs])
        if not p and method == "POST":
            req = json.loads(data or b"{}")
            if not isinstance(req.get("command"), str) or not req["command"]:
                raise ApiError(400, "BAD_REQUEST", "command is required")
            with sb.lock:
                sb.next_pid += 1
                pid = str(sb.next_pid)
                if req.get("name") and any(x.name == req["name"] and x.exit_code is None
                                           for x in sb.procs.values()):
                    raise ApiError(409, "CONFLICT", "a process named %s is running" % req["name"])
            if req.get("waitForCompletion") and "text/event-stream" in (self.headers.get("Accept") or ""):
                with self.fake.lock:
                    fail = self.fake.knobs["stream_error_next"] > 0
                    self.fake.knobs["stream_error_next"] -= fail
                if fail:
                    self.start_stream("application/x-ndjson")
                    self.chunk(b'{"type":"error","data":"could not start the process: no space left"}\n')
                    return self.end_stream()
            proc = Process(sb, self.fake.sbx, pid, req)
            with sb.lock:
                sb.procs[pid] = proc
            if not req.get("waitForCompletion"):
                return self.send_json(200, proc.obj())
            if "text/event-stream" in (self.headers.get("Accept") or ""):
                return self.exec_stream(proc)
            proc.wait()
            return self.send_json(200, proc.obj())
        proc = self.find(sb, p[0])
        if len(p) == 1 and method == "GET":
            return self.send_json(200, proc.obj())
        if len(p) == 1 and method == "DELETE":
            proc.signal("stopped")
            return self.send_json(200, proc.obj())
        if p[1:] == ["kill"] and method == "DELETE":
            proc.signal("killed")
            return self.send_json(200, proc.obj())
        if p[1:] == ["logs"] and method == "GET":
            o = proc.obj()
            return self.send_json(200, {"logs": o["logs"], "stdout": o["stdout"], "stderr": o["stderr"]})
        if p[1:] == ["logs", "stream"] and method == "GET":
            return self.logs_stream(proc)
        if p[1:] == ["stdin"] and method == "POST":
            proc.stdin_write(data)
            return self.send_json(200, {"message": "ok"})
        if p[1:] == ["stdin"] and method == "DELETE":
            proc.stdin_close()
            return self.send_json(200, {"message": "ok"})
        raise ApiError(404, "ROUTE_NOT_FOUND", "no route for %s process/%s" % (method, "/".join(p)))

    def follow(self, proc, emit, idle=None, idle_s=10):
        """emit(stream, bytes) for every chunk of proc's output, as it comes, until it ends;
        idle() after idle_s seconds without any."""
        seen = 0
        while True:
            with proc.cond:
                while seen == len(proc.chunks) and proc.exit_code is None:
                    if not proc.cond.wait(idle_s) and idle:
                        break
                new = proc.chunks[seen:]
                if not new and proc.exit_code is None:
                    idle()
                    continue
                seen += len(new)
                ended = proc.exit_code is not None and seen == len(proc.chunks)
            for stream, b in new:
                emit(stream, b)
            if ended:
                return

    def exec_stream(self, proc):
        """waitForCompletion with text/event-stream accepted: NDJSON events, the result last."""
        with self.fake.lock:
            self.fake.stats["streams"] += 1
        self.start_stream("application/x-ndjson")
        self.follow(proc, lambda s, b: self.chunk(json.dumps(
            {"type": "stdout" if s == 1 else "stderr", "data": b.decode(errors="replace")}).encode() + b"\n"),
            idle=lambda: self.chunk(b'{"type":"keepalive"}\n'), idle_s=self.fake.knobs["keepalive_s"])
        self.chunk(json.dumps({"type": "result", "data": json.dumps(proc.obj())}).encode() + b"\n")
        self.end_stream()

    def logs_stream(self, proc):
        """Each output line prefixed stdout:/stderr:, one per line, until the process ends."""
        with self.fake.lock:
            self.fake.stats["streams"] += 1
        self.start_stream("text/plain")
        partial = {1: b"", 2: b""}

        def emit(stream, b):
            lines = (partial[stream] + b).split(b"\n")
            partial[stream] = lines.pop()
            tag = b"stdout:" if stream == 1 else b"stderr:"
            if lines:
                self.chunk(b"".join(tag + x + b"\n" for x in lines))
        self.follow(proc, emit)
        for stream, tag in ((1, b"stdout:"), (2, b"stderr:")):
            if partial[stream]:
                self.chunk(tag + partial[stream] + b"\n")
        self.end_stream()

    def filesystem(self, sb, method, path, query, data):
        sbx = self.fake.sbx
        if method == "GET":
            ans = sbx.fs(sb.sbx_id, "get", {"path": path})
            if ans["kind"] == "dir":
                del ans["kind"]
                return self.send_json(200, ans)
            r = subprocess.run(sbx.argv(sb.sbx_id, ["cat", "--", path]), capture_output=True,
                               env=sbx.env, timeout=300)
            if r.returncode != 0:
                raise ApiError(400, "BAD_REQUEST", "cannot read %s: %s" % (path, r.stderr.decode(errors="replace").strip()))
            if "application/octet-stream" in (self.headers.get("Accept") or ""):
                return self.send_bytes(200, r.stdout, "application/octet-stream")
            return self.send_json(200, {"path": path, "name": os.path.basename(path),
                                        "content": r.stdout.decode(errors="replace")})
        if method == "DELETE":
            sbx.fs(sb.sbx_id, "rm", {"path": path, "recursive": query.get("recursive") == "true"})
            return self.send_json(200, {"message": "deleted", "path": path})
        if method == "PUT":
            ctype = self.headers.get("Content-Type") or ""
            if ctype.startswith("multipart/form-data"):
                parts = self.form(ctype, data)
                if "file" not in parts:
                    raise ApiError(400, "BAD_REQUEST", "multipart upload without a file part")
                return self.write(sb, path, parts["file"], (parts.get("permissions") or b"0644").decode())
            req = json.loads(data or b"{}")
            if req.get("isDirectory"):
                sbx.fs(sb.sbx_id, "mkdir", {"path": path, "mode": req.get("permissions") or "0755"})
                return self.send_json(200, {"message": "directory created", "path": path})
            return self.write(sb, path, (req.get("content") or "").encode(), req.get("permissions") or "0644")
        raise ApiError(404, "ROUTE_NOT_FOUND", "no route for %s filesystem" % method)

    def form(self, ctype, data):
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + data)
        out = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if name:
                out[name] = part.get_payload(decode=True) or b""
        return out

    def write(self, sb, path, content, mode):
        # Parents are made as Blaxel's API makes them; the content goes through stdin.
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" "$1"'
        sbx = self.fake.sbx
        r = subprocess.run(sbx.argv(sb.sbx_id, ["/bin/sh", "-c", script, "sh", path, mode], stdin=True),
                           input=content, capture_output=True, env=sbx.env, timeout=300)
        if r.returncode != 0:
            raise ApiError(400, "BAD_REQUEST", "cannot write %s: %s" % (path, r.stderr.decode(errors="replace").strip()))
        return self.send_json(200, {"message": "file created", "path": path})


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description="A fake Blaxel (control plane and sandbox API) over local sbx sandboxes.")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--sbx", default=os.environ.get("SBX", "sbx"))
    ap.add_argument("--image", action="append", default=[])
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    a = ap.parse_args()
    key, workspace = os.environ.get("BL_API_KEY"), os.environ.get("BL_WORKSPACE")
    if not key or not workspace:
        sys.exit("fake-blaxel.py: BL_API_KEY and BL_WORKSPACE must be set")
    srv = Server(("127.0.0.1", a.port), Handler)
    scheme = "http"
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        scheme = "https"
    fake = Fake(Sbx(a.sbx, a.state_dir), key, workspace, a.image, srv.server_address[1], scheme)
    Handler.fake = fake

    def stop(signum, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = os.path.join(a.state_dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, os.path.join(a.state_dir, "port"))
    log("listening on %s" % fake.base())
    try:
        srv.serve_forever()
    finally:
        fake.shutdown()
        log("stopped")


if __name__ == "__main__":
    main()
