"""Decoding of the Kubernetes protobuf request bodies kubectl sends for typed writes (it sends
"application/vnd.kubernetes.protobuf" for `kubectl create namespace` and does not fall back to
JSON on 415). Only the kinds listed in KINDS are known; field numbers are those of
k8s.io/api core/v1 and apimachinery meta/v1 generated.proto."""
import datetime

from .util import APIError

MAGIC = b"k8s\x00"


def _varint(b, i):
    shift = result = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        if not c & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(b):
    """[(number, wiretype, value)] of one message; value is int or bytes."""
    out = []
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ValueError("truncated field")
            v = bytes(b[i:i + n])
            i += n
        elif wt == 1:
            v = bytes(b[i:i + 8])
            i += 8
        elif wt == 5:
            v = bytes(b[i:i + 4])
            i += 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        out.append((num, wt, v))
    return out


def _s(v):
    return v.decode("utf-8")


def _time(v):
    secs = 0
    for n, _, x in fields(v):
        if n == 1:
            secs = x
    return datetime.datetime.fromtimestamp(secs, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _map_entry(v):
    k = val = ""
    for n, _, x in fields(v):
        if n == 1:
            k = _s(x)
        elif n == 2:
            val = _s(x)
    return k, val


def _owner_ref(v):
    ref = {}
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    for n, _, x in fields(v):
        if n in names:
            ref[names[n]] = _s(x)
        elif n == 6:
            ref["controller"] = bool(x)
        elif n == 7:
            ref["blockOwnerDeletion"] = bool(x)
    return ref


def object_meta(b):
    md = {}
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for n, _, v in fields(b):
        if n in strings:
            md[strings[n]] = _s(v)
        elif n == 7:
            md["generation"] = v
        elif n == 8:
            md["creationTimestamp"] = _time(v)
        elif n == 11:
            k, val = _map_entry(v)
            md.setdefault("labels", {})[k] = val
        elif n == 12:
            k, val = _map_entry(v)
            md.setdefault("annotations", {})[k] = val
        elif n == 13:
            md.setdefault("ownerReferences", []).append(_owner_ref(v))
        elif n == 14:
            md.setdefault("finalizers", []).append(_s(v))
    return md


def _namespace(b):
    obj = {"apiVersion": "v1", "kind": "Namespace"}
    for n, _, v in fields(b):
        if n == 1:
            obj["metadata"] = object_meta(v)
        elif n == 2:
            obj["spec"] = {"finalizers": [_s(x) for m, _, x in fields(v) if m == 1]}
        elif n == 3:
            obj["status"] = {"phase": _s(x) for m, _, x in fields(v) if m == 1}
    return obj


def _secret(b):
    """core/v1 Secret: metadata 1, data 2 (map<string, bytes>), type 3, stringData 4, immutable 5."""
    import base64
    obj = {"apiVersion": "v1", "kind": "Secret"}
    for n, _, v in fields(b):
        if n == 1:
            obj["metadata"] = object_meta(v)
        elif n == 2:
            k, val = "", b""
            for m, _, x in fields(v):
                if m == 1:
                    k = _s(x)
                elif m == 2:
                    val = x
            obj.setdefault("data", {})[k] = base64.b64encode(val).decode("ascii")
        elif n == 3:
            obj["type"] = _s(v)
        elif n == 4:
            k, val = _map_entry(v)
            obj.setdefault("stringData", {})[k] = val
        elif n == 5:
            obj["immutable"] = bool(v)
    return obj


KINDS = {("v1", "Namespace"): _namespace, ("v1", "Secret"): _secret}


def decode(body):
    """The object of a protobuf request body, as the JSON form's dict."""
    if not body.startswith(MAGIC):
        raise APIError(400, "BadRequest", "the body of the request is not a Kubernetes protobuf object")
    try:
        api_version = kind = ""
        raw = b""
        for n, _, v in fields(body[len(MAGIC):]):
            if n == 1:
                for m, _, x in fields(v):
                    if m == 1:
                        api_version = _s(x)
                    elif m == 2:
                        kind = _s(x)
            elif n == 2:
                raw = v
        fn = KINDS.get((api_version, kind))
        if fn is None:
            raise APIError(415, "UnsupportedMediaType",
                           "this fake API server decodes protobuf bodies of %s only; send %s %s as application/json"
                           % (", ".join(k for _, k in KINDS), api_version, kind))
        return fn(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise APIError(400, "BadRequest", "the body of the request is not valid protobuf: %s" % e)
