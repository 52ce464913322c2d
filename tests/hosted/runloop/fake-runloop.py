#!/usr/bin/env python3
"""A loopback fake of Runloop's devbox API for tests, whose commands and files are real, in
local sbx sandboxes.

usage: fake-runloop.py --state-dir DIR [--port N] [--sbx PATH] [--blueprint NAME]...
                       [--tls-cert FILE --tls-key FILE]
       fake-runloop.py --schema     print the request fields it knows, with their interfaces

One listener on 127.0.0.1 (HTTP/1.1, HTTPS with --tls-cert; port 0 picks a free port,
written to DIR/port). The key
is $RUNLOOP_API_KEY, sent as "Authorization: Bearer KEY". Every devbox is an sbx sandbox made
with a manifest whose workspace root is /home/user, whose one user is "user" and who owns that
root (the devbox layout); commands run as "user" through /bin/bash -c in /home/user. sbx keeps
its state under DIR (XDG_RUNTIME_DIR, SBX_WORKSPACES, SBX_STOPPED, SBX_SNAPSHOTS and
XDG_STATE_HOME point there); every sandbox is removed on SIGTERM/SIGINT and at shutdown.

What it speaks (the paths of @runloop/api-client): /v1/devboxes (create, list),
/v1/devboxes/create_and_await_running, /v1/devboxes/{id} (get), .../wait_for_status (long
poll: 408 after HOLD seconds), .../shutdown, .../suspend, .../resume, .../keep_alive,
.../execute_async, .../execute, .../execute_sync, .../executions/{eid} (get),
.../executions/{eid}/wait_for_status, .../kill, .../send_std_in,
.../stream_stdout_updates and .../stream_stderr_updates (SSE, "data: {output, offset}", from
the byte offset asked), .../upload_file (multipart: path, file), .../download_file
(octet-stream), .../read_file_contents, .../write_file_contents, .../snapshot_disk,
.../snapshot_disk_async, /v1/devboxes/disk_snapshots/{sid}/status, .../enable_tunnel.

Test knobs (no key needed, not part of Runloop): POST /_fake/knobs with
{"rate_limit_next": N, "retry_after": S} (the next N API requests get 429 with Retry-After: S),
{"max_devboxes": N} (creating more running devboxes is a 429 quota answer; 0: no limit),
{"stream_hold": S} (an output stream that has had nothing to send for S seconds is ended
while its command runs, as the service ends idle streams; 0: never),
{"async_answer_delay": S} (execute_async answers S seconds after it starts the command, so the
answer carries the output made meanwhile; 0: at once),
{"expire": ID} (the devbox ends as if its idle time ran out: its sandbox is removed, it stays
listed as shutdown with shutdown_reason "idle"), {"forget": ID} (the service no longer knows it:
404). GET /_fake/stats: {"rate_limited", "devboxes" (made), "live" (not shut down), "requests",
"executions"}.
A path the fake does not know gets 404 and a line in DIR/unknown.log; so does (as a line, the
request still served) every request field the tables below do not know.
"""
import argparse
import codecs
import http.client
import http.server
import json
import os
import re
import secrets
import signal
import socketserver
import ssl
import string
import subprocess
import sys
import threading
import time
import urllib.parse

HOME = "/home/user"
USER = "user"
MAX_BODY = 256 << 20
HOLD = 10.0  # seconds a wait_for_status call is held before its 408
CHUNK = 65536
ALPHABET = string.ascii_letters + string.digits
BOOTING = ("provisioning", "initializing", "resuming")
TUNNEL_HOST = re.compile(r"^(\d+)-([A-Za-z0-9]+)\.tunnel\.")


# The request fields the fake knows, per operation, each with the interface of
# @runloop/api-client that declares them (0006-runloop-schema.sh checks every name against the
# client's type declarations). A field a client sends that is not here goes to unknown.log.
BODY_FIELDS = {
    "create": ("DevboxCreateParams", ["blueprint_id", "blueprint_name", "snapshot_id", "name",
                                      "environment_variables", "metadata", "launch_parameters",
                                      "tunnel", "secrets", "code_mounts", "entrypoint",
                                      "file_mounts", "gateways", "mcp", "mounts"]),
    "execute_async": ("DevboxExecuteAsyncParams", ["command", "attach_stdin", "shell_name"]),
    "execute": ("DevboxExecuteParams", ["command", "command_id", "optimistic_timeout",
                                        "shell_name"]),
    "execute_sync": ("DevboxExecuteSyncParams", ["command", "shell_name"]),
    "send_std_in": ("ExecutionSendStdInParams", ["text", "signal"]),
    "kill": ("ExecutionKillParams", ["kill_process_group"]),
    "wait_for_command": ("DevboxWaitForCommandParams", ["statuses"]),
    "enable_tunnel": ("DevboxEnableTunnelParams", ["auth_mode", "http_keep_alive",
                                                   "wake_on_http"]),
    "snapshot_disk": ("DevboxSnapshotDiskParams", ["name", "metadata", "commit_message"]),
    "snapshot_disk_async": ("DevboxSnapshotDiskAsyncParams", ["name", "metadata",
                                                              "commit_message"]),
    "download_file": ("DevboxDownloadFileParams", ["path"]),
    "upload_file": ("DevboxUploadFileParams", ["path", "file"]),
    "read_file_contents": ("DevboxReadFileContentsParams", ["file_path"]),
    "write_file_contents": ("DevboxWriteFileContentsParams", ["file_path", "contents"]),
}
QUERY_FIELDS = {
    "list": ("DevboxListParams", ["limit", "starting_after", "status", "include_total_count"]),
    "execution": ("ExecutionRetrieveParams", ["last_n"]),
    "wait_for_command": ("DevboxWaitForCommandParams", ["last_n"]),
    "stream": ("ExecutionStreamStdoutUpdatesParams", ["offset"]),
    "execute": ("DevboxExecuteParams", ["last_n"]),
}
# A devbox's wait_for_status body is made by the client itself ({"statuses": [...]}): no
# declared interface to hold it to.
DEVBOX_WAIT_FIELDS = ["statuses"]


def log(msg):
    sys.stderr.write("fake-runloop: %s\n" % msg)
    sys.stderr.flush()


def new_id(prefix):
    return prefix + "".join(secrets.choice(ALPHABET) for _ in range(22))


def now_ms():
    return int(time.time() * 1000)


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

    def run(self, *args, input=None, timeout=300):
        return subprocess.run([self.binary] + list(args), input=input, capture_output=True,
                              env=self.env, timeout=timeout)

    def check(self, *args, input=None, timeout=300):
        r = self.run(*args, input=input, timeout=timeout)
        if r.returncode != 0:
            raise ApiError(500, "sbx %s failed: %s" % (args[0] if args else "",
                                                      r.stderr.decode(errors="replace").strip()))
        return r.stdout.decode(errors="replace").strip()

    def exec_argv(self, sbx_id, argv, env, stdin):
        # As the service's shell: what a command leaves in the background keeps running.
        out = [self.binary, "sandbox", "exec", "--user", USER, "--keep-background"]
        if stdin:
            out.append("-i")
        for k, v in sorted(env.items()):
            out += ["--env", "%s=%s" % (k, v)]
        return out + [sbx_id, "--"] + list(argv)


class Execution:
    """One command: an `sbx sandbox exec` client; its output is kept whole, so a stream can
    start at any byte offset."""

    def __init__(self, devbox, command, shell_name, stdin):
        self.id = new_id("exe_")
        self.devbox = devbox
        self.command = command
        self.shell_name = shell_name
        self.want_stdin = stdin
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.status = "running"
        self.exit_status = None
        self.killed = False
        self.cond = threading.Condition()
        self.popen = None

    def start(self, sbx):
        argv = sbx.exec_argv(self.devbox.sbx_id, ["/bin/bash", "-c", self.command],
                             self.devbox.env, self.want_stdin)
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE if self.want_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=sbx.env, close_fds=True)
        readers = [threading.Thread(target=self.read_loop, args=(self.popen.stdout, "stdout"),
                                    daemon=True),
                   threading.Thread(target=self.read_loop, args=(self.popen.stderr, "stderr"),
                                    daemon=True)]
        for t in readers:
            t.start()
        threading.Thread(target=self.wait_loop, args=(readers,), daemon=True).start()

    def read_loop(self, f, field):
        while True:
            b = os.read(f.fileno(), CHUNK)
            if not b:
                break
            with self.cond:
                self.out[field] += b
                self.cond.notify_all()

    def wait_loop(self, readers):
        for t in readers:
            t.join()
        rc = self.popen.wait()
        self.popen.stdout.close()
        self.popen.stderr.close()
        if self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        with self.cond:
            self.exit_status = 128 - rc if rc < 0 else rc
            self.status = "completed"
            self.cond.notify_all()
        self.devbox.fake.changed()

    def kill(self):
        with self.cond:
            if self.status == "completed":
                return
            self.killed = True
        try:
            self.popen.kill()
        except ProcessLookupError:
            pass

    def stdin(self, text, sig):
        if not self.want_stdin or self.popen.stdin is None:
            raise ApiError(400, "execution %s was not started with attach_stdin" % self.id)
        try:
            if text:
                self.popen.stdin.write(text.encode())
                self.popen.stdin.flush()
            if sig == "EOF":
                self.popen.stdin.close()
            elif sig == "INTERRUPT":
                self.popen.send_signal(signal.SIGINT)
        except (OSError, ValueError):
            pass

    def view(self, last_n=None):
        with self.cond:
            v = {"devbox_id": self.devbox.id, "execution_id": self.id, "status": self.status,
                 "shell_name": self.shell_name, "exit_status": self.exit_status}
            for field in ("stdout", "stderr"):
                text = self.out[field].decode(errors="replace")
                n = int(last_n) if last_n not in (None, "") else 100
                lines = text.splitlines(keepends=True)
                v[field] = "".join(lines[-n:]) if n > 0 else ""
                v[field + "_truncated"] = len(lines) > n
        return v


class Devbox:
    def __init__(self, fake, sbx_id, body, blueprint_id, snapshot_id):
        self.fake = fake
        self.id = new_id("dbx_")
        self.sbx_id = sbx_id
        self.name = body.get("name")
        self.metadata = dict(body.get("metadata") or {})
        self.env = dict(body.get("environment_variables") or {})
        self.launch = body.get("launch_parameters") or {}
        self.blueprint_id = blueprint_id
        self.snapshot_id = snapshot_id
        self.created = now_ms()
        self.ended = None
        self.status = "running"
        self.shutdown_reason = None
        self.transitions = [{"status": "provisioning", "transition_time_ms": self.created},
                            {"status": "running", "transition_time_ms": self.created}]
        self.tunnel = None
        self.executions = {}
        self.lock = threading.RLock()

    def set_status(self, status):
        self.status = status
        self.transitions.append({"status": status, "transition_time_ms": now_ms()})
        self.fake.changed()

    def view(self):
        v = {"id": self.id, "name": self.name, "status": self.status, "capabilities": [],
             "create_time_ms": self.created, "end_time_ms": self.ended,
             "launch_parameters": self.launch, "metadata": self.metadata,
             "state_transitions": self.transitions, "blueprint_id": self.blueprint_id,
             "snapshot_id": self.snapshot_id, "shutdown_reason": self.shutdown_reason,
             "failure_reason": None, "initiator_type": "api", "tunnel": self.tunnel}
        return v


class Fake:
    def __init__(self, sbx, key, blueprints, state_dir):
        self.sbx = sbx
        self.key = key
        self.blueprints = {new_id("bpt_"): name for name in blueprints}
        self.devboxes = {}
        self.snapshots = {}  # id -> {"ref", "view"}
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.knobs = {"rate_limit_next": 0, "retry_after": 1, "max_devboxes": 0}
        self.stats = {"rate_limited": 0, "devboxes": 0, "requests": 0, "executions": 0}
        self.unknown = os.path.join(state_dir, "unknown.log")

    def changed(self):
        with self.cond:
            self.cond.notify_all()

    def get(self, did):
        with self.lock:
            d = self.devboxes.get(did)
        if d is None:
            raise ApiError(404, "devbox %s not found" % did)
        return d

    def running(self, did):
        d = self.get(did)
        if d.status != "running":
            raise ApiError(400, "devbox %s is not running (status %s)" % (did, d.status))
        return d

    def create(self, body):
        snap = None
        blueprint_id = body.get("blueprint_id")
        if body.get("snapshot_id"):
            snap = self.snapshots.get(body["snapshot_id"])
            if snap is None:
                raise ApiError(404, "snapshot %s not found" % body["snapshot_id"])
        elif blueprint_id:
            if blueprint_id not in self.blueprints:
                raise ApiError(404, "blueprint %s not found" % blueprint_id)
        elif body.get("blueprint_name"):
            ids = [i for i, n in self.blueprints.items() if n == body["blueprint_name"]]
            if not ids:
                raise ApiError(404, "blueprint with name %s not found" % body["blueprint_name"])
            blueprint_id = ids[0]
        with self.lock:
            limit = self.knobs["max_devboxes"]
            live = sum(1 for d in self.devboxes.values() if d.status == "running")
            if limit and live >= limit:
                raise ApiError(429, "devbox quota reached: at most %d running devboxes" % limit)
        args = ["sandbox", "create", "--manifest", self.sbx.manifest]
        if snap:
            args += ["--snapshot", snap["ref"]]
        sbx_id = self.sbx.check(*args).splitlines()[-1]
        d = Devbox(self, sbx_id, body, blueprint_id, body.get("snapshot_id"))
        with self.lock:
            self.devboxes[d.id] = d
            self.stats["devboxes"] += 1
        log("devbox %s is sbx sandbox %s" % (d.id, sbx_id))
        return d

    def end(self, d, reason):
        with d.lock:
            if d.status == "shutdown":
                return
            for e in list(d.executions.values()):
                e.kill()
            r = self.sbx.run("sandbox", "rm", d.sbx_id)
            if r.returncode != 0:
                log("sbx sandbox rm %s: %s" % (d.sbx_id, r.stderr.decode(errors="replace").strip()))
            d.ended = now_ms()
            d.shutdown_reason = reason
            d.set_status("shutdown")

    def wait_status(self, probe, statuses):
        """Hold until probe() is in statuses, at most HOLD seconds (then 408)."""
        deadline = time.monotonic() + HOLD
        with self.cond:
            while True:
                st = probe()
                if st in statuses:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ApiError(408, "timed out waiting for status %s" % ", ".join(statuses),
                                   {"x-should-retry": "true"})
                self.cond.wait(min(left, 0.5))

    def shutdown_all(self):
        with self.lock:
            boxes = list(self.devboxes.values())
        for d in boxes:
            self.end(d, "api_shutdown")


def multipart(body, ctype):
    """The fields of a multipart/form-data body: name -> bytes."""
    b = None
    for part in ctype.split(";"):
        k, _, v = part.strip().partition("=")
        if k == "boundary":
            b = v.strip('"')
    if not b:
        raise ApiError(400, "multipart body without boundary")
    out = {}
    delim = b"--" + b.encode()
    for chunk in body.split(delim)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, data = chunk.partition(b"\r\n\r\n")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        name = None
        for line in head.decode(errors="replace").split("\r\n"):
            if line.lower().startswith("content-disposition:"):
                for p in line.split(";"):
                    k, _, v = p.strip().partition("=")
                    if k == "name":
                        name = v.strip('"')
        if name:
            out[name] = data
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def send_json(self, status, obj, headers=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_bytes(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ApiError(413, "request body too large")
        if n == 0 and self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
                if len(data) > MAX_BODY:
                    raise ApiError(413, "request body too large")
            return bytes(data)
        return self.rfile.read(n) if n else b""

    def dispatch(self, method):
        u = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(u.query))
        fake = self.fake
        try:
            data = self.read_body() if method == "POST" else b""
            m = TUNNEL_HOST.match(self.headers.get("Host", ""))
            if m:
                return self.tunnel(int(m.group(1)), m.group(2), method, data)
            if u.path.startswith("/_fake/"):
                return self.knob(method, u.path, data)
            with fake.lock:
                fake.stats["requests"] += 1
                if fake.knobs["rate_limit_next"] > 0:
                    fake.knobs["rate_limit_next"] -= 1
                    fake.stats["rate_limited"] += 1
                    raise ApiError(429, "rate limit exceeded",
                                   {"Retry-After": str(fake.knobs["retry_after"])})
            auth = self.headers.get("Authorization", "")
            if auth != "Bearer " + fake.key:
                raise ApiError(401, "invalid or missing API key")
            ctype = self.headers.get("Content-Type", "")
            if ctype.startswith("application/json") and data:
                try:
                    body = json.loads(data)
                except ValueError:
                    raise ApiError(400, "request body is not JSON")
            else:
                body = {}
            self.route(method, u.path, query, body, data, ctype)
        except ApiError as e:
            self.send_json(e.status, {"message": e.message, "status": e.status}, e.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def knob(self, method, path, data):
        fake = self.fake
        if path == "/_fake/stats":
            with fake.lock:
                st = dict(fake.stats)
                st["live"] = sum(1 for d in fake.devboxes.values() if d.status != "shutdown")
                return self.send_json(200, st)
        if path == "/_fake/knobs" and method == "POST":
            k = json.loads(data or b"{}")
            if "expire" in k:
                fake.end(fake.get(k.pop("expire")), "idle")
            if "forget" in k:
                d = fake.get(k.pop("forget"))
                fake.end(d, "api_shutdown")
                with fake.lock:
                    fake.devboxes.pop(d.id, None)
            with fake.lock:
                fake.knobs.update(k)
            return self.send_json(200, fake.knobs)
        raise ApiError(404, "no such knob")

    def route(self, method, path, query, body, data, ctype):
        fake = self.fake
        parts = path.strip("/").split("/")
        if parts[:2] != ["v1", "devboxes"]:
            return self.unknown(method, path)
        rest = parts[2:]
        if method == "POST" and rest in ([], ["create_and_await_running"]):
            self.check_fields("create", body, BODY_FIELDS)
            return self.send_json(200, fake.create(body).view())
        if method == "GET" and rest == []:
            self.check_fields("list", query, QUERY_FIELDS)
            # Pages of at most limit (default 20), after the id starting_after names.
            with fake.lock:
                boxes = [d.view() for d in fake.devboxes.values()
                         if not query.get("status") or d.status == query["status"]]
            after = query.get("starting_after")
            if after:
                ids = [b["id"] for b in boxes]
                boxes = boxes[ids.index(after) + 1:] if after in ids else []
            limit = int(query.get("limit") or 20)
            page, rest = boxes[:limit], boxes[limit:]
            return self.send_json(200, {"devboxes": page, "has_more": bool(rest),
                                        "total_count": len(boxes), "remaining_count": len(rest)})
        if rest[:1] == ["disk_snapshots"] and len(rest) == 3 and rest[2] == "status":
            snap = fake.snapshots.get(rest[1])
            if snap is None:
                raise ApiError(404, "snapshot %s not found" % rest[1])
            return self.send_json(200, {"id": rest[1], "status": "complete",
                                        "snapshot": snap["view"]})
        if not rest or rest[0] == "disk_snapshots":
            return self.unknown(method, path)
        did = rest[0]
        if method == "GET" and len(rest) == 1:
            return self.send_json(200, fake.get(did).view())
        if rest[1:2] == ["executions"] and len(rest) >= 3:
            return self.execution(method, fake.get(did), rest[2], rest[3:], query, body)
        if method != "POST" or len(rest) != 2:
            return self.unknown(method, path)
        return self.devbox_op(fake.get(did), rest[1], query, body, data, ctype)

    def check_fields(self, op, fields, table):
        """Log each field a client sent that table[op] does not know."""
        known = table[op][1] if op in table else DEVBOX_WAIT_FIELDS
        with open(self.fake.unknown, "a") as f:
            for k in fields:
                if k not in known:
                    f.write("field %s.%s\n" % (op, k))

    def devbox_op(self, d, op, query, body, data, ctype):
        fake = self.fake
        if op in BODY_FIELDS:
            self.check_fields(op, body, BODY_FIELDS)
        elif op == "wait_for_status":
            self.check_fields("devbox_wait", body, {})
        if op == "wait_for_status":
            fake.wait_status(lambda: d.status, body.get("statuses") or [])
            return self.send_json(200, d.view())
        if op == "shutdown":
            fake.end(d, "api_shutdown")
            return self.send_json(200, d.view())
        if op == "suspend":
            with d.lock:
                if d.status != "running":
                    raise ApiError(400, "devbox %s is %s, not running" % (d.id, d.status))
                # The sbx sandbox stays (the service keeps a suspended devbox's disk, owners
                # included: an sbx stop and start would not); its commands end, and it takes
                # none until it is resumed.
                for e in list(d.executions.values()):
                    e.kill()
                d.set_status("suspended")
            return self.send_json(200, d.view())
        if op == "resume":
            with d.lock:
                if d.status != "suspended":
                    raise ApiError(400, "devbox %s is %s, not suspended" % (d.id, d.status))
                d.set_status("running")
            return self.send_json(200, d.view())
        if op == "keep_alive":
            fake.running(d.id)
            return self.send_json(200, {})
        if op in ("execute_async", "execute", "execute_sync"):
            if op == "execute":
                self.check_fields("execute", query, QUERY_FIELDS)
            return self.execute(op, fake.running(d.id), query, body)
        if op == "upload_file":
            fields = multipart(data, ctype)
            self.check_fields("upload_file", fields, BODY_FIELDS)
            path = fields.get("path", b"").decode()
            return self.put_file(fake.running(d.id), path, fields.get("file", b""))
        if op == "write_file_contents":
            return self.put_file(fake.running(d.id), body.get("file_path", ""),
                                 (body.get("contents") or "").encode())
        if op in ("download_file", "read_file_contents"):
            path = body.get("path") if op == "download_file" else body.get("file_path")
            got = self.get_file(fake.running(d.id), path or "")
            if op == "download_file":
                return self.send_bytes(got)
            b = got.decode(errors="replace").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            return self.wfile.write(b)
        if op in ("snapshot_disk", "snapshot_disk_async"):
            return self.snapshot(fake.running(d.id), body)
        if op == "enable_tunnel":
            fake.running(d.id)
            with d.lock:
                if d.tunnel is None:
                    d.tunnel = {"tunnel_key": new_id("").lower()[:16],
                                "auth_mode": body.get("auth_mode") or "open",
                                "create_time_ms": now_ms(),
                                "http_keep_alive": bool(body.get("http_keep_alive", True)),
                                "wake_on_http": bool(body.get("wake_on_http", False))}
            return self.send_json(200, d.tunnel)
        return self.unknown("POST", "/v1/devboxes/{id}/" + op)

    def execute(self, op, d, query, body):
        fake = self.fake
        cmd = body.get("command")
        if not isinstance(cmd, str) or not cmd:
            raise ApiError(400, "command is required")
        e = Execution(d, cmd, body.get("shell_name"), bool(body.get("attach_stdin")) and
                      op == "execute_async")
        with d.lock:
            d.executions[e.id] = e
            e.start(fake.sbx)
        with fake.lock:
            fake.stats["executions"] += 1
        if op == "execute_async":
            time.sleep(fake.knobs.get("async_answer_delay") or 0)
            return self.send_json(200, e.view(query.get("last_n")))
        wait = body.get("optimistic_timeout") if op == "execute" else None
        deadline = time.monotonic() + (float(wait) if wait else 600.0)
        with e.cond:
            while e.status != "completed" and time.monotonic() < deadline:
                e.cond.wait(0.5)
        return self.send_json(200, e.view(query.get("last_n")))

    def execution(self, method, d, eid, rest, query, body):
        fake = self.fake
        e = d.executions.get(eid)
        if e is None:
            raise ApiError(404, "execution %s not found" % eid)
        op = rest[0] if rest else "execution"
        op = {"wait_for_status": "wait_for_command", "stream_stdout_updates": "stream",
              "stream_stderr_updates": "stream"}.get(op, op)
        if op in QUERY_FIELDS:
            self.check_fields(op, query, QUERY_FIELDS)
        if method == "POST" and op in BODY_FIELDS:
            self.check_fields(op, body, BODY_FIELDS)
        if method == "GET" and rest == []:
            return self.send_json(200, e.view(query.get("last_n")))
        if method == "GET" and rest in (["stream_stdout_updates"], ["stream_stderr_updates"]):
            return self.stream(e, rest[0].split("_")[1], int(query.get("offset") or 0))
        if method == "POST" and rest == ["wait_for_status"]:
            fake.wait_status(lambda: e.status, body.get("statuses") or [])
            return self.send_json(200, e.view(query.get("last_n")))
        if method == "POST" and rest == ["kill"]:
            e.kill()
            with e.cond:
                while e.status != "completed":
                    e.cond.wait(0.5)
            return self.send_json(200, e.view())
        if method == "POST" and rest == ["send_std_in"]:
            e.stdin(body.get("text"), body.get("signal"))
            return self.send_json(200, e.view())
        return self.unknown(method, "/v1/devboxes/{id}/executions/{eid}/" + "/".join(rest))

    def stream(self, e, field, offset):
        """SSE from byte offset on: one event per chunk, {"output", "offset"} (the offset after
        the chunk, where a reconnecting client starts again); the stream ends with the command."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        pos = offset
        hold = self.fake.knobs.get("stream_hold") or 0
        until = time.monotonic() + hold if hold else None
        while True:
            with e.cond:
                while len(e.out[field]) <= pos and e.status != "completed":
                    if until and time.monotonic() >= until:
                        return  # the service's idle end of a stream: the client comes back
                    e.cond.wait(0.2 if until else 1.0)
                chunk = bytes(e.out[field][pos:pos + CHUNK])
                done = e.status == "completed" and pos + len(chunk) >= len(e.out[field])
            if chunk:
                pos += len(chunk)
                text = dec.decode(chunk, final=done)
                if text:
                    self.wfile.write(("data: %s\n\n" % json.dumps(
                        {"output": text, "offset": pos})).encode())
                    self.wfile.flush()
            if done:
                return

    def put_file(self, d, path, content):
        if not path:
            raise ApiError(400, "path is required")
        full = path if path.startswith("/") else HOME + "/" + path
        argv = self.fake.sbx.exec_argv(d.sbx_id, ["/bin/sh", "-c",
                                                  'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"',
                                                  "sh", full], {}, True)
        r = subprocess.run(argv, input=content, capture_output=True, env=self.fake.sbx.env,
                           timeout=300)
        if r.returncode != 0:
            raise ApiError(400, "cannot write %s: %s" % (path, r.stderr.decode(errors="replace").strip()))
        return self.send_json(200, {})

    def get_file(self, d, path):
        if not path:
            raise ApiError(400, "path is required")
        full = path if path.startswith("/") else HOME + "/" + path
        argv = self.fake.sbx.exec_argv(d.sbx_id, ["/bin/sh", "-c",
                                                  '[ -f "$1" ] || exit 44; exec cat -- "$1"',
                                                  "sh", full], {}, False)
        r = subprocess.run(argv, capture_output=True, env=self.fake.sbx.env, timeout=300)
        if r.returncode == 44:
            raise ApiError(404, "file %s not found" % path)
        if r.returncode != 0:
            raise ApiError(400, "cannot read %s: %s" % (path, r.stderr.decode(errors="replace").strip()))
        return r.stdout

    def snapshot(self, d, body):
        fake = self.fake
        ref = fake.sbx.check("sandbox", "snapshot", d.sbx_id).splitlines()[-1]
        sid = new_id("snp_")
        view = {"id": sid, "create_time_ms": now_ms(), "metadata": dict(body.get("metadata") or {}),
                "source_devbox_id": d.id, "name": body.get("name"),
                "commit_message": body.get("commit_message"), "size_bytes": None,
                "source_blueprint_id": d.blueprint_id}
        with fake.lock:
            fake.snapshots[sid] = {"ref": ref, "view": view}
        return self.send_json(200, view)

    def tunnel(self, port, key, method, data):
        """As the service's tunnel edge: https://{port}-{key}.tunnel.{domain} goes to that port
        of the devbox whose tunnel has that key (through `sbx sandbox port`, the local
        provider's relay); the test reaches it as plain HTTP with that Host."""
        fake = self.fake
        with fake.lock:
            boxes = [d for d in fake.devboxes.values()
                     if d.tunnel and d.tunnel["tunnel_key"] == key and d.status == "running"]
        if not boxes:
            raise ApiError(404, "no tunnel %s" % key)
        r = fake.sbx.run("sandbox", "port", boxes[0].sbx_id, str(port)) if 0 < port < 65536 else None
        url = urllib.parse.urlsplit(r.stdout.decode().strip()) if r and r.returncode == 0 else None
        if url is None or not url.port:
            raise ApiError(502, "port %d of devbox %s is not open" % (port, boxes[0].id))
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "transfer-encoding", "content-length")}
        try:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            conn.request(method, self.path, data or None, headers)
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
        except OSError as e:
            raise ApiError(502, "port %d: %s" % (port, e))
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type", "application/octet-stream"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def unknown(self, method, path):
        with open(self.fake.unknown, "a") as f:
            f.write("%s %s\n" % (method, path))
        raise ApiError(404, "no route %s %s" % (method, path))


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    if sys.argv[1:] == ["--schema"]:
        print(json.dumps({"body": BODY_FIELDS, "query": QUERY_FIELDS}))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--sbx", default=os.environ.get("SBX", "sbx"))
    ap.add_argument("--blueprint", action="append", default=[])
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    a = ap.parse_args()
    key = os.environ.get("RUNLOOP_API_KEY")
    if not key:
        sys.exit("fake-runloop: RUNLOOP_API_KEY must be set")
    fake = Fake(Sbx(a.sbx, a.state_dir), key, a.blueprint or ["sbx-base"], a.state_dir)
    Handler.fake = fake
    srv = Server(("127.0.0.1", a.port), Handler)
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)

    def stop(signum, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with open(os.path.join(a.state_dir, "blueprints.json"), "w") as f:
        json.dump(fake.blueprints, f)
    tmp = os.path.join(a.state_dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, os.path.join(a.state_dir, "port"))
    log("listening on 127.0.0.1:%d" % srv.server_address[1])
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        fake.shutdown_all()
        log("stopped")


if __name__ == "__main__":
    main()
