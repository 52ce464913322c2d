"""The REST API: discovery, CRUD, watch, subresources, and the fake's own /fake/ endpoints."""
import hashlib
import http.client
import json
import random
import select
import ssl
import time

from . import patch as patchmod
from . import protobuf, streams, table
from .docker import DockerError, demux
from .resources import api_resource_list, discovery_v2_group
from .selectors import parse_field_selector, parse_label_selector
from .util import APIError, bad_request, dumps, forbidden, log

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-sbx-fake", "gitCommit": "0000000000000000000000000000000000000000",
           "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.4", "compiler": "gc",
           "platform": "linux/amd64"}
DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=%s;as=APIGroupDiscoveryList"
TABLE_CTYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
NOT_FOUND_PATH = APIError(404, "NotFound", "the server could not find the requested resource", {})


def _bool(v):
    return v is not None and v.lower() in ("1", "true", "t", "yes")


class API:
    def __init__(self, store, types, kubelet, server_address="", bookmark_interval=30.0, verbose=False):
        self.store = store
        self.kubelet = kubelet
        self.verbose = verbose
        self.server_address = server_address
        self.bookmark_interval = bookmark_interval
        self.groups = {}  # group -> version -> [rt]
        for rt in types:
            self.groups.setdefault(rt.group, {}).setdefault(rt.version, []).append(rt)
        self.by_path = {}
        for rt in types:
            self.by_path[(rt.group, rt.version, rt.plural)] = rt
        self.openapi = {}
        for g, versions in self.groups.items():
            for v, rts in versions.items():
                raw = dumps(openapi_v3(g, v, rts))
                key = ("apis/%s/%s" % (g, v)) if g else "api/" + v
                self.openapi[key] = (raw, hashlib.sha256(raw).hexdigest()[:32].upper())

    # -- entry --------------------------------------------------------------------------
    def handle(self, h):
        path = h.url_path.rstrip("/") or "/"
        if path in ("/healthz", "/livez", "/readyz"):
            return h.send_bytes(200, b"ok", "text/plain; charset=utf-8")
        if path == "/version":
            return h.send_obj(200, VERSION)
        if path.startswith("/fake/"):
            return self.admin(h, path)
        if path == "/openapi/v3":
            return h.send_obj(200, {"paths": {k: {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (k, d[1])}
                                              for k, d in self.openapi.items()}})
        if path.startswith("/openapi/v3/"):
            doc = self.openapi.get(path[len("/openapi/v3/"):])
            if doc is None:
                raise NOT_FOUND_PATH
            return h.send_bytes(200, doc[0])
        if path.startswith("/openapi/"):
            raise NOT_FOUND_PATH
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            if len(parts) == 1:
                return self.discovery_core(h)
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                return self.discovery_groups(h)
            if len(parts) == 2:
                return self.discovery_group(h, parts[1])
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise NOT_FOUND_PATH
        if version not in self.groups.get(group, {}):
            raise NOT_FOUND_PATH
        if not rest:
            return h.send_obj(200, api_resource_list(group + "/" + version if group else version, self.groups[group][version]))
        self.resource(h, group, version, rest)

    # -- discovery ----------------------------------------------------------------------
    def _aggregated(self, h):
        acc = h.headers.get("Accept") or ""
        if "as=APIGroupDiscoveryList" not in acc:
            return None
        for part in acc.split(","):
            if "as=APIGroupDiscoveryList" in part and "g=apidiscovery.k8s.io" in part:
                if "v=v2beta1" in part:
                    return "v2beta1"
                if "v=v2" in part:
                    return "v2"
        return None

    def discovery_core(self, h):
        v = self._aggregated(h)
        if v:
            doc = {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/" + v, "metadata": {},
                   "items": [discovery_v2_group("", "v1", self.groups[""]["v1"])]}
            return h.send_obj(200, doc, DISCOVERY_V2 % v)
        return h.send_obj(200, {"kind": "APIVersions", "versions": ["v1"],
                                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}]})

    def _group_doc(self, g):
        versions = [{"groupVersion": g + "/" + v, "version": v} for v in sorted(self.groups[g])]
        return {"name": g, "versions": versions, "preferredVersion": versions[0]}

    def discovery_groups(self, h):
        v = self._aggregated(h)
        names = sorted(g for g in self.groups if g)
        if v:
            items = []
            for g in names:
                for ver in sorted(self.groups[g]):
                    items.append(discovery_v2_group(g, ver, self.groups[g][ver]))
            return h.send_obj(200, {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/" + v,
                                    "metadata": {}, "items": items}, DISCOVERY_V2 % v)
        return h.send_obj(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                "groups": [self._group_doc(g) for g in names]})

    def discovery_group(self, h, g):
        if g not in self.groups or not g:
            raise NOT_FOUND_PATH
        doc = self._group_doc(g)
        doc.update({"kind": "APIGroup", "apiVersion": "v1"})
        h.send_obj(200, doc)

    # -- admin --------------------------------------------------------------------------
    def admin(self, h, path):
        if h.user.rules is not None:
            raise APIError(403, "Forbidden", 'forbidden: User "%s" cannot use the fake\'s own endpoints' % h.user.name)
        if path == "/fake/violations":
            return h.send_obj(200, {"violations": list(self.store.violations)})
        if path == "/fake/compact" and h.command == "POST":
            return h.send_obj(200, {"resourceVersion": str(self.store.compact())})
        if path == "/fake/stats":
            with self.store.lock:
                counts = {k: len(b.items) for k, b in self.store.buckets.items()}
                watchers = {k: len(b.watchers) for k, b in self.store.buckets.items()}
            return h.send_obj(200, {"objects": counts, "watchers": watchers, "resourceVersion": str(self.store.rv)})
        raise NOT_FOUND_PATH

    # -- resources ----------------------------------------------------------------------
    def resource(self, h, group, version, rest):
        ns = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            ns, rest = rest[1], rest[2:]
        plural = rest[0]
        rt = self.by_path.get((group, version, plural))
        if rt is None or (ns and not rt.namespaced):
            raise NOT_FOUND_PATH
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if len(rest) > 3 or (sub and sub not in rt.subresources):
            raise NOT_FOUND_PATH
        if not rt.namespaced:
            ns = ""
        method = h.command
        verb = self._verb(h, method, name, sub)
        self.authorize(h, verb, rt, sub, ns, name)
        if sub in ("exec", "portforward", "attach"):
            return self.connect(h, rt, ns, name, sub)
        if sub == "log":
            return self.logs(h, rt, ns, name)
        if sub == "scale":
            return self.scale(h, rt, ns, name)
        if verb == "get":
            return self.get(h, rt, ns, name)
        if verb in ("list", "watch"):
            return self.list(h, rt, ns, verb == "watch" or bool(name))
        if verb == "create":
            if name and not sub:
                raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            return self.create(h, rt, ns)
        if verb == "update":
            return self.update(h, rt, ns, name, sub or None)
        if verb == "patch":
            return self.patch(h, rt, ns, name, sub or None)
        if verb == "delete":
            return self.delete(h, rt, ns, name)
        if verb == "deletecollection":
            return self.delete_collection(h, rt, ns)
        raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _verb(self, h, method, name, sub):
        if sub in ("exec", "portforward", "attach"):
            return "create"
        if method in ("GET", "HEAD"):
            if _bool(h.q("watch")):
                return "watch"
            return "get" if name else "list"
        return {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(method, method.lower())

    def authorize(self, h, verb, rt, sub, ns, name):
        if h.user.allowed(verb, rt.group, rt.plural, sub, ns, name):
            return
        res = rt.plural + ("/" + sub if sub else "")
        if ns:
            why = 'User "%s" cannot %s resource "%s" in API group "%s" in the namespace "%s"' % (
                h.user.name, verb, res, rt.group, ns)
        else:
            why = 'User "%s" cannot %s resource "%s" in API group "%s" at the cluster scope' % (
                h.user.name, verb, res, rt.group)
        raise forbidden(rt.plural, rt.group, name, why)

    def _wants_table(self, h):
        acc = h.headers.get("Accept") or ""
        return "as=Table" in acc

    def _field_validation(self, h):
        v = h.q("fieldValidation") or "Warn"
        if v not in ("Ignore", "Warn", "Strict"):
            raise bad_request('fieldValidation must be one of "Ignore", "Warn", or "Strict", got "%s"' % v)
        return v

    def _warn_headers(self, warnings):
        return [("Warning", '299 - "%s"' % w.replace('"', '\\"')) for w in warnings]

    def _json_body(self, h):
        ctype = (h.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if ctype == "application/vnd.kubernetes.protobuf":
            return protobuf.decode(h.body())
        if ctype not in ("application/json", "*/*", ""):
            raise APIError(415, "UnsupportedMediaType", 'the body of the request was in an unknown format - accepted '
                           'media types include: application/json, application/vnd.kubernetes.protobuf')
        raw = h.body()
        try:
            return json.loads(raw or b"null")
        except ValueError as e:
            raise bad_request("couldn't get version/kind; json parse error: %s" % e)

    def get(self, h, rt, ns, name):
        raw = self.store.get_raw(rt, ns, name)
        if self._wants_table(h):
            obj = json.loads(raw)
            return h.send_obj(200, table.table(rt, [obj], obj["metadata"]["resourceVersion"], h.q("includeObject", "Metadata")),
                              TABLE_CTYPE)
        h.send_bytes(200, raw)

    def _selectors(self, h, rt, name):
        labels = parse_label_selector(h.q("labelSelector", ""))
        fields = parse_field_selector(h.q("fieldSelector", ""), rt.fields, rt.plural, rt.core)
        if name:
            fields.append(("metadata.name", "=", name))
        return labels, fields

    def list(self, h, rt, ns, watch):
        name = ""
        if watch and h.url_path.rstrip("/").split("/")[-1] != rt.plural:
            name = h.url_path.rstrip("/").split("/")[-1]
        labels, fields = self._selectors(h, rt, name)
        if watch:
            return self.watch(h, rt, ns, labels, fields)
        try:
            limit = int(h.q("limit", "0") or 0)
        except ValueError:
            raise bad_request("limit must be an integer")
        items, rv, cont, remaining = self.store.list(rt, ns, labels, fields, limit, h.q("continue"))
        if self._wants_table(h):
            objs = [json.loads(x) for x in items]
            return h.send_obj(200, table.table(rt, objs, rv, h.q("includeObject", "Metadata"), cont, remaining), TABLE_CTYPE)
        md = {"resourceVersion": rv}
        if cont:
            md["continue"] = cont
        if remaining is not None:
            md["remainingItemCount"] = remaining
        body = (b'{"kind":"' + rt.list_kind.encode() + b'","apiVersion":"' + rt.api_version.encode() +
                b'","metadata":' + dumps(md) + b',"items":[' + b",".join(items) + b"]}")
        h.send_bytes(200, body)

    def _bookmark(self, rt, rv, initial_end=False):
        md = {"resourceVersion": str(rv), "creationTimestamp": None}
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        return b'{"type":"BOOKMARK","object":' + dumps({"kind": rt.kind, "apiVersion": rt.api_version, "metadata": md}) + b"}\n"

    def watch(self, h, rt, ns, labels, fields):
        rv = h.q("resourceVersion")
        send_initial = _bool(h.q("sendInitialEvents"))
        bookmarks = _bool(h.q("allowWatchBookmarks"))
        if send_initial and h.q("resourceVersionMatch") != "NotOlderThan":
            raise APIError(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: "
                           "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                           {"kind": "ListOptions", "group": "meta.k8s.io"})
        try:
            timeout = float(h.q("timeoutSeconds")) if h.q("timeoutSeconds") else random.uniform(1800, 3600)
        except ValueError:
            raise bad_request("timeoutSeconds must be a number")
        as_table = self._wants_table(h)
        ctype = TABLE_CTYPE if as_table else "application/json"
        initial_end = (lambda r: self._bookmark(rt, r, True)) if (send_initial and bookmarks) else None
        try:
            w, _ = self.store.watch(rt, ns, labels, fields, rv, send_initial, initial_end)
        except APIError as e:
            if e.code != 410:
                raise
            h.start_chunked(200, ctype)
            h.chunk(b'{"type":"ERROR","object":' + dumps(e.status()) + b"}\n")
            h.end_chunked()
            return
        h.start_chunked(200, ctype)
        include = h.q("includeObject", "Metadata")
        first = [True]

        def encode(lines):
            if not as_table:
                return b"".join(lines)
            out = []
            for line in lines:
                ev = json.loads(line)
                if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    obj = ev["object"]
                    ev["object"] = table.table(rt, [obj], obj["metadata"].get("resourceVersion", ""), include,
                                               with_columns=first[0])
                    first[0] = False
                out.append(dumps(ev) + b"\n")
            return b"".join(out)

        deadline = time.monotonic() + timeout
        last_bm = time.monotonic()
        last_probe = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                lines = w.take(min(1.0, deadline - now))
                if lines:
                    h.chunk(encode(lines))
                if w.closed:
                    break
                now = time.monotonic()
                if bookmarks and now - last_bm >= self.bookmark_interval:
                    with self.store.lock:
                        with w.cv:
                            pending = list(w.queue)
                            w.queue.clear()
                        rv_now = self.store.rv
                    h.chunk(encode(pending) + self._bookmark(rt, rv_now))
                    last_bm = now
                if now - last_probe >= 2.0:
                    last_probe = now
                    if self._client_gone(h):
                        break
            h.end_chunked()
        except (OSError, ssl.SSLError):
            h.close_connection = True
        finally:
            self.store.unwatch(rt, w)

    @staticmethod
    def _client_gone(h):
        s = h.request
        try:
            r, _, _ = select.select([s], [], [], 0)
        except (ValueError, OSError):
            return True
        if not r:
            return False
        try:
            s.setblocking(False)
            try:
                data = s.recv(1)
            finally:
                s.settimeout(h.timeout)
        except (ssl.SSLWantReadError, BlockingIOError):
            return False
        except (OSError, ssl.SSLError):
            return True
        return data == b""

    def create(self, h, rt, ns):
        obj = self._json_body(h)
        dry = "All" in h.qlist("dryRun")
        out, warnings = self.store.create(rt, ns, obj, self._field_validation(h), dry)
        h.send_obj(201, out, extra=self._warn_headers(warnings))

    def update(self, h, rt, ns, name, sub):
        obj = self._json_body(h)
        out, warnings = self.store.update(rt, ns, name, obj, sub, self._field_validation(h), "All" in h.qlist("dryRun"))
        h.send_obj(200, out, extra=self._warn_headers(warnings))

    def patch(self, h, rt, ns, name, sub):
        ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        kind = patchmod.PATCH_TYPES.get(ctype)
        if kind is None:
            raise APIError(415, "UnsupportedMediaType", 'the body of the request was in an unknown format - accepted media '
                           'types include: application/json-patch+json, application/merge-patch+json, '
                           'application/apply-patch+yaml' + ('' if rt.crd else ', application/strategic-merge-patch+json'))
        body = h.body()
        out, warnings = self.store.patch(rt, ns, name, lambda cur: patchmod.apply_patch(kind, cur, body, rt.crd is not None),
                                         sub, self._field_validation(h), "All" in h.qlist("dryRun"))
        h.send_obj(200, out, extra=self._warn_headers(warnings))

    def _delete_options(self, h):
        raw = h.body()
        opts = {}
        if raw.strip():
            try:
                opts = json.loads(raw)
            except ValueError:
                raise bad_request("the body of the request is not valid DeleteOptions")
        if not isinstance(opts, dict):
            raise bad_request("the body of the request is not valid DeleteOptions")
        prop = h.q("propagationPolicy") or opts.get("propagationPolicy")
        orphan = h.q("orphanDependents") or opts.get("orphanDependents")
        if prop is None and orphan is not None:
            prop = "Orphan" if str(orphan).lower() == "true" else "Background"
        if prop not in (None, "Orphan", "Background", "Foreground"):
            raise APIError(422, "Invalid", 'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "%s": '
                           'supported values: "Foreground", "Background", "Orphan", "nil"' % prop)
        grace = h.q("gracePeriodSeconds")
        grace = int(grace) if grace not in (None, "") else opts.get("gracePeriodSeconds")
        dry = "All" in (h.qlist("dryRun") + (opts.get("dryRun") or []))
        return prop, grace, opts.get("preconditions") or {}, dry

    def delete(self, h, rt, ns, name):
        prop, grace, pre, dry = self._delete_options(h)
        obj, now = self.store.delete(rt, ns, name, prop, grace, pre, dry)
        if now and rt.crd is None:
            st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                  "details": {"name": name, "kind": rt.plural, "uid": obj["metadata"].get("uid")}}
            if rt.group:
                st["details"]["group"] = rt.group
            return h.send_obj(200, st)
        h.send_obj(200, obj)

    def delete_collection(self, h, rt, ns):
        labels, fields = self._selectors(h, rt, "")
        prop, grace, pre, dry = self._delete_options(h)
        out = []
        for obj in self.store.select(rt, ns, labels, fields):
            try:
                o, _ = self.store.delete(rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], prop, grace, None, dry)
                out.append(o)
            except APIError as e:
                if e.code != 404:
                    raise
        h.send_obj(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": {"resourceVersion": str(self.store.rv)},
                         "items": out})

    # -- scale --------------------------------------------------------------------------
    def _scale_of(self, obj):
        md = obj["metadata"]
        st = obj.get("status") or {}
        sc = {"kind": "Scale", "apiVersion": "autoscaling/v1",
              "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in md},
              "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
              "status": {"replicas": st.get("replicas", 0)}}
        if st.get("selector"):
            sc["status"]["selector"] = st["selector"]
        return sc

    def scale(self, h, rt, ns, name):
        if h.command == "GET":
            return h.send_obj(200, self._scale_of(self.store.get(rt, ns, name)))
        if h.command not in ("PUT", "PATCH"):
            raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        cur = self.store.get(rt, ns, name)
        if h.command == "PUT":
            sc = self._json_body(h)
        else:
            ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip()
            kind = patchmod.PATCH_TYPES.get(ctype, "merge")
            sc = patchmod.apply_patch(kind, self._scale_of(cur), h.body(), True)
        replicas = ((sc or {}).get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise APIError(422, "Invalid", 'Scale.autoscaling "%s" is invalid: spec.replicas: Invalid value: %s: must be '
                           'greater than or equal to 0' % (name, json.dumps(replicas)))
        rv = ((sc or {}).get("metadata") or {}).get("resourceVersion")

        def set_replicas(o):
            o.setdefault("spec", {})["replicas"] = replicas
            if rv:
                o["metadata"]["resourceVersion"] = rv
            return o
        out, _ = self.store.patch(rt, ns, name, set_replicas)
        h.send_obj(200, self._scale_of(out))

    # -- streaming subresources -----------------------------------------------------------
    def connect(self, h, rt, ns, name, sub):
        pod = self.store.get(rt, ns, name)
        upgrade = (h.headers.get("Upgrade") or "").lower()
        if upgrade.startswith("spdy"):
            raise bad_request("this API server serves %s only over WebSocket (subprotocols %s); SPDY upgrades are "
                              "not supported" % ("pods/" + sub, ", ".join(streams.EXEC_PROTOCOLS if sub == "exec" else streams.PORTFORWARD_PROTOCOLS)))
        if upgrade != "websocket":
            raise bad_request("Upgrade request required")
        key = h.headers.get("Sec-WebSocket-Key", "")
        from .ws import valid_key
        if h.command != "GET" or (h.headers.get("Sec-WebSocket-Version") or "") != "13" or not valid_key(key):
            raise bad_request("not a valid WebSocket handshake (GET, Sec-WebSocket-Version 13 and a Sec-WebSocket-Key)")
        offered = [p.strip() for v in h.headers.get_all("Sec-WebSocket-Protocol") or [] for p in v.split(",") if p.strip()]
        if sub == "attach":
            raise bad_request("pods/attach is not supported by this fake API server")
        if self.kubelet is None:
            raise bad_request("this fake API server runs no containers")
        if sub == "exec":
            return self._exec(h, pod, offered)
        return self._portforward(h, pod, offered)

    def _exec(self, h, pod, offered):
        cmd = h.qlist("command")
        if not cmd:
            raise bad_request("you must specify at least 1 command")
        stdin, stdout, stderr, tty = (_bool(h.q(k)) for k in ("stdin", "stdout", "stderr", "tty"))
        if not (stdin or stdout or stderr):
            raise bad_request("you must specify at least one of stdin, stdout, stderr")
        if tty and stderr:
            stderr = False
        proto = streams.pick_protocol(offered, streams.EXEC_PROTOCOLS)
        if proto is None:
            raise bad_request("none of the offered WebSocket subprotocols (%s) is supported; this server speaks %s"
                              % (", ".join(offered) or "none", ", ".join(streams.EXEC_PROTOCOLS)))
        cid = self.kubelet.check_exec(pod, h.q("container"))
        try:
            exec_id = self.kubelet.exec_create(cid, cmd, tty, stdin, stdout, stderr)
        except DockerError as e:
            raise APIError(500, "InternalError", "Internal error occurred: error executing command in container: %s" % e.message)
        sock, rest = h.upgrade(proto)
        streams.exec_session(sock, rest, proto, self.kubelet, exec_id, cmd, tty, stdin)

    def _portforward(self, h, pod, offered):
        proto = streams.pick_protocol(offered, streams.PORTFORWARD_PROTOCOLS)
        if proto is None:
            raise bad_request("none of the offered WebSocket subprotocols (%s) is supported; this server speaks %s"
                              % (", ".join(offered) or "none", ", ".join(streams.PORTFORWARD_PROTOCOLS)))
        self.kubelet.check_portforward(pod)
        if proto.startswith("SPDY/"):
            sock, rest = h.upgrade(proto)
            return streams.spdy_portforward_session(sock, rest, self.kubelet, pod)
        ports = []
        for v in h.qlist("ports"):
            for p in v.split(","):
                try:
                    n = int(p)
                except ValueError:
                    raise bad_request('invalid port "%s"' % p)
                if not 0 < n < 65536:
                    raise bad_request("port %d must be between 1 and 65535" % n)
                ports.append(n)
        if not ports:
            raise bad_request("query parameter \"port\" is required")
        sock, rest = h.upgrade(proto)
        streams.channel_portforward_session(sock, rest, self.kubelet, pod, ports)

    def logs(self, h, rt, ns, name):
        pod = self.store.get(rt, ns, name)
        if self.kubelet is None:
            raise bad_request("this fake API server runs no containers")
        follow = _bool(h.q("follow"))
        tail = h.q("tailLines")
        docker, cid, q = self.kubelet.logs(pod, h.q("container"), follow, int(tail) if tail else None, _bool(h.q("timestamps")))
        from .docker import _UnixHTTP, API as DAPI
        import urllib.parse
        c = _UnixHTTP(docker.path, None)
        try:
            c.request("GET", DAPI + "/containers/%s/logs?%s" % (cid, urllib.parse.urlencode(q)))
            r = c.getresponse()
            if r.status != 200:
                raise APIError(500, "InternalError", "Internal error occurred: %s" % r.read().decode(errors="replace"))
            tty = (pod["spec"]["containers"][0]).get("tty", False)
            h.start_chunked(200, "text/plain")
            buf = bytearray()
            while True:
                data = r.read1(65536)
                if not data:
                    break
                if tty:
                    h.chunk(data)
                    continue
                buf += data
                frames, buf = demux(buf)
                h.chunk(b"".join(p for _, p in frames))
            h.end_chunked()
        except (http.client.HTTPException, OSError, DockerError) as e:
            log("logs of %s/%s: %s", ns, name, e)
            h.close_connection = True
        finally:
            c.close()



_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def openapi_v3(group, version, rts):
    """A minimal OpenAPI v3 document for one group/version: a PATCH operation per resource that
    names its group-version-kind and query parameters (kubectl reads fieldValidation support
    from it) and, for custom resources, their schemas. PATCH operations carry no requestBody, so
    kubectl computes strategic merge patches of built-in kinds from its compiled-in types."""
    paths = {}
    schemas = {}
    for rt in rts:
        base = ("/apis/%s/%s" % (group, version)) if group else "/api/" + version
        if rt.namespaced:
            p = base + "/namespaces/{namespace}/" + rt.plural + "/{name}"
        else:
            p = base + "/" + rt.plural + "/{name}"
        gvk = {"group": group, "version": version, "kind": rt.kind}
        params = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for n in _QUERY_PARAMS]
        paths[p] = {"patch": {"operationId": "patch" + rt.kind, "x-kubernetes-action": "patch",
                              "x-kubernetes-group-version-kind": gvk, "parameters": params,
                              "responses": {"200": {"description": "OK"}}}}
        if rt.crd is not None:
            rev = ".".join(reversed(group.split(".")))
            sch = dict(rt.crd.schema.root)
            sch["x-kubernetes-group-version-kind"] = [gvk]
            schemas["%s.%s.%s" % (rev, version, rt.kind)] = sch
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}}
