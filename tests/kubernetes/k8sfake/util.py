"""Small shared pieces: times, names, Status objects, JSON encoding."""
import datetime
import json
import random
import threading
import time
import uuid

_rand = random.SystemRandom()
_log_lock = threading.Lock()
_log_file = None


def set_log(f):
    global _log_file
    _log_file = f


def log(fmt, *args):
    if _log_file is None:
        return
    msg = fmt % args if args else fmt
    line = "%s %s\n" % (datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3], msg)
    with _log_lock:
        _log_file.write(line)
        _log_file.flush()


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s):
    if not s:
        return None
    s = s.replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(s)
    except ValueError:
        try:
            return datetime.datetime.fromisoformat(s.split(".")[0] + "+00:00")
        except ValueError:
            return None


def human_duration(seconds):
    """apimachinery's duration.HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        r = s % 60
        return "%dm" % m if r == 0 else "%dm%ds" % (m, r)
    if m < 180:
        return "%dm" % m
    h = s // 3600
    if h < 8:
        r = (s % 3600) // 60
        return "%dh" % h if r == 0 else "%dh%dm" % (h, r)
    if h < 48:
        return "%dh" % h
    if h < 192:
        r = h % 24
        return "%dd" % (h // 24) if r == 0 else "%dd%dh" % (h // 24, r)
    if h < 24 * 365 * 2:
        return "%dd" % (h // 24)
    if h < 24 * 365 * 8:
        d = (h // 24) % 365
        return "%dy" % (h // 24 // 365) if d == 0 else "%dy%dd" % (h // 24 // 365, d)
    return "%dy" % (h // 24 // 365)


def age(ts):
    t = parse_time(ts)
    if t is None:
        return "<unknown>"
    return human_duration((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())


def new_uid():
    return str(uuid.uuid4())


_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(n=5):
    return "".join(_rand.choice(_NAME_CHARS) for _ in range(n))


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def fnv32a(s):
    h = 0x811C9DC5
    for b in s.encode():
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def name_hash(name):
    """agent-sandbox's NameHash: FNV-1a 32 of the name, 8 hex digits."""
    return "%08x" % fnv32a(name)


class APIError(Exception):
    """An error the API answers with a Status object."""

    def __init__(self, code, reason, message, details=None):
        Exception.__init__(self, message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            st["details"] = self.details
        if not self.reason:
            del st["reason"]
        return st


def qualified(plural, group):
    return plural if not group else plural + "." + group


def not_found(plural, group, name):
    return APIError(404, "NotFound", '%s "%s" not found' % (qualified(plural, group), name),
                    {"name": name, "group": group, "kind": plural} if group else {"name": name, "kind": plural})


def already_exists(plural, group, name):
    d = {"name": name, "kind": plural}
    if group:
        d["group"] = group
    return APIError(409, "AlreadyExists", '%s "%s" already exists' % (qualified(plural, group), name), d)


def conflict(plural, group, name, why="the object has been modified; please apply your changes to the latest version and try again"):
    d = {"name": name, "kind": plural}
    if group:
        d["group"] = group
    return APIError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (qualified(plural, group), name, why), d)


def invalid(kind, group, name, field_errors):
    from .schema import aggregate
    gk = kind if not group else kind + "." + group
    d = {"name": name, "kind": kind, "causes": [e.cause() for e in field_errors]}
    if group:
        d["group"] = group
    return APIError(422, "Invalid", '%s "%s" is invalid: %s' % (gk, name, aggregate(field_errors)), d)


def bad_request(message):
    return APIError(400, "BadRequest", message)


def gone(message):
    return APIError(410, "Expired", message)


def forbidden(plural, group, name, reason):
    q = qualified(plural, group)
    msg = ('%s "%s" is forbidden: %s' % (q, name, reason)) if name else ("%s is forbidden: %s" % (q, reason))
    d = {"kind": plural}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    return APIError(403, "Forbidden", msg, d)


def monotonic():
    return time.monotonic()
