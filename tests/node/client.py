#!/usr/bin/env python3
"""A harness's side of the sbx-node protocol, written from docs/internals/node.md with Python's
standard library only (ssl, socket), for the tests: an independent client of the daemon.

    client.py URL CA CERT KEY request METHOD PATH [TOKEN [BODY]] -> "STATUS BODY" (TOKEN "": none)
    client.py URL CA CERT KEY exec ID TOKEN [--stdin TEXT|--stdin-file F] [--query K=V]...
              [--header "NAME: VALUE"]... ARG...
                                                              -> stdout, stderr, "exit N"
    client.py URL CA CERT KEY mint ID N                       -> N tokens of sandbox ID minted,
                                                                 one connection each: "# minted N"
    client.py URL CA CERT KEY bighead N                       -> a request with an N-byte header
    client.py URL CA CERT KEY resume                          -> a second connection offering
                                                                 the first's TLS session:
                                                                 "fresh|resumed STATUS"
    client.py URL CA CERT KEY send METHOD PATH TOKEN [--body TEXT|--body-file F]
              [--declare N] [--out F] [--header "NAME: VALUE"]...
                                                              -> "STATUS BODY" (--out: the body
                                                                 into F, "STATUS LENGTH" printed;
                                                                 the answer's Sbx-Node-Version
                                                                 on stderr)

exec writes the command's stdout to stdout and its stderr to stderr as they come, then prints
the status channel's exit code as "exit N" on stderr, then each other cause of the status as
"cause REASON [MESSAGE]" ("cause Signal 9", "cause TimedOut"); a refused upgrade prints
"http STATUS BODY".
"""
import base64, json, os, select, socket, ssl, struct, sys, urllib.parse


def connect(url, ca, cert, key, ctx=None, session=None):
    u = urllib.parse.urlsplit(url)
    if ctx is None:
        ctx = ssl.create_default_context(cafile=ca)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(cert, key)
    raw = socket.create_connection((u.hostname, u.port), timeout=30)
    return ctx.wrap_socket(raw, server_hostname=u.hostname, session=session), u.hostname


def read_head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = s.recv(4096)
        if not b:
            raise SystemExit("connection closed in the answer's head")
        buf += b
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    fields = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        fields[k.strip().lower()] = v.strip()
    return status, fields, rest


def request(s, host, method, path, token=None, body=b"", declare=None, raw=False, want=None,
            extra=()):
    n = len(body) if declare is None else declare
    h = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {n}\r\n"
    if token:
        h += f"Sbx-Token: {token}\r\n"
    for line in extra:
        h += line + "\r\n"
    try:
        s.sendall(h.encode() + b"\r\n" + body)
    except OSError:
        pass  # the daemon answered and closed before the whole body: its answer is read below
    status, fields, rest = read_head(s)
    n = int(fields.get("content-length", "0"))
    while len(rest) < n:
        b = s.recv(65536)
        if not b:
            raise SystemExit("connection closed in the answer's body")
        rest += b
    if want is not None:
        want.update(fields)
    return status, rest[:n] if raw else rest[:n].decode()


def frame(opcode, payload):
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        hdr = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        hdr = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        hdr = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Frames:
    """The daemon's frames out of what was read so far (the caller reads)."""

    def __init__(self, rest):
        self.buf = rest

    def next(self):
        """(opcode, payload) of the next whole frame, or None until more is read."""
        if len(self.buf) < 2:
            return None
        b0, b1 = self.buf[0], self.buf[1]
        if b1 & 0x80:
            raise SystemExit("the daemon sent a masked frame")
        n, off = b1 & 0x7F, 2
        if n == 126:
            if len(self.buf) < 4:
                return None
            n, off = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            if len(self.buf) < 10:
                return None
            n, off = struct.unpack("!Q", self.buf[2:10])[0], 10
        if len(self.buf) < off + n:
            return None
        payload, self.buf = self.buf[off:off + n], self.buf[off + n:]
        return b0 & 0x0F, payload


def exec_(s, host, sid, token, args, stdin, extra, headers=()):
    q = "&".join("command=" + urllib.parse.quote(a, safe="") for a in args)
    for kv in extra:
        k, v = kv.split("=", 1)
        q += "&" + k + "=" + urllib.parse.quote(v, safe="")
    if stdin is not None:
        q += "&stdin=1"
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /v1/sandboxes/{sid}/exec?{q} HTTP/1.1\r\nHost: {host}\r\n"
               f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n"
               f"Sbx-Token: {token}\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode())
    status, fields, rest = read_head(s)
    if status != 101:
        n = int(fields.get("content-length", "0"))
        while len(rest) < n:
            rest += s.recv(65536)
        print(f"http {status} {rest[:n].decode()}")
        return 3
    if fields.get("sec-websocket-protocol") != "v5.channel.k8s.io":
        raise SystemExit("no v5.channel.k8s.io")
    # One thread reads and writes: an SSL connection is not to be used by two threads at once
    # (a reader and a stdin feeder did, and now and then broke the connection). Non-blocking,
    # stdin goes out as the daemon takes it while its frames are read.
    feed, ctl, cur = [], [], b""  # stdin frames; pongs, which go first; the frame under way
    if stdin is not None:
        for off in range(0, len(stdin), 1 << 20):
            feed.append(frame(2, b"\x00" + stdin[off:off + (1 << 20)]))
        feed.append(frame(2, b"\xff\x00"))
    feed.reverse()
    s.setblocking(False)
    fr = Frames(rest)
    code = None
    causes = []
    while True:
        f = fr.next()
        if f is None:
            if not s.pending():
                if not cur:
                    cur = ctl.pop(0) if ctl else feed.pop() if feed else b""
                r, w, _ = select.select([s], [s] if cur else [], [], 120)
                if not r and not w:
                    raise SystemExit("the daemon sent nothing for 120 s")
                if w:
                    try:
                        cur = cur[s.send(cur[:1 << 16]):]
                    except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                        pass
                    except OSError:
                        # the command ended first: the rest of its input is not wanted
                        feed, ctl, cur = [], [], b""
                if not r:
                    continue
            try:
                b = s.recv(1 << 16)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                continue
            except OSError:
                break
            if not b:
                break
            fr.buf += b
            continue
        op, p = f
        if op == 8:  # the daemon's close: answered at once, the rest of stdin dropped
            s.setblocking(True)
            s.settimeout(5)
            try:
                s.sendall(frame(8, p[:2]))
            except OSError:
                pass
            break
        elif op == 9:  # the daemon's keep-alive ping: a live harness answers
            ctl.append(frame(10, p))
        if op != 2 or not p:
            continue
        ch, data = p[0], p[1:]
        if ch == 1:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        elif ch == 2:
            sys.stderr.buffer.write(data)
            sys.stderr.flush()
        elif ch == 3:
            st = json.loads(data)
            code = 0
            for c in st.get("details", {}).get("causes", []):
                if c["reason"] == "ExitCode" and st.get("status") != "Success":
                    code = int(c["message"])
                elif c["reason"] != "ExitCode":
                    causes.append(" ".join(["cause", c["reason"]] + ([c["message"]] if "message" in c else [])))
    print(f"exit {code}", file=sys.stderr)
    for c in causes:
        print(c, file=sys.stderr)
    return 0 if code is not None else 4


def main():
    url, ca, cert, key, verb = sys.argv[1:6]
    rest = sys.argv[6:]
    s, host = connect(url, ca, cert, key)
    if verb == "mint":
        for i in range(int(rest[1])):
            if i:
                s, host = connect(url, ca, cert, key)
            status, body = request(s, host, "POST", f"/v1/sandboxes/{rest[0]}/token")
            s.close()
            if status != 200:
                print("# mint:", status, body)
                return 1
        print("# minted", rest[1])
        return 0
    if verb == "request":
        body = rest[3].encode() if len(rest) > 3 else b""
        fields = {}
        status, body = request(s, host, rest[0], rest[1], rest[2] if len(rest) > 2 else None, body,
                               want=fields)
        print(status, body)
        if "retry-after" in fields:
            print("retry-after", fields["retry-after"])
        return 0
    if verb == "send":
        body, declare, out, headers = b"", None, None, []
        opts = rest[3:]
        while opts:
            k, v = opts[0], opts[1]
            del opts[:2]
            if k == "--body":
                body = v.encode()
            elif k == "--body-file":
                body = open(v, "rb").read()
            elif k == "--declare":
                declare = int(v)
            elif k == "--out":
                out = v
            elif k == "--header":
                headers.append(v)
        fields = {}
        status, b = request(s, host, rest[0], rest[1], rest[2] or None, body, declare, raw=True,
                            want=fields, extra=headers)
        if "sbx-node-version" in fields:
            print("sbx-node-version:", fields["sbx-node-version"], file=sys.stderr)
        if "connection" in fields:
            print("connection:", fields["connection"], file=sys.stderr)
        if out:
            open(out, "wb").write(b)
            print(status, len(b))
        else:
            print(status, b.decode(errors="replace"))
        return 0
    if verb == "resume":
        request(s, host, "GET", "/v1/node")  # tickets, if any, arrive with the answer
        sess, ctx = s.session, s.context
        s.close()
        s2, _ = connect(*sys.argv[1:5], ctx=ctx, session=sess)
        status, _ = request(s2, host, "GET", "/v1/node")
        print("resumed" if s2.session_reused else "fresh", status)
        return 0
    if verb == "bighead":
        s.sendall(f"GET /v1/node HTTP/1.1\r\nHost: {host}\r\nX-Big: {'a' * int(rest[0])}\r\n\r\n".encode())
        status, _, _ = read_head(s)
        print(status)
        return 0
    stdin, extra, headers = None, [], []
    while len(rest) > 3 and rest[2] in ("--stdin", "--stdin-file", "--query", "--header"):
        if rest[2] == "--header":
            headers.append(rest[3])
        elif rest[2] == "--stdin":
            stdin = rest[3].encode()
        elif rest[2] == "--stdin-file":
            stdin = open(rest[3], "rb").read()
        else:
            extra.append(rest[3])
        del rest[2:4]
    return exec_(s, host, rest[0], rest[1], rest[2:], stdin, extra, headers)


if __name__ == "__main__":
    sys.exit(main())
