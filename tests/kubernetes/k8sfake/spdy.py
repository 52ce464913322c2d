"""SPDY/3.1 framing, the server side of what client-go's port-forward speaks (tunnelled in
WebSocket binary messages since Kubernetes 1.31). Flow control is not enforced by the Go peer
(moby/spdystream), so WINDOW_UPDATE and SETTINGS are read and ignored."""
import struct
import zlib

# The SPDY/3 header compression dictionary (draft-mbelshe-httpbis-spdy-00, section 2.6.10.1):
# length-prefixed words, then a run of status codes, reason phrases, dates and media types.
_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language "
    "accept-ranges age allow authorization cache-control connection content-base content-encoding "
    "content-language content-length content-location content-md5 content-range content-type date "
    "etag expect expires from host if-match if-modified-since if-none-match if-range "
    "if-unmodified-since last-modified location max-forwards pragma proxy-authenticate "
    "proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
    "user-agent vary via warning www-authenticate method get status"
).split() + ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(struct.pack("!I", len(w)) + w.encode() for w in _WORDS) + _TAIL.encode()
assert len(DICTIONARY) == 1423 and zlib.adler32(DICTIONARY) == 3821447106

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
MAX_FRAME = 16 * 1024 * 1024
RST_CANCEL = 5


class SpdyError(Exception):
    pass


class Frame:
    def __init__(self, control, ftype, flags, stream_id, data, headers=None):
        self.control = control
        self.type = ftype
        self.flags = flags
        self.stream_id = stream_id
        self.data = data
        self.headers = headers or {}


class Session:
    """Header (de)compression contexts and frame codec for one SPDY connection."""

    def __init__(self):
        self.inflate = zlib.decompressobj(zdict=DICTIONARY)
        self.deflate = zlib.compressobj(zdict=DICTIONARY)
        self.buf = bytearray()

    def _headers_in(self, block):
        raw = self.inflate.decompress(block)
        h = {}
        if len(raw) < 4:
            raise SpdyError("short header block")
        n = struct.unpack_from("!I", raw, 0)[0]
        pos = 4
        for _ in range(n):
            ln = struct.unpack_from("!I", raw, pos)[0]
            name = raw[pos + 4:pos + 4 + ln].decode("latin-1")
            pos += 4 + ln
            lv = struct.unpack_from("!I", raw, pos)[0]
            value = raw[pos + 4:pos + 4 + lv].decode("latin-1")
            pos += 4 + lv
            h[name.lower()] = value.split("\x00")[0]
        return h

    def _headers_out(self, headers):
        raw = struct.pack("!I", len(headers))
        for k, v in headers.items():
            kb, vb = k.lower().encode(), v.encode()
            raw += struct.pack("!I", len(kb)) + kb + struct.pack("!I", len(vb)) + vb
        return self.deflate.compress(raw) + self.deflate.flush(zlib.Z_SYNC_FLUSH)

    def feed(self, data):
        self.buf += data

    def frames(self):
        out = []
        b = self.buf
        while len(b) >= 8:
            w0, w1 = struct.unpack_from("!II", b, 0)
            length = w1 & 0xFFFFFF
            flags = w1 >> 24
            if length > MAX_FRAME:
                raise SpdyError("frame too large")
            if len(b) < 8 + length:
                break
            payload = bytes(b[8:8 + length])
            del b[:8 + length]
            if w0 & 0x80000000:
                ftype = w0 & 0xFFFF
                out.append(self._control(ftype, flags, payload))
            else:
                out.append(Frame(False, 0, flags, w0 & 0x7FFFFFFF, payload))
        return out

    def _control(self, ftype, flags, p):
        if ftype == SYN_STREAM:
            sid = struct.unpack_from("!I", p, 0)[0] & 0x7FFFFFFF
            return Frame(True, ftype, flags, sid, b"", self._headers_in(p[10:]))
        if ftype in (SYN_REPLY, HEADERS):
            sid = struct.unpack_from("!I", p, 0)[0] & 0x7FFFFFFF
            return Frame(True, ftype, flags, sid, b"", self._headers_in(p[4:]))
        if ftype in (RST_STREAM, WINDOW_UPDATE):
            sid = struct.unpack_from("!I", p, 0)[0] & 0x7FFFFFFF
            return Frame(True, ftype, flags, sid, p[4:8])
        if ftype == PING:
            return Frame(True, ftype, flags, 0, p[:4])
        return Frame(True, ftype, flags, 0, p)

    @staticmethod
    def _control_frame(ftype, flags, payload):
        return struct.pack("!II", 0x80000000 | (VERSION << 16) | ftype, (flags << 24) | len(payload)) + payload

    def syn_reply(self, sid, headers=None, fin=False):
        payload = struct.pack("!I", sid) + self._headers_out(headers or {})
        return self._control_frame(SYN_REPLY, FLAG_FIN if fin else 0, payload)

    def rst_stream(self, sid, status=RST_CANCEL):
        return self._control_frame(RST_STREAM, 0, struct.pack("!II", sid, status))

    def ping(self, data):
        return self._control_frame(PING, 0, data)

    def goaway(self, last_sid):
        return self._control_frame(GOAWAY, 0, struct.pack("!II", last_sid, 0))

    @staticmethod
    def data(sid, payload, fin=False):
        out = b""
        pos = 0
        while True:
            chunk = payload[pos:pos + 65536]
            pos += len(chunk)
            last = pos >= len(payload)
            flags = FLAG_FIN if (fin and last) else 0
            out += struct.pack("!II", sid & 0x7FFFFFFF, (flags << 24) | len(chunk)) + chunk
            if last:
                return out
