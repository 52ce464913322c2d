"""HTTPS (or plain HTTP) server: one thread per connection, HTTP/1.1 keep-alive, TLS handshake
in the connection's thread, a reader that can hand its buffered bytes to an upgraded
(WebSocket) connection, chunked responses for watches and logs, bearer-token and client
certificate authentication, and rule-based authorization with the API server's 403 wording."""
import http.server
import json
import socket
import socketserver
import ssl
import urllib.parse

from .util import APIError, dumps, log


class Reader:
    """A buffered reader over a socket whose unread buffer can be taken over."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.closed = False

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def readline(self, limit=65537):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0 or len(self.buf) >= limit:
                n = i + 1 if i >= 0 else limit
                line = bytes(self.buf[:n])
                del self.buf[:n]
                return line
            try:
                if not self._fill():
                    line = bytes(self.buf)
                    self.buf.clear()
                    return line
            except (OSError, ssl.SSLError):
                line = bytes(self.buf)
                self.buf.clear()
                return line

    def read(self, n=-1):
        if n is None or n < 0:
            while self._fill():
                pass
            out = bytes(self.buf)
            self.buf.clear()
            return out
        while len(self.buf) < n:
            if not self._fill():
                break
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def take(self):
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def close(self):
        self.closed = True


class Writer:
    def __init__(self, sock):
        self.sock = sock

    def write(self, b):
        self.sock.sendall(b)
        return len(b)

    def flush(self):
        pass

    def close(self):
        pass


class User:
    def __init__(self, name, groups=(), rules=None):
        self.name = name
        self.groups = list(groups) + ["system:authenticated"]
        self.rules = rules  # None: everything

    def allowed(self, verb, group, resource, subresource, ns, name):
        if self.rules is None:
            return True
        full = resource + ("/" + subresource if subresource else "")
        for r in self.rules:
            if not _match(r.get("verbs"), verb):
                continue
            if not _match(r.get("apiGroups", ["*"]), group):
                continue
            if not (_match(r.get("resources"), full)):
                continue
            if ns and not _match(r.get("namespaces", ["*"]), ns):
                continue
            if r.get("resourceNames") and name not in r["resourceNames"]:
                continue
            return True
        return False


def _match(allowed, value):
    if not allowed:
        return False
    return "*" in allowed or value in allowed


class Auth:
    """Tokens and certificate users from a JSON file:
    {"tokens": [{"token": T, "user": U, "groups": [...], "rules": [RULE...]}],
     "certificates": {"CN": {"rules": [...]}}}
    A RULE is {"verbs": [...], "apiGroups": [...], "resources": ["pods", "pods/exec"...],
    "namespaces": [...], "resourceNames": [...]}; no "rules" key means every request is allowed."""

    def __init__(self, path):
        self.tokens = {}
        self.certs = {}
        if path:
            with open(path) as f:
                data = json.load(f)
            for t in data.get("tokens") or []:
                self.tokens[t["token"]] = User(t["user"], t.get("groups") or [], t.get("rules"))
            for cn, spec in (data.get("certificates") or {}).items():
                self.certs[cn] = spec

    def authenticate(self, headers, peercert):
        h = headers.get("Authorization") or ""
        if h.lower().startswith("bearer "):
            return self.tokens.get(h[7:].strip())
        if peercert:
            cn, orgs = None, []
            for rdn in peercert.get("subject") or ():
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
                    elif k == "organizationName":
                        orgs.append(v)
            if cn:
                spec = self.certs.get(cn, {})
                return User(cn, orgs, spec.get("rules"))
        return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "k8s-fake"
    sys_version = ""
    timeout = 600

    def setup(self):
        self.connection = self.request
        if isinstance(self.request, ssl.SSLSocket):
            try:
                self.request.settimeout(30)
                self.request.do_handshake()
            except (OSError, ssl.SSLError) as e:
                log("tls handshake from %s failed: %s", self.client_address[0], e)
                self.handshake_failed = True
        self.request.settimeout(self.timeout)
        self.rfile = Reader(self.request)
        self.wfile = Writer(self.request)
        self.upgraded = False

    handshake_failed = False

    def handle(self):
        if self.handshake_failed:
            return
        try:
            http.server.BaseHTTPRequestHandler.handle(self)
        except (OSError, ssl.SSLError):
            pass

    def finish(self):
        if self.upgraded:
            return
        try:
            self.request.close()
        except OSError:
            pass

    def log_message(self, fmt, *args):
        log("%s %s", self.client_address[0], fmt % args)

    def log_request(self, code="-", size="-"):
        if self.server.api.verbose:
            http.server.BaseHTTPRequestHandler.log_request(self, code, size)

    # -- responses --------------------------------------------------------------------------
    def send_bytes(self, code, body, ctype="application/json", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_obj(self, code, obj, ctype="application/json", extra=()):
        self.send_bytes(code, obj if isinstance(obj, bytes) else dumps(obj), ctype, extra)

    def send_error_status(self, err):
        extra = []
        if err.code == 401:
            extra.append(("WWW-Authenticate", 'Basic realm="kubernetes-master"'))
        self.send_obj(err.code, err.status(), extra=extra)

    def start_chunked(self, code, ctype):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def chunk(self, data):
        if data:
            self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")

    def end_chunked(self):
        self.wfile.write(b"0\r\n\r\n")

    def body(self):
        if self._body is None:
            self._body = self._read_body()
        return self._body

    def _read_body(self, limit=64 * 1024 * 1024):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if te == "chunked":
            out = bytearray()
            while True:
                line = self.rfile.readline()
                n = int(line.split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    self.rfile.readline()
                    break
                out += self.rfile.read(n)
                self.rfile.read(2)
                if len(out) > limit:
                    raise APIError(413, "RequestEntityTooLarge", "the request body is too large")
            return bytes(out)
        n = int(self.headers.get("Content-Length") or 0)
        if n > limit:
            raise APIError(413, "RequestEntityTooLarge", "the request body is too large")
        return self.rfile.read(n) if n else b""

    def upgrade(self, protocol, extra=()):
        """Answer 101 for WebSocket; returns (socket, bytes the client sent after its request)."""
        from .ws import accept_key
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept_key(self.headers.get("Sec-WebSocket-Key", "")))
        if protocol:
            self.send_header("Sec-WebSocket-Protocol", protocol)
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.upgraded = True
        self.close_connection = True
        self.request.settimeout(None)
        return self.request, self.rfile.take()

    # -- dispatch ---------------------------------------------------------------------------
    def _dispatch(self):
        url = urllib.parse.urlsplit(self.path)
        self.query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        self.url_path = url.path
        try:
            peer = self.request.getpeercert() if isinstance(self.request, ssl.SSLSocket) else None
        except (ValueError, OSError):
            peer = None
        self.user = self.server.auth.authenticate(self.headers, peer)
        self._body = None
        try:
            # Read the body first, so an early error answer leaves no stray bytes on the
            # kept-alive connection.
            if (self.headers.get("Upgrade") or "").lower() != "websocket":
                self.body()
            if self.user is None:
                raise APIError(401, "Unauthorized", "Unauthorized")
            self.server.api.handle(self)
        except APIError as e:
            if not self.upgraded:
                self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
            self.close_connection = True
        except Exception as e:  # an internal error answers 500 and keeps the server up
            import traceback
            log("500 on %s %s:\n%s", self.command, self.path, traceback.format_exc())
            if not self.upgraded:
                try:
                    self.send_error_status(APIError(500, "InternalError", "Internal error occurred: %s" % e))
                except OSError:
                    self.close_connection = True

    do_GET = _dispatch
    do_POST = _dispatch
    do_PUT = _dispatch
    do_PATCH = _dispatch
    do_DELETE = _dispatch
    do_HEAD = _dispatch
    do_OPTIONS = _dispatch

    def q(self, name, default=None):
        v = self.query.get(name)
        return v[-1] if v else default

    def qlist(self, name):
        return self.query.get(name) or []


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, api, auth, tls_context=None):
        self.api = api
        self.auth = auth
        self.tls = tls_context
        family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.address_family = family
        socketserver.TCPServer.__init__(self, addr, Handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request, client_address):
        import traceback
        log("connection from %s: %s", client_address[0], traceback.format_exc().strip().splitlines()[-1])


def tls_context(cert, key, client_ca=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    if client_ca:
        ctx.load_verify_locations(client_ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
