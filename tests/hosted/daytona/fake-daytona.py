#!/usr/bin/env python3
"""A loopback fake of Daytona for tests: the REST control plane and each sandbox's toolbox API
(reached through the toolbox proxy), whose commands and files are real, in local sbx sandboxes.

usage: fake-daytona.py --state-dir DIR [--port N] [--api-key KEY] [--sbx PATH]
                       [--snapshot NAME]... [--tls-cert FILE --tls-key FILE]

One listener on 127.0.0.1 (port 0: a free one, written to DIR/port):
  /api/...                  the control plane (what DAYTONA_API_URL names)
  /toolbox/{id}/...         the toolbox API of sandbox {id} (the sandbox's toolboxProxyUrl is
                            http://127.0.0.1:PORT/toolbox, to which clients append /{id})
  Host: {port}-{token}.{PREVIEW_DOMAIN}
                            a port's signed preview URL (https://{port}-{token}.PREVIEW_DOMAIN,
                            as Daytona's proxy names them): requests to the fake's port with that
                            Host are relayed to the port inside the sandbox
Both take `Authorization: Bearer KEY`, or a JWT (any token given with --jwt) with
`X-Daytona-Organization-ID` naming the organization given with --organization.

Every Daytona sandbox is an sbx sandbox made with a manifest whose workspace root is
/home/daytona, whose one user is "daytona" and who owns that root (Daytona's default image);
commands and file operations run as "daytona". sbx keeps them under DIR (XDG_RUNTIME_DIR,
SBX_WORKSPACES, SBX_STOPPED, SBX_SNAPSHOTS, XDG_STATE_HOME), and every one is removed on
SIGTERM/SIGINT and when a sandbox is deleted.

Test knobs (no key needed, not part of Daytona): POST /_fake/knobs with JSON
  {"rate_limit_next": N, "retry_after": S}  the next N API requests get 429, Retry-After: S
  {"max_sandboxes": N}                      creating more than N started sandboxes: 403 quota
  {"forget": ID}                            sandbox ID is gone (as if deleted elsewhere)
  {"pty_exit_control": false}               PTYs as an older daemon: no exit control message
  {"omit_proxy_url": true}                  sandboxes described without toolboxProxyUrl (an
                                            older API: clients ask /toolbox-proxy-url)
GET /_fake/stats: {"rate_limited": N, "sandboxes": N, "api_requests": N, "ws_logs": N}.
"""
import argparse
import base64
import datetime
import email.parser
import fcntl
import struct
import termios
import email.policy
import hashlib
import http.server
import json
import os
import secrets
import shlex
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

HOME = "/home/daytona"
PREVIEW_DOMAIN = "preview.daytona.test"
USER = "daytona"
MAX_BODY = 256 << 20
CHUNK = 32 << 10
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
STDOUT_PREFIX = b"\x01\x01\x01"
STDERR_PREFIX = b"\x02\x02\x02"

# Run in the sandbox for file metadata: op and JSON arguments, one JSON line back.
FS_HELPER = r'''
import grp, json, os, pwd, stat, sys, datetime
op, a = sys.argv[1], json.loads(sys.argv[2])
def who(fn, i):
    try:
        return fn(i)[0]
    except KeyError:
        return str(i)
def info(p):
    st = os.lstat(p)
    t = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc).isoformat()
    return {"name": os.path.basename(p.rstrip("/")) or "/", "path": p, "isDir": stat.S_ISDIR(st.st_mode),
            "size": st.st_size, "mode": stat.filemode(st.st_mode), "permissions": "%04o" % stat.S_IMODE(st.st_mode),
            "owner": who(pwd.getpwuid, st.st_uid), "group": who(grp.getgrgid, st.st_gid),
            "modTime": t, "modifiedAt": t}
try:
    if op == "info":
        print(json.dumps({"ok": info(a["path"])}))
    elif op == "list":
        print(json.dumps({"ok": [info(os.path.join(a["path"], n)) for n in sorted(os.listdir(a["path"]))]}))
    elif op == "folder":
        os.makedirs(a["path"], exist_ok=True)
        os.chmod(a["path"], int(a["mode"], 8))
        print(json.dumps({"ok": True}))
    elif op == "delete":
        p = a["path"]
        if os.path.isdir(p) and not os.path.islink(p):
            if not a["recursive"]:
                os.rmdir(p)
            else:
                import shutil
                shutil.rmtree(p)
        else:
            os.unlink(p)
        print(json.dumps({"ok": True}))
    elif op == "chmod":
        if a.get("mode"):
            os.chmod(a["path"], int(a["mode"], 8))
        if a.get("owner") or a.get("group"):
            import shutil
            shutil.chown(a["path"], a.get("owner") or None, a.get("group") or None)
        print(json.dumps({"ok": True}))
except FileNotFoundError as e:
    print(json.dumps({"error": [404, "file not found: %s" % e.filename]}))
except OSError as e:
    print(json.dumps({"error": [400, "%s: %s" % (e.strerror, e.filename)]}))
'''


def log(msg):
    sys.stderr.write("fake-daytona: %s\n" % msg)
    sys.stderr.flush()


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ApiError(Exception):
    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class Sbx:
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
            f.write("version: 1\nroot: %s\nusers: [%s]\nroot_owner: %s\n" % (HOME, USER, USER))

    def run(self, *args, input=None, timeout=120):
        return subprocess.run([self.binary] + list(args), input=input, capture_output=True,
                              env=self.env, timeout=timeout)

    def exec_argv(self, sbx_id, argv, *, stdin=False, env=None, cwd=None):
        out = [self.binary, "sandbox", "exec", "--user", USER, "--keep-background"]
        if stdin:
            out.append("-i")
        for k, v in (env or {}).items():
            out += ["--env", "%s=%s" % (k, v)]
        # As the daemon does, relative paths are the user's home's; cwd is entered by a shell.
        wrap = ["/bin/sh", "-c", 'cd -- "$0" || exit 1; exec "$@"', cwd or HOME]
        return out + [sbx_id, "--"] + wrap + list(argv)

    def helper(self, sbx_id, op, args):
        r = subprocess.run(self.exec_argv(sbx_id, ["python3", "-c", FS_HELPER, op, json.dumps(args)]),
                           capture_output=True, env=self.env, timeout=300)
        try:
            ans = json.loads(r.stdout.split(b"\n", 1)[0])
        except ValueError:
            raise ApiError(500, "sandbox did not answer: %s" % r.stderr.decode(errors="replace").strip())
        if "error" in ans:
            raise ApiError(ans["error"][0], ans["error"][1])
        return ans["ok"]


def abspath(p):
    """A toolbox path: relative ones are the home directory's."""
    if not p:
        raise ApiError(400, "path is required")
    return p if p.startswith("/") else os.path.join(HOME, p)


class Command:
    """One session command: an `sbx sandbox exec` whose output is kept (the daemon keeps a
    command's logs) and handed to every follower."""

    def __init__(self, sb, sbx, command, env):
        self.id = str(uuid.uuid4())
        self.command = command
        self.cond = threading.Condition()
        self.chunks = []  # (stream, bytes) in arrival order
        self.exit_code = None
        self.popen = subprocess.Popen(
            sbx.exec_argv(sb.sbx_id, ["/bin/sh", "-c", command], stdin=True, env=env),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=sbx.env, close_fds=True)
        readers = [threading.Thread(target=self.read_loop, args=(self.popen.stdout, 1), daemon=True),
                   threading.Thread(target=self.read_loop, args=(self.popen.stderr, 2), daemon=True)]
        for t in readers:
            t.start()
        threading.Thread(target=self.wait_loop, args=(readers,), daemon=True).start()

    def read_loop(self, f, stream):
        while True:
            b = os.read(f.fileno(), CHUNK)
            if not b:
                break
            with self.cond:
                self.chunks.append((stream, b))
                self.cond.notify_all()

    def wait_loop(self, readers):
        for t in readers:
            t.join()
        rc = self.popen.wait()
        with self.cond:
            self.exit_code = rc if rc >= 0 else 128 - rc
            self.cond.notify_all()

    def send_input(self, data):
        try:
            self.popen.stdin.write(data)
            self.popen.stdin.flush()
        except (OSError, ValueError) as e:
            raise ApiError(400, "failed to send input to command: %s" % e)

    def kill(self):
        if self.exit_code is None:
            try:
                self.popen.kill()
            except ProcessLookupError:
                pass

    def logs(self):
        with self.cond:
            out = b"".join(b for s, b in self.chunks if s == 1)
            err = b"".join(b for s, b in self.chunks if s == 2)
            both = b"".join(b for _, b in self.chunks)
        return {"output": both.decode(errors="replace"), "stdout": out.decode(errors="replace"),
                "stderr": err.decode(errors="replace")}

    def obj(self):
        o = {"id": self.id, "command": self.command}
        if self.exit_code is not None:
            o["exitCode"] = self.exit_code
        return o



class Pty:
    """One PTY session: a shell on a local pseudo-terminal whose other side is an
    `sbx sandbox exec -t` client (so the terminal's size reaches the sandbox)."""

    def __init__(self, sb, sbx, sid, rows, cols, cwd, env):
        self.id = sid
        self.master, slave = os.openpty()
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        shell = 'command -v bash >/dev/null 2>&1 && exec bash -i; exec sh -i'
        argv = sbx.exec_argv(sb.sbx_id, ["/bin/sh", "-c", shell], env=env, cwd=cwd)
        argv.insert(argv.index("--keep-background"), "-t")
        argv.insert(argv.index("-t"), "-i")
        try:
            self.popen = subprocess.Popen(["setsid", "-c"] + argv, stdin=slave, stdout=slave,
                                          stderr=slave, env=sbx.env, close_fds=True)
        finally:
            os.close(slave)

    def resize(self, rows, cols):
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def kill(self):
        if self.popen.poll() is None:
            self.popen.kill()


class Sandbox:
    def __init__(self, sid, name, snapshot, sbx_id, env, labels, body):
        self.id = sid
        self.name = name
        self.snapshot = snapshot
        self.sbx_id = sbx_id
        self.env = env
        self.labels = labels
        self.body = body
        self.state = "started"
        self.created = now_iso()
        self.updated = self.created
        self.lock = threading.RLock()
        self.sessions = {}  # session id -> {cmd id -> Command}
        self.ptys = {}  # pty session id -> Pty
        self.gone = False


class Fake:
    def __init__(self, sbx, api_key, jwt, org, snapshots, port, scheme="http"):
        self.sbx = sbx
        self.api_key = api_key
        self.jwt = jwt
        self.org = org
        self.snapshots = set(snapshots)
        self.port = port
        self.scheme = scheme
        self.lock = threading.Lock()
        self.sandboxes = {}
        self.knobs = {"rate_limit_next": 0, "retry_after": 1, "max_sandboxes": 0,
                      "pty_exit_control": True, "omit_proxy_url": False}
        self.stats = {"rate_limited": 0, "api_requests": 0, "ws_logs": 0}
        self.previews = {}  # token -> (sandbox id, port)

    def base(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def create(self, body):
        snapshot = body.get("snapshot") or "daytonaio/sandbox:0.4.3"
        if body.get("snapshot") and snapshot not in self.snapshots:
            raise ApiError(404, "Snapshot %s not found. Did you add it through the Daytona Dashboard?" % snapshot)
        with self.lock:
            limit = self.knobs["max_sandboxes"]
            started = sum(1 for s in self.sandboxes.values() if s.state == "started")
            if limit and started >= limit:
                raise ApiError(403, "Total CPU limit exceeded. Maximum allowed: %d.\n"
                               "To increase concurrency limits, upgrade your organization's Tier "
                               "by visiting https://app.daytona.io/dashboard/limits." % (limit * 1))
        r = self.sbx.run("sandbox", "create", "--manifest", self.sbx.manifest)
        if r.returncode != 0:
            raise ApiError(500, "sbx create failed: %s" % r.stderr.decode(errors="replace").strip())
        sbx_id = r.stdout.decode().strip()
        sid = str(uuid.uuid4())
        sb = Sandbox(sid, body.get("name") or sid, snapshot, sbx_id, dict(body.get("env") or {}),
                     dict(body.get("labels") or {}), body)
        log("sandbox %s is sbx sandbox %s" % (sid, sbx_id))
        with self.lock:
            self.sandboxes[sid] = sb
        return sb

    def get(self, ref):
        with self.lock:
            sb = self.sandboxes.get(ref)
            if sb is None:
                sb = next((s for s in self.sandboxes.values() if s.name == ref), None)
        if sb is None or sb.gone:
            raise ApiError(404, "Sandbox with ID or name %s not found" % ref)
        return sb

    def stop_commands(self, sb):
        for p in list(sb.ptys.values()):
            p.kill()
        sb.ptys.clear()
        cmds = [c for s in sb.sessions.values() for c in s.values()]
        for c in cmds:
            c.kill()
        for c in cmds:
            try:
                c.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
        sb.sessions.clear()

    def delete(self, sb):
        with sb.lock:
            if sb.gone:
                return
            sb.gone = True
            self.stop_commands(sb)
            r = self.sbx.run("sandbox", "rm", sb.sbx_id)
            log("sandbox %s deleted (sbx sandbox %s)%s" % (
                sb.id, sb.sbx_id, "" if r.returncode == 0 else ": " + r.stderr.decode(errors="replace").strip()))
        with self.lock:
            self.sandboxes.pop(sb.id, None)

    def stop(self, sb):
        # The sbx sandbox stays (Daytona keeps a stopped sandbox's disk); its processes end and
        # the toolbox answers nothing until it is started.
        with sb.lock:
            if sb.state not in ("started", "stopped"):
                raise ApiError(400, "Sandbox is not started")
            self.stop_commands(sb)
            sb.state = "stopped"
            sb.updated = now_iso()

    def start(self, sb):
        with sb.lock:
            if sb.state == "started":
                return
            if sb.state not in ("stopped", "archived"):
                raise ApiError(400, "Sandbox is not stopped")
            sb.state = "started"
            sb.updated = now_iso()

    def archive(self, sb):
        with sb.lock:
            if sb.state != "stopped":
                raise ApiError(400, "Sandbox is not stopped")
            sb.state = "archived"
            sb.updated = now_iso()

    def shutdown(self):
        with self.lock:
            all_sb = list(self.sandboxes.values())
        for sb in all_sb:
            self.delete(sb)

    def sandbox_obj(self, sb):
        return {"id": sb.id, "organizationId": self.org, "name": sb.name, "snapshot": sb.snapshot,
                "user": USER, "env": sb.env, "labels": sb.labels, "public": bool(sb.body.get("public")),
                "networkBlockAll": bool(sb.body.get("networkBlockAll")), "target": "us",
                "cpu": sb.body.get("cpu") or 1, "gpu": 0, "memory": sb.body.get("memory") or 1,
                "disk": sb.body.get("disk") or 3, "state": sb.state, "desiredState": sb.state,
                "errorReason": None, "autoStopInterval": sb.body.get("autoStopInterval", 15),
                "autoArchiveInterval": sb.body.get("autoArchiveInterval", 10080),
                "autoDeleteInterval": sb.body.get("autoDeleteInterval", -1),
                "createdAt": sb.created, "updatedAt": sb.updated, "lastActivityAt": sb.updated,
                "daemonVersion": "0.1.0"} | ({} if self.knobs["omit_proxy_url"] else
                                            {"toolboxProxyUrl": self.base() + "/toolbox"})


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None

    def log_message(self, fmt, *args):
        if os.environ.get("FAKE_DAYTONA_VERBOSE"):
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
                    raise ApiError(413, "request body too large")
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ApiError(413, "request body too large")
        return self.rfile.read(n) if n else b""

    def send_bytes(self, status, body, ctype, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status, obj, headers=None):
        self.send_bytes(status, json.dumps(obj).encode(), "application/json", headers)

    def send_error_json(self, e):
        self.send_json(e.status, {"statusCode": e.status, "message": e.message,
                                  "path": self.path, "timestamp": now_iso(), "method": self.command},
                       e.headers)

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def dispatch(self, method):
        u = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        parts = [urllib.parse.unquote(p) for p in u.path.split("/") if p]
        try:
            data = self.read_body() if method in ("POST", "PUT", "PATCH") else b""
            if parts[:1] == ["_fake"]:
                return self.knob(method, parts[1:], data)
            host = (self.headers.get("Host") or "").split(":")[0]
            if host.endswith("." + PREVIEW_DOMAIN):
                return self.preview(method, host[:-len(PREVIEW_DOMAIN) - 1], u.path, data)
            self.authenticate()
            if parts[:1] == ["api"]:
                self.limit()
                return self.api(method, parts[1:], query, data)
            if parts[:1] == ["toolbox"] and len(parts) >= 2:
                return self.toolbox(method, parts[1], parts[2:], query, data)
            raise ApiError(404, "Cannot %s %s" % (method, u.path))
        except ApiError as e:
            try:
                self.send_error_json(e)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def authenticate(self):
        auth = self.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else ""
        if token and secrets.compare_digest(token, self.fake.api_key):
            return
        if token and self.fake.jwt and secrets.compare_digest(token, self.fake.jwt):
            if self.headers.get("X-Daytona-Organization-ID") == self.fake.org:
                return
            raise ApiError(403, "Organization ID is required for JWT authentication")
        raise ApiError(401, "Invalid credentials")

    def limit(self):
        f = self.fake
        with f.lock:
            f.stats["api_requests"] += 1
            if f.knobs["rate_limit_next"] > 0:
                f.knobs["rate_limit_next"] -= 1
                f.stats["rate_limited"] += 1
                raise ApiError(429, "ThrottlerException: Too Many Requests",
                               {"Retry-After": str(f.knobs["retry_after"])})

    def knob(self, method, parts, data):
        f = self.fake
        if method == "POST" and parts == ["knobs"]:
            k = json.loads(data or b"{}")
            forget = k.pop("forget", None)
            if forget:
                f.delete(f.get(forget))
            with f.lock:
                f.knobs.update(k)
            return self.send_json(200, f.knobs)
        if method == "GET" and parts == ["stats"]:
            with f.lock:
                s = dict(f.stats, sandboxes=len(f.sandboxes))
            return self.send_json(200, s)
        raise ApiError(404, "no such knob")

    # -- the control plane -------------------------------------------------------------------

    def api(self, method, p, query, data):
        f = self.fake
        if p == ["sandbox"] and method == "POST":
            body = json.loads(data or b"{}")
            return self.send_json(200, f.sandbox_obj(f.create(body)))
        if p == ["sandbox"] and method == "GET":
            labels = json.loads(query["labels"]) if query.get("labels") else {}
            with f.lock:
                items = [f.sandbox_obj(s) for s in f.sandboxes.values()
                         if all(s.labels.get(k) == v for k, v in labels.items())]
            return self.send_json(200, {"items": items, "nextCursor": None})
        if len(p) < 2 or p[0] != "sandbox":
            raise ApiError(404, "Cannot %s /api/%s" % (method, "/".join(p)))
        sb = f.get(p[1])
        rest = p[2:]
        if not rest and method == "GET":
            return self.send_json(200, f.sandbox_obj(sb))
        if not rest and method == "DELETE":
            f.delete(sb)
            obj = f.sandbox_obj(sb)
            obj["state"] = "destroyed"
            return self.send_json(200, obj)
        if rest == ["start"] and method == "POST":
            f.start(sb)
            return self.send_json(200, f.sandbox_obj(sb))
        if rest == ["stop"] and method == "POST":
            f.stop(sb)
            return self.send_json(200, f.sandbox_obj(sb))
        if rest == ["archive"] and method == "POST":
            f.archive(sb)
            return self.send_json(200, f.sandbox_obj(sb))
        if rest == ["toolbox-proxy-url"] and method == "GET":
            return self.send_json(200, {"url": f.base() + "/toolbox"})
        if len(rest) >= 3 and rest[0] == "ports" and method == "GET":
            try:
                port = int(rest[1])
            except ValueError:
                raise ApiError(400, "invalid port")
            if not 1 <= port <= 65535:
                raise ApiError(400, "invalid port")
            token = secrets.token_hex(12)
            with f.lock:
                f.previews[token] = (sb.id, port)
            url = "https://%d-%s.%s" % (port, token, PREVIEW_DOMAIN)
            if rest[2:] == ["preview-url"]:
                return self.send_json(200, {"sandboxId": sb.id, "url": url, "token": token})
            if rest[2:] == ["signed-preview-url"]:
                return self.send_json(200, {"sandboxId": sb.id, "port": port, "token": token,
                                            "url": url})
        if rest and rest[0] in ("autostop", "autoarchive", "autodelete") and method == "POST":
            return self.send_json(200, {})
        raise ApiError(404, "Cannot %s /api/%s" % (method, "/".join(p)))

    def preview(self, method, label, path, data):
        """A port's preview: the request relayed to the port on loopback inside the sandbox."""
        port_s, _, token = label.partition("-")
        with self.fake.lock:
            target = self.fake.previews.get(token)
        if target is None or str(target[1]) != port_s:
            raise ApiError(404, "no such preview")
        sb = self.fake.get(target[0])
        port = target[1]
        code = ("import socket,sys;s=socket.create_connection(('127.0.0.1',%d));"
                "s.sendall(sys.stdin.buffer.read());s.shutdown(1);"
                "b=s.recv(65536)\nwhile b:\n sys.stdout.buffer.write(b);b=s.recv(65536)") % port
        req = ("%s %s HTTP/1.0\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n" % (method, path, len(data))).encode() + data
        r = subprocess.run(self.fake.sbx.exec_argv(sb.sbx_id, ["python3", "-c", code], stdin=True),
                           input=req, capture_output=True, env=self.fake.sbx.env, timeout=60)
        if r.returncode != 0 or not r.stdout:
            raise ApiError(502, "no service is listening on port %d" % port)
        self.wfile.write(r.stdout)
        self.close_connection = True

    # -- the toolbox -------------------------------------------------------------------------

    def toolbox(self, method, sid, p, query, data):
        f = self.fake
        sb = f.get(sid)
        if sb.state != "started":
            raise ApiError(400, "bad request: sandbox is not started")
        if p == ["process", "execute"] and method == "POST":
            return self.execute(sb, json.loads(data or b"{}"))
        if p[:2] == ["process", "session"]:
            return self.session(sb, method, p[2:], query, data)
        if p[:2] == ["process", "pty"]:
            return self.pty(sb, method, p[2:], query, data)
        if p and p[0] == "files":
            return self.files(sb, method, p[1:], query, data)
        if p == ["version"] or p == ["user-home-dir"]:
            return self.send_json(200, {"version": "0.1.0", "dir": HOME})
        raise ApiError(404, "Cannot %s /%s" % (method, "/".join(p)))

    def execute(self, sb, req):
        try:
            argv = shlex.split(req.get("command", ""))
        except ValueError as e:
            raise ApiError(400, "invalid command: %s" % e)
        if not argv:
            raise ApiError(400, "command is required")
        timeout = req.get("timeout") or 360
        env = dict(sb.env, **(req.get("envs") or {}))
        argv = self.fake.sbx.exec_argv(sb.sbx_id, argv, env=env, cwd=req.get("cwd") or HOME)
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=self.fake.sbx.env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ApiError(408, "command execution timeout")
        rc = r.returncode if r.returncode >= 0 else 128 - r.returncode
        self.send_json(200, {"exitCode": rc, "result": r.stdout.decode(errors="replace")})

    def session(self, sb, method, p, query, data):
        if not p and method == "POST":
            sid = json.loads(data or b"{}").get("sessionId") or ""
            with sb.lock:
                if not sid or sid in sb.sessions:
                    raise ApiError(409, "session already exists" if sid else "sessionId is required")
                sb.sessions[sid] = {}
            return self.send_bytes(201, b"", "text/plain")
        if not p and method == "GET":
            with sb.lock:
                out = [{"sessionId": k, "commands": [c.obj() for c in v.values()]} for k, v in sb.sessions.items()]
            return self.send_json(200, out)
        with sb.lock:
            cmds = sb.sessions.get(p[0])
        if cmds is None:
            raise ApiError(404, "session not found")
        rest = p[1:]
        if not rest and method == "GET":
            return self.send_json(200, {"sessionId": p[0], "commands": [c.obj() for c in cmds.values()]})
        if not rest and method == "DELETE":
            with sb.lock:
                sb.sessions.pop(p[0], None)
            for c in cmds.values():
                c.kill()
            return self.send_bytes(204, b"", "text/plain")
        if rest == ["exec"] and method == "POST":
            req = json.loads(data or b"{}")
            if not req.get("command"):
                raise ApiError(400, "command is required")
            cmd = Command(sb, self.fake.sbx, req["command"], sb.env)
            with sb.lock:
                cmds[cmd.id] = cmd
            if req.get("runAsync") or req.get("async"):
                return self.send_json(202, {"cmdId": cmd.id})
            with cmd.cond:
                while cmd.exit_code is None:
                    cmd.cond.wait()
            logs = cmd.logs()
            return self.send_json(200, {"cmdId": cmd.id, "output": logs["output"], "stdout": logs["stdout"],
                                        "stderr": logs["stderr"], "exitCode": cmd.exit_code})
        if len(rest) >= 2 and rest[0] == "command":
            cmd = cmds.get(rest[1])
            if cmd is None:
                raise ApiError(404, "command not found")
            if rest[2:] == [] and method == "GET":
                return self.send_json(200, cmd.obj())
            if rest[2:] == ["input"] and method == "POST":
                cmd.send_input(json.loads(data or b"{}").get("data", "").encode())
                return self.send_bytes(200, b"", "text/plain")
            if rest[2:] == ["logs"] and method == "GET":
                if query.get("follow") == "true" and self.headers.get("Upgrade", "").lower() == "websocket":
                    return self.follow_logs(cmd)
                return self.send_json(200, cmd.logs())
        raise ApiError(404, "Cannot %s session path" % method)

    def pty(self, sb, method, p, query, data):
        if p == ["create-connect"] and method == "GET":
            return self.pty_connect(sb, query)
        pty = sb.ptys.get(p[0]) if p else None
        if pty is None:
            raise ApiError(404, "PTY session not found")
        if p[1:] == ["resize"] and method == "POST":
            req = json.loads(data or b"{}")
            pty.resize(int(req.get("rows") or 24), int(req.get("cols") or 80))
            return self.send_json(200, {"id": pty.id})
        if p[1:] == [] and method == "DELETE":
            pty.kill()
            return self.send_json(200, {})
        raise ApiError(404, "Cannot %s pty path" % method)

    def pty_connect(self, sb, query):
        """create-connect: the terminal over a WebSocket. A text control message says connected,
        binary messages carry the terminal's output, the client's messages its input; at the end
        a control message with the exit code (when the client offered the exit-control
        subprotocol), then a close."""
        sid = query.get("id") or ""
        if not sid or sid in sb.ptys:
            raise ApiError(409 if sid else 400, "PTY session id is missing or in use")
        offered = [t.strip() for t in self.headers.get("Sec-WebSocket-Protocol", "").split(",") if t.strip()]
        env = {}
        for t in offered:
            if t.startswith("X-Daytona-Pty-Envs~"):
                b = t.split("~", 1)[1]
                env = json.loads(base64.urlsafe_b64decode(b + "=" * (-len(b) % 4)))
        pty = Pty(sb, self.fake.sbx, sid, int(query.get("rows") or 24), int(query.get("cols") or 80),
                  abspath(query.get("cwd") or HOME), dict(sb.env, **env))
        sb.ptys[sid] = pty
        key = self.headers.get("Sec-WebSocket-Key", "")
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept",
                         base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode())
        # A daemon without the exit-control capability chooses no subprotocol and says the exit
        # code only in the close frame's reason.
        exit_control = "X-Daytona-Pty-Exit-Control" in offered and self.fake.knobs["pty_exit_control"]
        chosen = "X-Daytona-Pty-Exit-Control" if exit_control else None
        if chosen:
            self.send_header("Sec-WebSocket-Protocol", chosen)
        self.end_headers()
        lock = threading.Lock()

        def send(op, payload):
            with lock:
                self.ws_send(op, payload)

        send(0x1, json.dumps({"type": "control", "status": "connected"}).encode())
        threading.Thread(target=self.pty_input, args=(pty,), daemon=True).start()
        while True:
            try:
                b = os.read(pty.master, CHUNK)
            except OSError:
                break
            if not b:
                break
            send(0x2, b)
        rc = pty.popen.wait()
        os.close(pty.master)
        sb.ptys.pop(sid, None)
        code = rc if rc >= 0 else 128 - rc
        if exit_control:
            send(0x1, json.dumps({"type": "control", "status": "exited", "exitCode": code}).encode())
        send(0x8, b"\x03\xe8" + json.dumps({"exitCode": code}).encode())
        self.close_connection = True

    def pty_input(self, pty):
        """The client's frames (masked) as the terminal's input, until its close."""
        try:
            while True:
                h = self.rfile.read(2)
                if len(h) < 2:
                    return
                op, n = h[0] & 0x0F, h[1] & 0x7F
                if n == 126:
                    n = int.from_bytes(self.rfile.read(2), "big")
                elif n == 127:
                    n = int.from_bytes(self.rfile.read(8), "big")
                mask = self.rfile.read(4) if h[1] & 0x80 else b"\0\0\0\0"
                data = bytes(c ^ mask[i % 4] for i, c in enumerate(self.rfile.read(n)))
                if op == 0x8:
                    pty.kill()
                    return
                if op in (0x0, 0x1, 0x2) and data:
                    os.write(pty.master, data)
        except (OSError, ValueError):
            return

    def follow_logs(self, cmd):
        """The command's logs over a WebSocket: each chunk one binary message, prefixed with three
        0x01 bytes (stdout) or three 0x02 bytes (stderr); closed (1000) when the command ended."""
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        with self.fake.lock:
            self.fake.stats["ws_logs"] += 1
        sent = 0
        while True:
            with cmd.cond:
                while sent == len(cmd.chunks) and cmd.exit_code is None:
                    cmd.cond.wait(1)
                batch = cmd.chunks[sent:]
                sent += len(batch)
                ended = cmd.exit_code is not None and sent == len(cmd.chunks)
            for stream, b in batch:
                self.ws_send(0x2, (STDOUT_PREFIX if stream == 1 else STDERR_PREFIX) + b)
            if ended:
                break
        self.ws_send(0x8, b"\x03\xe8")
        self.close_connection = True

    def ws_send(self, opcode, payload):
        n = len(payload)
        if n < 126:
            head = bytes([0x80 | opcode, n])
        elif n < 65536:
            head = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
        self.wfile.write(head + payload)
        self.wfile.flush()

    def files(self, sb, method, p, query, data):
        sbx = self.fake.sbx
        if p == ["bulk-upload"] and method == "POST":
            return self.bulk_upload(sb, data)
        if p == ["bulk-download"] and method == "POST":
            return self.bulk_download(sb, json.loads(data or b"{}").get("paths") or [])
        if p == ["download"] and method == "GET":
            path = abspath(query.get("path"))
            r = subprocess.run(sbx.exec_argv(sb.sbx_id, ["cat", "--", path]), capture_output=True,
                               env=sbx.env, timeout=300)
            if r.returncode != 0:
                raise ApiError(404, "file not found: %s" % path)
            return self.send_bytes(200, r.stdout, "application/octet-stream")
        if p == ["info"] and method == "GET":
            return self.send_json(200, sbx.helper(sb.sbx_id, "info", {"path": abspath(query.get("path"))}))
        if p == [] and method == "GET":
            return self.send_json(200, sbx.helper(sb.sbx_id, "list", {"path": abspath(query.get("path"))}))
        if p == [] and method == "DELETE":
            sbx.helper(sb.sbx_id, "delete", {"path": abspath(query.get("path")),
                                             "recursive": query.get("recursive") == "true"})
            return self.send_bytes(204, b"", "text/plain")
        if p == ["folder"] and method == "POST":
            sbx.helper(sb.sbx_id, "folder", {"path": abspath(query.get("path")), "mode": query.get("mode") or "755"})
            return self.send_bytes(201, b"", "text/plain")
        if p == ["permissions"] and method == "POST":
            sbx.helper(sb.sbx_id, "chmod", {"path": abspath(query.get("path")), "mode": query.get("mode"),
                                            "owner": query.get("owner"), "group": query.get("group")})
            return self.send_bytes(200, b"", "text/plain")
        raise ApiError(404, "Cannot %s /files/%s" % (method, "/".join(p)))

    def bulk_upload(self, sb, data):
        ctype = self.headers.get("Content-Type", "")
        if not ctype.startswith("multipart/form-data"):
            raise ApiError(400, "expected multipart/form-data")
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + data)
        paths, files = {}, {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition") or ""
            if name.startswith("files[") and name.endswith("].path"):
                paths[name[6:-6]] = part.get_payload(decode=True).decode()
            elif name.startswith("files[") and name.endswith("].file"):
                files[name[6:-6]] = part.get_payload(decode=True) or b""
        if not files or set(files) != set(paths):
            raise ApiError(400, "each file needs its path")
        sbx = self.fake.sbx
        for i, content in files.items():
            path = abspath(paths[i])
            script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
            r = subprocess.run(sbx.exec_argv(sb.sbx_id, ["/bin/sh", "-c", script, "sh", path], stdin=True),
                               input=content, capture_output=True, env=sbx.env, timeout=300)
            if r.returncode != 0:
                raise ApiError(400, "failed to write %s: %s" % (path, r.stderr.decode(errors="replace").strip()))
        self.send_bytes(200, b"", "text/plain")

    def bulk_download(self, sb, paths):
        boundary = secrets.token_hex(16)
        out = bytearray()
        sbx = self.fake.sbx
        for p in paths:
            path = abspath(p)
            r = subprocess.run(sbx.exec_argv(sb.sbx_id, ["cat", "--", path]), capture_output=True,
                               env=sbx.env, timeout=300)
            if r.returncode == 0:
                name, ctype, body = "file", "application/octet-stream", r.stdout
            else:
                name, ctype = "error", "application/json"
                body = json.dumps({"message": "file not found: %s" % path, "statusCode": 404,
                                   "code": "FILE_NOT_FOUND"}).encode()
            out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                    "Content-Type: %s\r\nContent-Length: %d\r\n\r\n" % (boundary, name, p, ctype, len(body))).encode()
            out += body + b"\r\n"
        out += ("--%s--\r\n" % boundary).encode()
        self.send_bytes(200, bytes(out), "multipart/form-data; boundary=" + boundary)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description="A fake Daytona (API and toolbox) over local sbx sandboxes.")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--api-key", default=os.environ.get("DAYTONA_API_KEY", ""))
    ap.add_argument("--jwt", default=os.environ.get("FAKE_DAYTONA_JWT", ""))
    ap.add_argument("--organization", default="org-" + secrets.token_hex(4))
    ap.add_argument("--sbx", default=os.environ.get("SBX", "sbx"))
    ap.add_argument("--snapshot", action="append", default=[])
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    a = ap.parse_args()
    if not a.api_key:
        ap.error("--api-key (or DAYTONA_API_KEY) is required")
    os.makedirs(a.state_dir, exist_ok=True)
    fake = Fake(Sbx(a.sbx, a.state_dir), a.api_key, a.jwt, a.organization,
                ["daytonaio/sandbox:0.4.3"] + a.snapshot, 0, "https" if a.tls_cert else "http")
    Handler.fake = fake
    srv = Server(("127.0.0.1", a.port), Handler)
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        ctx.set_alpn_protocols(["http/1.1"])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    fake.port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with open(os.path.join(a.state_dir, "port.tmp"), "w") as f:
        f.write("%d %s\n" % (fake.port, a.organization))
    os.rename(os.path.join(a.state_dir, "port.tmp"), os.path.join(a.state_dir, "port"))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(1):
        pass
    srv.shutdown()
    fake.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
