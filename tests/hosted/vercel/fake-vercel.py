#!/usr/bin/env python3
"""A loopback fake of Vercel Sandbox for tests: the REST API as @vercel/sandbox 3.x speaks it
(named sandboxes, each with a current session), whose commands and files are real, in local
sbx sandboxes.

usage: fake-vercel.py --state-dir DIR [--port N] [--sbx PATH] [--tls-cert F --tls-key F]

One listener on 127.0.0.1 (port 0: a free one, written to DIR/port). The token it accepts is
$VERCEL_TOKEN, the team $VERCEL_TEAM_ID (the teamId query every request carries). Every Vercel
sandbox is an sbx sandbox made with a manifest whose root is /vercel/sandbox, owned by its one
user "vercel-sandbox" (Vercel's layout); commands run as that user. "sudo" runs a command as
sbx's own account of the sandbox ("sandbox"): a local sbx sandbox has no root to give (the
name is reserved), so the fake shows only that sudo changes the user.

Requests the fake answers (all JSON unless said; errors are {"error": {"code", "message"}}):
  POST /v2/sandboxes, /v3/sandboxes        create (runtime, source {type: snapshot}, ports,
                                            timeout ms, env, name, persistent, tags)
  GET /v2/sandboxes/{name}[?resume=true]   the sandbox, its session and routes (a stopped
                                            one is started again with resume)
  DELETE /v2/sandboxes/{name}              remove it
  GET /v2/sandboxes/sessions/{sid}         a session and routes
  POST .../sessions/{sid}/cmd              start a command; with wait: an NDJSON stream of
                                            {command}, the log lines, {command} finished
  GET .../cmd/{cmdId}[?wait=true]          a command (wait: when it has finished)
  GET .../cmd/{cmdId}/logs                 NDJSON {stream: stdout|stderr, data} from the start
  POST .../cmd/{cmdId}/kill                {signal}
  POST .../fs/mkdir {path, cwd}, .../fs/read {path, cwd} (octet-stream; 404),
  POST .../fs/write                        a tar.gz body unpacked under the x-cwd header's dir
  POST .../stop, .../extend-timeout {duration}, .../snapshot (stops the session)
  GET/DELETE /v2/sandboxes/snapshots/{id}
A stopped session answers 410 (sandbox_stopped), as the service does.
  GET /v2/sandboxes[?tags=K:V]             the sandboxes (one page)
A request whose Host is <subdomain>.vercel.run reaches the sandbox's declared port, as the
service's route does (the routes' URLs are https://<name>-<port>.vercel.run; tests send them
to the fake's port with that Host).

Every request body field the fake does not know (FIELDS below) is logged to
DIR/unknown-fields.log, one line each; the tests assert it stays empty, so neither Vercel's
client nor sbx sends what the fake would silently ignore.

Test knobs (not Vercel's): POST /_fake/knobs {"rate_limit_next": N, "retry_after": S} (the
next N requests get 429 with Retry-After), {"cut_next": N} (the next N command streams in wait
mode are cut after their first log line, with no end), {"bad_token": 1} (every request 403), {"expire":
"NAME"} (the sandbox is gone: 404), GET /_fake/stats {"rate_limited", "sandboxes", "requests"}.
"""
import argparse
import http.client
import http.server
import io
import json
import os
import re
import secrets
import signal
import socket
import socketserver
import ssl
import string
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse

ROOT = "/vercel/sandbox"
USER = "vercel-sandbox"
RUNTIMES = ("node22", "node24", "python3.13")
MAX_JSON = 1 << 20
MAX_TAR = 256 << 20
CHUNK = 1 << 16
ALPHABET = string.ascii_lowercase + string.digits
WRAPPER = 'cd -- "$0" 2>/dev/null || { echo "no such directory: $0" >&2; exit 1; }; exec "$@"'


def log(msg):
    sys.stderr.write("fake-vercel: %s\n" % msg)
    sys.stderr.flush()


def now_ms():
    return int(time.time() * 1000)


def new_id(prefix):
    return prefix + "".join(secrets.choice(ALPHABET) for _ in range(20))


# The request body fields the fake knows, per call.
FIELDS = {
    "create": {"projectId", "ports", "source", "timeout", "resources", "runtime", "name",
               "persistent", "env", "tags", "snapshotExpiration"},
    "cmd": {"command", "args", "cwd", "env", "sudo", "wait", "logs", "timeout"},
    "fs": {"path", "cwd"},
    "kill": {"signal"},
    "snapshot": {"expiration"},
    "extend-timeout": {"duration"},
}
UNKNOWN_LOG = None  # set by main: DIR/unknown-fields.log


def note_fields(where, body):
    unknown = sorted(set(body) - FIELDS[where]) if isinstance(body, dict) else ["(not an object)"]
    if unknown and UNKNOWN_LOG:
        with open(UNKNOWN_LOG, "a") as f:
            for k in unknown:
                f.write("%s: %s\n" % (where, k))


class ApiError(Exception):
    def __init__(self, status, code, message, headers=None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


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
            f.write("version: 1\nroot: %s\nusers: [%s]\nroot_owner: %s\n" % (ROOT, USER, USER))

    def run(self, *args, input=None, timeout=300):
        return subprocess.run([self.binary] + list(args), input=input, capture_output=True,
                              env=self.env, timeout=timeout)

    def check(self, *args, input=None):
        r = self.run(*args, input=input)
        if r.returncode != 0:
            raise ApiError(500, "internal_error", "sbx %s failed: %s" % (
                args[0], r.stderr.decode(errors="replace").strip()))
        return r.stdout.decode().strip()

    def exec_argv(self, sbx_id, argv, *, user=USER, env=None, stdin=False):
        out = [self.binary, "sandbox", "exec", "--keep-background"]
        if user:
            out += ["--user", user]
        if stdin:
            out.append("-i")
        for k, v in (env or {}).items():
            out += ["--env", "%s=%s" % (k, v)]
        return out + [sbx_id, "--"] + list(argv)


class Command:
    """One command: an `sbx sandbox exec` client; its output is kept (the logs endpoint replays
    it from the start) and a condition wakes the readers."""

    def __init__(self, session, name, args, cwd):
        self.id = new_id("cmd_")
        self.session = session
        self.name, self.args, self.cwd = name, list(args), cwd
        self.started = now_ms()
        self.exit_code = None
        self.duration = None
        self.logs = []
        self.cond = threading.Condition()
        self.popen = None
        self.signal_sent = 0

    def obj(self):
        o = {"id": self.id, "name": self.name, "args": self.args, "cwd": self.cwd,
             "sessionId": self.session.id, "exitCode": self.exit_code, "startedAt": self.started}
        if self.duration is not None:
            o["durationMs"] = self.duration
        return o

    def start(self, sbx, sbx_id, env, sudo, timeout_ms):
        argv = sbx.exec_argv(sbx_id, ["/bin/sh", "-c", WRAPPER, self.cwd, self.name] + self.args,
                             user=None if sudo else USER, env=env)
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=sbx.env, close_fds=True,
                                      start_new_session=True)
        readers = [threading.Thread(target=self.read_loop, args=(self.popen.stdout, "stdout"), daemon=True),
                   threading.Thread(target=self.read_loop, args=(self.popen.stderr, "stderr"), daemon=True)]
        for t in readers:
            t.start()
        threading.Thread(target=self.wait_loop, args=(readers, timeout_ms), daemon=True).start()

    def read_loop(self, f, stream):
        while True:
            b = os.read(f.fileno(), CHUNK)
            if not b:
                break
            with self.cond:
                self.logs.append((stream, b.decode("utf-8", errors="replace")))
                self.cond.notify_all()

    def wait_loop(self, readers, timeout_ms):
        try:
            rc = self.popen.wait(timeout=timeout_ms / 1000 if timeout_ms else None)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            rc = self.popen.wait()
        for t in readers:
            t.join(30)
        if rc < 0:
            rc = 128 - rc
        with self.cond:
            self.exit_code = rc
            self.duration = now_ms() - self.started
            self.cond.notify_all()

    def kill(self, sig):
        with self.cond:
            if self.exit_code is not None:
                return
            self.signal_sent = sig
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout=None):
        with self.cond:
            self.cond.wait_for(lambda: self.exit_code is not None, timeout)
            return self.exit_code is not None

    def follow(self):
        """The log lines from the first, then each as it comes, until the command ends."""
        i = 0
        while True:
            with self.cond:
                self.cond.wait_for(lambda: len(self.logs) > i or self.exit_code is not None)
                batch = self.logs[i:]
                i = len(self.logs)
                ended = self.exit_code is not None and i == len(self.logs)
            for item in batch:
                yield item
            if ended and not batch:
                return


class Session:
    def __init__(self, sandbox):
        self.id = new_id("sbx_")
        self.sandbox = sandbox
        self.status = "running"
        self.created = now_ms()
        self.stopped = None
        self.timeout = sandbox.timeout  # extended by extend-timeout
        self.commands = {}

    def obj(self):
        sb = self.sandbox
        o = {"id": self.id, "memory": 2048 * sb.vcpus, "vcpus": sb.vcpus, "region": "iad1",
             "runtime": sb.runtime, "timeout": self.timeout, "status": self.status,
             "requestedAt": self.created, "startedAt": self.created, "createdAt": self.created,
             "updatedAt": now_ms(), "cwd": ROOT}
        if sb.source_snapshot:
            o["sourceSnapshotId"] = sb.source_snapshot
        if self.stopped:
            o["stoppedAt"] = self.stopped
        return o


class Sandbox:
    def __init__(self, name, runtime, ports, timeout, env, vcpus, persistent, tags, source_snapshot):
        self.name = name
        self.runtime = runtime
        self.ports = ports
        self.timeout = timeout
        self.env = env
        self.vcpus = vcpus
        self.persistent = persistent
        self.tags = tags
        self.source_snapshot = source_snapshot
        self.created = now_ms()
        self.sbx_id = None
        self.session = None
        self.snapshot_id = None
        self.lock = threading.RLock()

    def obj(self):
        return {"name": self.name, "persistent": self.persistent, "region": "iad1",
                "vcpus": self.vcpus, "memory": 2048 * self.vcpus, "runtime": self.runtime,
                "timeout": self.timeout, "createdAt": self.created, "updatedAt": now_ms(),
                "currentSessionId": self.session.id, "status": self.session.status,
                "cwd": ROOT, "tags": self.tags,
                **({"currentSnapshotId": self.snapshot_id} if self.snapshot_id else {})}


class Fake:
    def __init__(self, sbx, token, team, port_base):
        self.sbx = sbx
        self.token = token
        self.team = team
        self.port_base = port_base
        self.lock = threading.Lock()
        self.sandboxes = {}
        self.sessions = {}
        self.snapshots = {}
        self.knobs = {"rate_limit_next": 0, "retry_after": 1, "bad_token": 0, "cut_next": 0}
        self.stats = {"rate_limited": 0, "requests": 0}

    def routes(self, sb):
        return [{"url": "https://%s.vercel.run" % self.subdomain(sb, p),
                 "subdomain": self.subdomain(sb, p), "port": p} for p in sb.ports]

    @staticmethod
    def subdomain(sb, port):
        return "%s-%d" % (sb.name, port)

    def answer(self, sb):
        return {"sandbox": sb.obj(), "session": sb.session.obj(), "routes": self.routes(sb)}

    def sandbox(self, name):
        with self.lock:
            sb = self.sandboxes.get(name)
        if sb is None:
            raise ApiError(404, "not_found", "Sandbox %s not found" % json.dumps(name))
        return sb

    def session(self, sid):
        with self.lock:
            se = self.sessions.get(sid)
        if se is None:
            raise ApiError(404, "not_found", "Session %s not found" % json.dumps(sid))
        return se

    def running(self, sid):
        se = self.session(sid)
        if se.status != "running":
            raise ApiError(410, "sandbox_stopped", "Sandbox session %s is %s" % (sid, se.status))
        return se

    def create(self, body):
        note_fields("create", body)
        runtime = body.get("runtime")
        if runtime is not None and runtime not in RUNTIMES:
            raise ApiError(400, "bad_request", "invalid runtime %s (one of %s)" % (
                json.dumps(runtime), ", ".join(RUNTIMES)))
        source = body.get("source") or {}
        snap = None
        if source:
            if source.get("type") != "snapshot":
                raise ApiError(400, "bad_request", "the fake only makes sandboxes from snapshots")
            snap = self.snapshots.get(source.get("snapshotId"))
            if snap is None or snap["status"] != "created":
                raise ApiError(404, "snapshot_not_found", "Snapshot %s not found" % json.dumps(source.get("snapshotId")))
        ports = body.get("ports") or []
        if len(ports) > 4 or not all(isinstance(p, int) and 0 < p < 65536 for p in ports):
            raise ApiError(400, "bad_request", "ports: at most 4 ports, each 1..65535")
        timeout = body.get("timeout") or 300000
        name = body.get("name") or new_id("sb-")
        with self.lock:
            if name in self.sandboxes:
                raise ApiError(409, "conflict", "Sandbox %s already exists" % json.dumps(name))
        sb = Sandbox(name, runtime or "node24", ports, timeout, body.get("env") or {},
                     (body.get("resources") or {}).get("vcpus", 2),
                     bool(body.get("persistent", True)), body.get("tags") or {},
                     snap["id"] if snap else None)
        args = ["sandbox", "create", "--manifest", self.sbx.manifest]
        if snap:
            args += ["--snapshot", snap["ref"]]
        sb.sbx_id = self.sbx.check(*args)
        sb.session = Session(sb)
        with self.lock:
            self.sandboxes[name] = sb
            self.sessions[sb.session.id] = sb.session
        log("sandbox %s is sbx sandbox %s" % (name, sb.sbx_id))
        return sb

    def stop_commands(self, se):
        for c in list(se.commands.values()):
            c.kill(signal.SIGKILL)
        for c in list(se.commands.values()):
            c.wait(10)

    def stop(self, sb):
        """The session ends; the sandbox keeps its disk. (The sbx sandbox stays as it is: an sbx
        stop and start would bring its files back as sbx's default user's, where the service
        keeps their owners; its commands end and it answers nothing until it is resumed.)"""
        with sb.lock:
            se = sb.session
            if se.status != "running":
                return
            se.status = "stopping"
            self.stop_commands(se)
            se.status = "stopped"
            se.stopped = now_ms()

    def resume(self, sb):
        with sb.lock:
            if sb.session.status == "running":
                return False
            sb.session = Session(sb)
            with self.lock:
                self.sessions[sb.session.id] = sb.session
            return True

    def remove(self, sb):
        with sb.lock:
            self.stop_commands(sb.session)
            self.sbx.run("sandbox", "rm", sb.sbx_id)
        with self.lock:
            self.sandboxes.pop(sb.name, None)
            for sid in [k for k, v in self.sessions.items() if v.sandbox is sb]:
                del self.sessions[sid]

    def snapshot(self, se, body):
        sb = se.sandbox
        with sb.lock:
            se.status = "snapshotting"
            self.stop_commands(se)
            try:
                ref = self.sbx.check("sandbox", "snapshot", sb.sbx_id).splitlines()[-1]
            finally:
                se.status = "running"
            self.stop(sb)
        snap = {"id": new_id("snap_"), "sourceSessionId": se.id, "region": "iad1",
                "status": "created", "sizeBytes": 0, "createdAt": now_ms(), "updatedAt": now_ms(),
                "ref": ref}
        exp = (body or {}).get("expiration")
        if exp:
            snap["expiresAt"] = now_ms() + int(exp)
        with self.lock:
            self.snapshots[snap["id"]] = snap
        sb.snapshot_id = snap["id"]
        return snap

    def reaper(self, stopping):
        """A session whose timeout passed is stopped (its sandbox keeps its disk)."""
        while not stopping.wait(0.2):
            now = now_ms()
            with self.lock:
                due = [sb for sb in self.sandboxes.values()
                       if sb.session.status == "running" and sb.session.created + sb.session.timeout <= now]
            for sb in due:
                log("session %s of %s timed out" % (sb.session.id, sb.name))
                self.stop(sb)

    def shutdown(self):
        with self.lock:
            all_sb = list(self.sandboxes.values())
        for sb in all_sb:
            self.remove(sb)
        for snap in self.snapshots.values():
            self.sbx.run("snapshot", "rm", "--force", snap["ref"])


def snapshot_obj(snap):
    return {k: v for k, v in snap.items() if k != "ref"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-vercel"
    fake = None

    def log_message(self, fmt, *args):
        if os.environ.get("FAKE_VERCEL_VERBOSE"):
            sys.stderr.write("fake-vercel: " + fmt % args + "\n")

    def read_body(self, limit):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                out += self.rfile.read(size)
                self.rfile.readline(8)
                if len(out) > limit:
                    raise ApiError(413, "payload_too_large", "request body over %d bytes" % limit)
            return bytes(out)
        n = int(self.headers.get("Content-Length") or 0)
        if n > limit:
            raise ApiError(413, "payload_too_large", "request body over %d bytes" % limit)
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

    def start_ndjson(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def line(self, obj):
        data = json.dumps(obj).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_chunked(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def dispatch(self, method):
        fake = self.fake
        host = (self.headers.get("Host") or "").split(":")[0]
        url = urllib.parse.urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        try:
            if host.endswith(".vercel.run"):
                return self.proxy_port(host[:-len(".vercel.run")])
            if path.startswith("/_fake/"):
                return self.knob(method, path)
            with fake.lock:
                fake.stats["requests"] += 1
                limited = fake.knobs["rate_limit_next"] > 0
                if limited:
                    fake.knobs["rate_limit_next"] -= 1
                    fake.stats["rate_limited"] += 1
            self.authenticate(query)
            if limited:
                raise ApiError(429, "rate_limited", "Too many requests, slow down",
                               {"Retry-After": str(fake.knobs["retry_after"])})
            self.route(method, path, query)
        except ApiError as e:
            self.send_json(e.status, {"error": {"code": e.code, "message": e.message}}, e.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def authenticate(self, query):
        auth = self.headers.get("Authorization") or ""
        if not auth.startswith("Bearer ") or self.fake.knobs["bad_token"]:
            raise ApiError(403, "forbidden", "Not authorized: the token is missing or invalid")
        if not secrets.compare_digest(auth[7:].encode(), self.fake.token.encode()):
            raise ApiError(403, "forbidden", "Not authorized: the token is missing or invalid")
        if query.get("teamId") != self.fake.team:
            raise ApiError(403, "forbidden", "You don't have access to team %s" % json.dumps(query.get("teamId", "")))

    def knob(self, method, path):
        fake = self.fake
        if path == "/_fake/knobs" and method == "POST":
            data = json.loads(self.read_body(MAX_JSON) or b"{}")
            for k, v in data.items():
                if k == "expire":
                    sb = fake.sandbox(v)
                    fake.remove(sb)
                    continue
                if k not in fake.knobs:
                    return self.send_json(400, {"error": "unknown knob " + k})
                with fake.lock:
                    fake.knobs[k] = int(v)
            return self.send_json(200, fake.knobs)
        if path == "/_fake/stats" and method == "GET":
            with fake.lock:
                out = dict(fake.stats, sandboxes=len(fake.sandboxes))
            return self.send_json(200, out)
        raise ApiError(404, "not_found", "no such knob")

    def json_body(self):
        body = self.read_body(MAX_JSON)
        try:
            return json.loads(body) if body.strip() else {}
        except ValueError as e:
            raise ApiError(400, "bad_request", "invalid JSON: %s" % e)

    def route(self, method, path, query):
        fake = self.fake
        p = path.strip("/").split("/")
        if p[:1] not in (["v2"], ["v3"]) or p[1:2] != ["sandboxes"]:
            raise ApiError(404, "not_found", "no route %s %s" % (method, path))
        rest = p[2:]
        if not rest and method == "POST":
            sb = fake.create(self.json_body())
            return self.send_json(200, fake.answer(sb))
        if not rest and method == "GET" and p[0] == "v2":
            want = query.get("tags", "")
            with fake.lock:
                all_sb = list(fake.sandboxes.values())
            out = [sb.obj() for sb in all_sb
                   if not want or "%s:%s" % tuple(want.split(":", 1) + [""])[:2] in
                   ["%s:%s" % kv for kv in sb.tags.items()]]
            return self.send_json(200, {"sandboxes": out, "pagination": {"count": len(out), "next": None}})
        if p[0] != "v2":
            raise ApiError(404, "not_found", "no route %s %s" % (method, path))
        if rest[:1] == ["snapshots"] and len(rest) == 2:
            snap = fake.snapshots.get(rest[1])
            if snap is None or snap["status"] == "deleted":
                raise ApiError(404, "not_found", "Snapshot %s not found" % json.dumps(rest[1]))
            if method == "DELETE":
                fake.sbx.run("snapshot", "rm", "--force", snap["ref"])
                snap["status"] = "deleted"
            return self.send_json(200, {"snapshot": snapshot_obj(snap)})
        if rest[:1] == ["sessions"] and len(rest) >= 2:
            return self.session_route(method, rest[1], rest[2:], query)
        if len(rest) == 1:
            sb = fake.sandbox(urllib.parse.unquote(rest[0]))
            if method == "GET":
                resumed = fake.resume(sb) if query.get("resume") == "true" else False
                out = fake.answer(sb)
                out["resumed"] = resumed
                return self.send_json(200, out)
            if method == "DELETE":
                fake.remove(sb)
                return self.send_json(200, {"sandbox": sb.obj()})
        raise ApiError(404, "not_found", "no route %s %s" % (method, path))

    def session_route(self, method, sid, rest, query):
        fake = self.fake
        if not rest and method == "GET":
            se = fake.session(sid)
            return self.send_json(200, {"session": se.obj(), "routes": fake.routes(se.sandbox)})
        se = fake.session(sid)
        sb = se.sandbox
        op = "/".join(rest)
        if op == "stop" and method == "POST":
            fake.stop(sb)
            return self.send_json(200, {"session": se.obj(), "sandbox": sb.obj()})
        se = fake.running(sid)
        if op == "cmd" and method == "POST":
            return self.run_command(se, self.json_body())
        if rest[:1] == ["cmd"] and len(rest) >= 2:
            cmd = se.commands.get(rest[1])
            if cmd is None:
                raise ApiError(404, "not_found", "Command %s not found" % json.dumps(rest[1]))
            if len(rest) == 2 and method == "GET":
                if query.get("wait") == "true":
                    cmd.wait()
                return self.send_json(200, {"command": cmd.obj()})
            if rest[2:] == ["logs"] and method == "GET":
                self.start_ndjson()
                for stream, data in cmd.follow():
                    self.line({"stream": stream, "data": data})
                return self.end_chunked()
            if rest[2:] == ["kill"] and method == "POST":
                body = self.json_body()
                note_fields("kill", body)
                sig = body.get("signal", 15)
                if isinstance(sig, str):
                    sig = getattr(signal, sig if sig.startswith("SIG") else "SIG" + sig, 15)
                cmd.kill(int(sig))
                return self.send_json(200, {"command": cmd.obj()})
        if op == "fs/mkdir" and method == "POST":
            return self.fs_mkdir(se, self.json_body())
        if op == "fs/read" and method == "POST":
            return self.fs_read(se, self.json_body())
        if op == "fs/write" and method == "POST":
            return self.fs_write(se)
        if op == "extend-timeout" and method == "POST":
            body = self.json_body()
            note_fields("extend-timeout", body)
            with self.fake.lock:
                se.timeout += int(body.get("duration") or 0)
            return self.send_json(200, {"session": se.obj()})
        if op == "snapshot" and method == "POST":
            body = self.json_body()
            note_fields("snapshot", body)
            snap = fake.snapshot(se, body)
            return self.send_json(200, {"snapshot": snapshot_obj(snap), "session": se.obj()})
        raise ApiError(404, "not_found", "no route %s %s" % (method, self.path))

    def run_command(self, se, body):
        note_fields("cmd", body)
        name = body.get("command")
        args = body.get("args") or []
        if not isinstance(name, str) or not name or not all(isinstance(a, str) for a in args):
            raise ApiError(400, "bad_request", "command must be a string and args strings")
        env = dict(se.sandbox.env)
        env.update(body.get("env") or {})
        cwd = body.get("cwd") or ROOT
        cmd = Command(se, name, args, cwd)
        se.commands[cmd.id] = cmd
        cmd.start(self.fake.sbx, se.sandbox.sbx_id, env, bool(body.get("sudo")), body.get("timeout"))
        if not body.get("wait"):
            return self.send_json(200, {"command": cmd.obj()})
        self.start_ndjson()
        self.line({"command": cmd.obj()})
        if body.get("logs"):
            for stream, data in cmd.follow():
                self.line({"stream": stream, "data": data})
                with self.fake.lock:
                    cut = self.fake.knobs["cut_next"] > 0
                    if cut:
                        self.fake.knobs["cut_next"] -= 1
                if cut:
                    # A connection lost in the middle (a proxy's reset): no end chunk.
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
        cmd.wait()
        self.line({"command": cmd.obj()})
        self.end_chunked()

    def in_sandbox(self, se, argv, input=None, user=USER):
        return subprocess.run(self.fake.sbx.exec_argv(se.sandbox.sbx_id, argv, user=user,
                                                       stdin=input is not None),
                              input=input, capture_output=True, env=self.fake.sbx.env, timeout=300)

    @staticmethod
    def abs_path(body):
        note_fields("fs", body)
        path = body.get("path")
        if not isinstance(path, str) or not path:
            raise ApiError(400, "bad_request", "path is required")
        return os.path.normpath(os.path.join(body.get("cwd") or ROOT, path))

    def fs_mkdir(self, se, body):
        path = self.abs_path(body)
        r = self.in_sandbox(se, ["mkdir", "--", path])
        if r.returncode != 0:
            raise ApiError(400, "file_error", "mkdir %s: %s" % (path, r.stderr.decode(errors="replace").strip()))
        self.send_json(200, {})

    def fs_read(self, se, body):
        path = self.abs_path(body)
        r = self.in_sandbox(se, ["/bin/sh", "-c", '[ -f "$1" ] || exit 3; exec cat -- "$1"', "sh", path])
        if r.returncode == 3:
            raise ApiError(404, "file_not_found", "File %s not found" % json.dumps(path))
        if r.returncode != 0:
            raise ApiError(400, "file_error", "read %s: %s" % (path, r.stderr.decode(errors="replace").strip()))
        self.send_bytes(200, r.stdout, "application/octet-stream")

    def fs_write(self, se):
        cwd = self.headers.get("x-cwd") or "/"
        body = self.read_body(MAX_TAR)
        # The service unpacks as the sandbox's user; the archive is checked first like a
        # careful service would (no absolute or .. names, no links, no devices).
        try:
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as t:
                for m in t.getmembers():
                    if m.name.startswith("/") or ".." in m.name.split("/") or not (m.isfile() or m.isdir()):
                        raise ApiError(400, "bad_request", "archive member %s refused" % json.dumps(m.name))
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ApiError(400, "bad_request", "the body is not a tar.gz archive: %s" % e)
        r = self.in_sandbox(se, ["tar", "-xzf", "-", "--no-same-owner", "-C", cwd], input=body)
        if r.returncode != 0:
            raise ApiError(400, "file_error", "write under %s: %s" % (cwd, r.stderr.decode(errors="replace").strip()))
        self.send_json(200, {})

    def proxy_port(self, subdomain):
        fake = self.fake
        m = re.fullmatch(r"(.+)-(\d+)", subdomain)
        sb = fake.sandboxes.get(m.group(1)) if m else None
        port = int(m.group(2)) if m else 0
        if sb is None or port not in sb.ports:
            raise ApiError(404, "not_found", "no route for %s" % subdomain)
        r = fake.sbx.run("sandbox", "port", sb.sbx_id, str(port))
        u = urllib.parse.urlsplit(r.stdout.decode().strip()) if r.returncode == 0 else None
        body = self.read_body(MAX_JSON)
        if u is None or not u.port:
            raise ApiError(502, "bad_gateway", "port %d is not open" % port)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "transfer-encoding", "content-length")}
        try:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            conn.request(self.command, self.path, body or None, headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        except OSError as e:
            raise ApiError(502, "bad_gateway", "port %d: %s" % (port, e))
        self.send_bytes(resp.status, data, resp.getheader("Content-Type", "application/octet-stream"))


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
    global UNKNOWN_LOG
    UNKNOWN_LOG = os.path.join(a.state_dir, "unknown-fields.log")
    token = os.environ.get("VERCEL_TOKEN") or secrets.token_hex(24)
    team = os.environ.get("VERCEL_TEAM_ID") or "team_fake"
    srv = Server(("127.0.0.1", a.port), Handler)
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    fake = Fake(Sbx(a.sbx, a.state_dir), token, team, srv.server_address[1])
    Handler.fake = fake
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with open(os.path.join(a.state_dir, "port.tmp"), "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(os.path.join(a.state_dir, "port.tmp"), os.path.join(a.state_dir, "port"))
    done = threading.Event()
    threading.Thread(target=fake.reaper, args=(done,), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    srv.shutdown()
    fake.shutdown()


if __name__ == "__main__":
    main()
