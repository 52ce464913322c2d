"""The object store: what etcd and the generic registry do for the fake.

One global resourceVersion counter (as etcd's revision); per resource type a dict of objects
with their serialized JSON, a sorted key list (namespace, name) for ordered and paginated lists,
a label index for equality selectors, an owner index for garbage collection, a bounded event
history for watches resumed from a resourceVersion, and the set of live watchers. Objects held
here are never mutated in place: every write stores a new dict.
"""
import base64
import bisect
import collections
import copy
import json
import threading

from . import schema as schemamod
from . import validation
from .selectors import fields_match, labels_match
from .util import (APIError, already_exists, bad_request, conflict, dumps, forbidden, gone, invalid, log,
                   new_uid, not_found, now_rfc3339, random_suffix)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def _rt_key(rt):
    return rt.plural + "." + rt.group


def clone(obj):
    return json.loads(json.dumps(obj))


class Event:
    __slots__ = ("rv", "type", "obj", "raw", "old", "lines")

    def __init__(self, rv, etype, obj, raw, old):
        self.rv = rv
        self.type = etype
        self.obj = obj
        self.raw = raw
        self.old = old
        self.lines = {}

    def line(self, etype):
        """The encoded watch event, built once however many watchers get it."""
        out = self.lines.get(etype)
        if out is None:
            out = self.lines[etype] = b'{"type":"' + etype.encode() + b'","object":' + self.raw + b"}\n"
        return out


class Watcher:
    """One watch stream's filter and queue of encoded event lines."""

    MAX_BACKLOG = 200000

    def __init__(self, namespace, label_reqs, field_reqs):
        self.namespace = namespace
        self.label_reqs = label_reqs
        self.field_reqs = field_reqs
        self.queue = collections.deque()
        self.cv = threading.Condition(threading.Lock())
        self.closed = False
        self.overflow = False

    def matches(self, obj):
        if obj is None:
            return False
        md = obj.get("metadata") or {}
        if self.namespace and md.get("namespace") != self.namespace:
            return False
        if self.label_reqs and not labels_match(self.label_reqs, md.get("labels")):
            return False
        if self.field_reqs and not fields_match(self.field_reqs, obj):
            return False
        return True

    def line_for(self, ev):
        """The event as this watcher sees it (objects leaving or entering its filter), or None."""
        new_ok = self.matches(ev.obj)
        if ev.type == MODIFIED:
            old_ok = self.matches(ev.old)
            if new_ok and old_ok:
                etype = MODIFIED
            elif new_ok:
                etype = ADDED
            elif old_ok:
                etype = DELETED
            else:
                return None
        elif not new_ok:
            return None
        else:
            etype = ev.type
        return ev.line(etype)

    def push(self, line):
        with self.cv:
            if len(self.queue) >= self.MAX_BACKLOG:
                self.overflow = True
                self.closed = True
            else:
                self.queue.append(line)
            self.cv.notify()

    def offer(self, ev):
        line = self.line_for(ev)
        if line is not None:
            self.push(line)

    def close(self):
        with self.cv:
            self.closed = True
            self.cv.notify()

    def take(self, timeout):
        """Wait up to timeout for queued lines; returns a list (empty on timeout)."""
        with self.cv:
            if not self.queue and not self.closed:
                self.cv.wait(timeout)
            out = list(self.queue)
            self.queue.clear()
            return out


class Bucket:
    def __init__(self, rt, history_size):
        self.rt = rt
        self.items = {}  # (ns, name) -> (obj, raw)
        self.keys = []  # sorted (ns, name)
        self.labels = collections.defaultdict(set)  # (key, value) -> {(ns, name)}
        self.history = collections.deque(maxlen=history_size)
        self.dropped_rv = 0
        self.watchers = set()

    def index(self, key, obj):
        for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items():
            self.labels[(k, v)].add(key)

    def unindex(self, key, obj):
        for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items():
            s = self.labels.get((k, v))
            if s is not None:
                s.discard(key)
                if not s:
                    del self.labels[(k, v)]

    def range(self, ns):
        if not ns:
            return 0, len(self.keys)
        lo = bisect.bisect_left(self.keys, (ns, ""))
        hi = bisect.bisect_left(self.keys, (ns + "\x00", ""))
        return lo, hi


def _owner_uids(obj):
    return [r.get("uid") for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("uid")]


class Store:
    def __init__(self, types, history_size=10000):
        self.lock = threading.RLock()
        self.rv = 100
        self.types = {}
        self.buckets = {}
        self.history_size = history_size
        self.by_uid = {}  # uid -> (rt_key, ns, name)
        self.dependents = collections.defaultdict(set)  # owner uid -> {(rt_key, ns, name)}
        self.listeners = []
        self.violations = []
        self.released_pods = set()
        for rt in types:
            self.add_type(rt)

    def add_type(self, rt):
        self.types[_rt_key(rt)] = rt
        self.buckets[_rt_key(rt)] = Bucket(rt, self.history_size)

    def type_of(self, plural, group):
        return self.types.get(plural + "." + group)

    def bucket(self, rt):
        return self.buckets[_rt_key(rt)]

    # -- reading ------------------------------------------------------------------------
    def get(self, rt, ns, name):
        with self.lock:
            it = self.bucket(rt).items.get((ns, name))
            if it is None:
                raise not_found(rt.plural, rt.group, name)
            return it[0]

    def get_raw(self, rt, ns, name):
        with self.lock:
            it = self.bucket(rt).items.get((ns, name))
            if it is None:
                raise not_found(rt.plural, rt.group, name)
            return it[1]

    def find(self, rt, ns, name):
        with self.lock:
            it = self.bucket(rt).items.get((ns, name))
            return it[0] if it else None

    def by_uid_get(self, uid):
        with self.lock:
            loc = self.by_uid.get(uid)
            if loc is None:
                return None, None
            rt = self.types[loc[0]]
            return rt, self.bucket(rt).items[(loc[1], loc[2])][0]

    def select(self, rt, ns, label_reqs=(), field_reqs=()):
        """Objects (dicts) matching, in key order; for in-process controllers."""
        with self.lock:
            b = self.bucket(rt)
            keys = self._candidates(b, ns, label_reqs)
            out = []
            for k in keys:
                obj = b.items[k][0]
                md = obj["metadata"]
                if label_reqs and not labels_match(label_reqs, md.get("labels")):
                    continue
                if field_reqs and not fields_match(field_reqs, obj):
                    continue
                out.append(obj)
            return out

    def _candidates(self, b, ns, label_reqs):
        eq = [r for r in label_reqs if r.op in ("=", "in")]
        if eq:
            best = None
            for r in eq:
                s = set()
                for v in r.values:
                    s |= b.labels.get((r.key, v), set())
                if best is None or len(s) < len(best):
                    best = s
            return sorted(k for k in best if not ns or k[0] == ns)
        lo, hi = b.range(ns)
        return b.keys[lo:hi]

    def list(self, rt, ns, label_reqs, field_reqs, limit=0, cont=None):
        """(raw items, resourceVersion, continue token, remaining count or None)."""
        with self.lock:
            b = self.bucket(rt)
            list_rv = self.rv
            start = None
            if cont:
                try:
                    tok = json.loads(base64.urlsafe_b64decode(cont.encode() + b"==="))
                    start = tuple(tok["start"])
                    tok_rv = int(tok["rv"])
                except (ValueError, KeyError, TypeError):
                    raise bad_request("invalid continue token")
                if tok_rv < b.dropped_rv:
                    raise gone("The provided continue parameter is too old to display a consistent list result. "
                               "You can start a new list without the continue parameter, or use the continue token "
                               "in this response to retrieve the remainder of the results. Continuing with the "
                               "provided token results in an inconsistent list - objects that were created, "
                               "modified, or deleted between the time the first chunk was returned and now may "
                               "show up in the list.")
                list_rv = tok_rv
            keys = self._candidates(b, ns, label_reqs)
            i = bisect.bisect_right(keys, start) if start else 0
            out = []
            last = None
            more = False
            n = len(keys)
            while i < n:
                k = keys[i]
                i += 1
                obj, raw = b.items[k]
                if label_reqs and not labels_match(label_reqs, obj["metadata"].get("labels")):
                    continue
                if field_reqs and not fields_match(field_reqs, obj):
                    continue
                if limit and len(out) >= limit:
                    more = True
                    i -= 1
                    break
                out.append(raw)
                last = k
            token = None
            remaining = None
            if more:
                token = base64.urlsafe_b64encode(dumps({"rv": list_rv, "start": list(last)})).decode().rstrip("=")
                if not label_reqs and not field_reqs:
                    remaining = n - i
            return out, str(list_rv), token, remaining

    # -- watching -----------------------------------------------------------------------
    def watch(self, rt, ns, label_reqs, field_reqs, rv, send_initial, initial_end=None):
        """Register a watcher. rv: None/"" (now, with the current objects as ADDED), "0" (same)
        or a number (events after it). initial_end(rv) makes the line queued after the initial
        ADDED events (sendInitialEvents' bookmark). Returns (watcher, current resourceVersion)."""
        w = Watcher(ns, label_reqs, field_reqs)
        with self.lock:
            b = self.bucket(rt)
            if send_initial or rv in (None, "", "0"):
                for key in self._candidates(b, ns, label_reqs):
                    obj, raw = b.items[key]
                    if w.matches(obj):
                        w.queue.append(b'{"type":"ADDED","object":' + raw + b"}\n")
                if initial_end is not None:
                    w.queue.append(initial_end(self.rv))
            else:
                try:
                    start = int(rv)
                except ValueError:
                    raise bad_request('invalid resource version "%s"' % rv)
                if start < b.dropped_rv:
                    raise gone("too old resource version: %d (%d)" % (start, b.dropped_rv))
                for ev in b.history:
                    if ev.rv > start:
                        w.offer(ev)
            b.watchers.add(w)
            return w, self.rv

    def unwatch(self, rt, w):
        with self.lock:
            self.bucket(rt).watchers.discard(w)
        w.close()

    def compact(self):
        """Forget every event so far, as an etcd compaction at the current revision."""
        with self.lock:
            for b in self.buckets.values():
                b.history.clear()
                b.dropped_rv = self.rv
            return self.rv

    # -- writing ------------------------------------------------------------------------
    def _commit(self, rt, key, obj, etype, old):
        b = self.bucket(rt)
        self.rv += 1
        md = obj["metadata"]
        # ObjectMeta is a typed struct on the real server: empty maps and lists are omitted.
        for k in ("labels", "annotations", "ownerReferences", "finalizers", "managedFields"):
            if k in md and not md[k]:
                del md[k]
        md["resourceVersion"] = str(self.rv)
        raw = dumps(obj)
        uid = obj["metadata"].get("uid")
        if old is not None:
            b.unindex(key, old)
            for o in _owner_uids(old):
                deps = self.dependents.get(o)
                if deps is not None:
                    deps.discard((_rt_key(rt), key[0], key[1]))
                    if not deps:
                        del self.dependents[o]
        if etype == DELETED:
            del b.items[key]
            i = bisect.bisect_left(b.keys, key)
            if i < len(b.keys) and b.keys[i] == key:
                del b.keys[i]
            self.by_uid.pop(uid, None)
        else:
            if key not in b.items:
                bisect.insort(b.keys, key)
            b.items[key] = (obj, raw)
            b.index(key, obj)
            self.by_uid[uid] = (_rt_key(rt), key[0], key[1])
            for o in _owner_uids(obj):
                self.dependents[o].add((_rt_key(rt), key[0], key[1]))
        if len(b.history) == b.history.maxlen:
            b.dropped_rv = b.history[0].rv
        ev = Event(self.rv, etype, obj, raw, old)
        b.history.append(ev)
        for w in list(b.watchers):
            w.offer(ev)
            if w.overflow:
                b.watchers.discard(w)
        for cb in self.listeners:
            cb(etype, rt, obj, old)
        return obj

    def _check_ns(self, rt, ns, name):
        if not rt.namespaced:
            return
        nsrt = self.types["namespaces."]
        nsobj = self.bucket(nsrt).items.get(("", ns))
        if nsobj is None:
            raise not_found("namespaces", "", ns)
        if nsobj[0]["metadata"].get("deletionTimestamp"):
            raise forbidden(rt.plural, rt.group, name,
                            "unable to create new content in namespace %s because it is being terminated" % ns)

    def _validate(self, rt, obj, old, strict):
        """Defaulting, pruning and validation; returns warnings for unknown fields."""
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName") or ""
        errs = validation.validate_meta(rt, obj, old)
        warnings = []
        if rt.crd is not None:
            ferrs, unknown = schemamod.check_custom_object(rt.crd, obj, old)
            if unknown:
                if strict == "Strict":
                    raise bad_request('%s in version "%s" cannot be handled as a %s: strict decoding error: %s'
                                      % (rt.kind, rt.version, rt.kind,
                                         ", ".join('unknown field "%s"' % u for u in unknown)))
                if strict == "Warn":
                    warnings = ['unknown field "%s"' % u for u in unknown]
            errs.extend(ferrs)
        else:
            errs.extend(validation.validate_core(rt, obj, old))
        if errs:
            raise invalid(rt.kind, rt.group, name, errs)
        return warnings

    def create(self, rt, ns, obj, field_validation="Strict", dry_run=False, system=False):
        """Create obj (a dict the store takes over). Returns (stored object, warnings)."""
        with self.lock:
            if not isinstance(obj, dict):
                raise bad_request("the body of the request is not a JSON object")
            md = obj.setdefault("metadata", {})
            if not isinstance(md, dict):
                raise bad_request("metadata must be an object")
            obj.setdefault("apiVersion", rt.api_version)
            obj.setdefault("kind", rt.kind)
            if obj["apiVersion"] != rt.api_version or obj["kind"] != rt.kind:
                raise bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                                  % (obj["apiVersion"], rt.api_version) if obj["apiVersion"] != rt.api_version else
                                  "the kind in the data (%s) does not match the expected kind (%s)" % (obj["kind"], rt.kind))
            if rt.namespaced:
                if md.get("namespace") and md["namespace"] != ns:
                    raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
                md["namespace"] = ns
            else:
                md.pop("namespace", None)
                ns = ""
            if not md.get("name") and md.get("generateName"):
                md["name"] = md["generateName"] + random_suffix()
            name = md.get("name") or ""
            for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "managedFields", "selfLink", "generation"):
                md.pop(k, None)
            warnings = self._validate(rt, obj, None, field_validation)
            b = self.bucket(rt)
            if (ns, name) in b.items:
                raise already_exists(rt.plural, rt.group, name)
            self._check_ns(rt, ns, name)
            md["uid"] = new_uid()
            md["creationTimestamp"] = now_rfc3339()
            if rt.crd is not None:
                md["generation"] = 1
            validation.on_create(rt, obj)
            if dry_run:
                md["resourceVersion"] = str(self.rv)
                return obj, warnings
            return self._commit(rt, (ns, name), obj, ADDED, None), warnings

    def update(self, rt, ns, name, obj, subresource=None, field_validation="Strict", dry_run=False,
               require_rv=None, precondition_rv=None):
        """Replace an object (PUT). subresource "status" takes only .status, None keeps it."""
        with self.lock:
            if not rt.namespaced:
                ns = ""
            b = self.bucket(rt)
            cur = b.items.get((ns, name))
            if cur is None:
                raise not_found(rt.plural, rt.group, name)
            old = cur[0]
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
                raise bad_request("the body of the request is not a JSON object")
            md = obj.setdefault("metadata", {})
            obj.setdefault("apiVersion", rt.api_version)
            obj.setdefault("kind", rt.kind)
            if md.get("name") and md["name"] != name:
                raise bad_request("the name of the object (%s) does not match the name on the URL (%s)" % (md["name"], name))
            if rt.namespaced and md.get("namespace") and md["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
            sent_rv = md.get("resourceVersion") if precondition_rv is None else precondition_rv
            if require_rv is None:
                require_rv = rt.crd is not None
            if sent_rv:
                if sent_rv != old["metadata"]["resourceVersion"]:
                    raise conflict(rt.plural, rt.group, name)
            elif require_rv and subresource is None:
                raise invalid(rt.kind, rt.group, name, [schemamod.FieldError(
                    "FieldValueInvalid", "metadata.resourceVersion", "must be specified for an update", 0, True)])
            new = self._merge_for_update(rt, old, obj, subresource)
            warnings = self._validate(rt, new, old, field_validation)
            validation.on_update(rt, new, old)
            if rt.crd is not None:
                gen = old["metadata"].get("generation", 1)
                if _spec_changed(old, new):
                    gen += 1
                new["metadata"]["generation"] = gen
            if _same(old, new):
                return old, warnings
            if dry_run:
                return new, warnings
            out = self._commit(rt, (ns, name), new, MODIFIED, old)
            self._remove_if_done(rt, (ns, name), out)
            return out, warnings

    def _merge_for_update(self, rt, old, obj, subresource):
        md = obj["metadata"]
        omd = old["metadata"]
        if subresource == "status":
            new = clone(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            return new
        new = obj
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if k in omd:
                md[k] = omd[k]
            else:
                md.pop(k, None)
        md["name"] = omd["name"]
        if rt.namespaced:
            md["namespace"] = omd["namespace"]
        md.pop("managedFields", None)
        md.pop("selfLink", None)
        if rt.has_status:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        if omd.get("deletionTimestamp"):
            added = set(md.get("finalizers") or []) - set(omd.get("finalizers") or [])
            if added:
                raise invalid(rt.kind, rt.group, omd["name"], [schemamod.FieldError(
                    "FieldValueForbidden", "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, found new finalizers %s"
                    % json.dumps(sorted(added)))])
        return new

    def patch(self, rt, ns, name, mutate, subresource=None, field_validation="Strict", dry_run=False):
        """Apply mutate(current copy) -> new object and store it with the current resourceVersion
        as precondition unless the patch names another."""
        with self.lock:
            if not rt.namespaced:
                ns = ""
            cur = self.get(rt, ns, name)
            new = mutate(clone(cur))
            if not isinstance(new, dict):
                raise bad_request("the patch does not produce an object")
            nmd = new.setdefault("metadata", {})
            if not isinstance(nmd, dict):
                raise bad_request("metadata must be an object")
            if not nmd.get("resourceVersion"):
                nmd["resourceVersion"] = cur["metadata"]["resourceVersion"]
            return self.update(rt, ns, name, new, subresource, field_validation, dry_run, require_rv=False)

    def mutate(self, rt, ns, name, fn, subresource=None):
        """For in-process controllers: fn(copy) edits the object; stored unless fn returns False."""
        with self.lock:
            cur = self.find(rt, ns, name)
            if cur is None:
                return None
            new = clone(cur)
            if fn(new) is False:
                return cur
            try:
                out, _ = self.update(rt, ns, name, new, subresource, require_rv=False)
            except APIError as e:
                self.record_violation(rt, name, e)
                raise
            return out

    def record_violation(self, rt, name, err):
        msg = "%s %s/%s: %s" % (rt.kind, rt.group, name, err.message)
        log("controller write refused: %s", msg)
        self.violations.append(msg)

    def _remove_if_done(self, rt, key, obj):
        """An object being deleted goes once its finalizers are gone (a pod once the kubelet has
        also stopped it; a namespace is the namespace controller's)."""
        md = obj["metadata"]
        if not md.get("deletionTimestamp") or md.get("finalizers") or rt.plural == "namespaces":
            return
        if rt.plural == "pods":
            spec = obj.get("spec") or {}
            if spec.get("nodeName") and md.get("uid") not in self.released_pods and \
                    (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                return
            self.released_pods.discard(md.get("uid"))
        self._remove(rt, key)

    def _remove(self, rt, key):
        b = self.bucket(rt)
        it = b.items.get(key)
        if it is None:
            return None
        old = it[0]
        obj = clone(old)
        return self._commit(rt, key, obj, DELETED, old)

    def delete(self, rt, ns, name, propagation=None, grace=None, preconditions=None, dry_run=False):
        """DELETE. Returns (object, deleted_now)."""
        with self.lock:
            if not rt.namespaced:
                ns = ""
            obj = self.get(rt, ns, name)
            md = obj["metadata"]
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != md.get("uid"):
                raise conflict(rt.plural, rt.group, name,
                               "Precondition failed: UID in precondition: %s, UID in object meta: %s" % (pre["uid"], md.get("uid")))
            if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
                raise conflict(rt.plural, rt.group, name,
                               "Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s"
                               % (pre["resourceVersion"], md.get("resourceVersion")))
            if dry_run:
                return obj, False
            if rt.plural == "namespaces":
                return self._delete_namespace(rt, obj), False
            is_pod = rt.plural == "pods"
            if md.get("deletionTimestamp"):
                if is_pod and grace == 0:
                    return self._remove(rt, ("" if not rt.namespaced else ns, name)), True
                return obj, False
            fins = list(md.get("finalizers") or [])
            if propagation == "Foreground" and "foregroundDeletion" not in fins:
                fins.append("foregroundDeletion")
            if propagation == "Orphan" and "orphan" not in fins:
                fins.append("orphan")
            if is_pod:
                if grace is None:
                    grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                running = bool((obj.get("spec") or {}).get("nodeName")) and \
                    (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                if grace > 0 and running or fins:
                    new = clone(obj)
                    new["metadata"]["deletionTimestamp"] = now_rfc3339()
                    new["metadata"]["deletionGracePeriodSeconds"] = grace if running else 0
                    new["metadata"]["finalizers"] = fins
                    if not fins:
                        new["metadata"].pop("finalizers")
                    return self._commit(rt, (ns, name), new, MODIFIED, obj), False
                return self._remove(rt, (ns, name)), True
            if fins:
                new = clone(obj)
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["finalizers"] = fins
                if rt.crd is not None:
                    new["metadata"]["generation"] = md.get("generation", 1) + 1
                return self._commit(rt, (ns, name), new, MODIFIED, obj), False
            return self._remove(rt, (ns, name)), True

    def finalize_pod(self, rt, ns, name, uid):
        """The kubelet's last word on a pod being deleted: remove it once its finalizers are gone."""
        with self.lock:
            obj = self.find(rt, ns, name)
            if obj is None or obj["metadata"].get("uid") != uid:
                return
            self.released_pods.add(uid)
            self._remove_if_done(rt, (ns, name), obj)

    def _delete_namespace(self, rt, obj):
        new = clone(obj)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        new.setdefault("status", {})["phase"] = "Terminating"
        return self._commit(rt, ("", obj["metadata"]["name"]), new, MODIFIED, obj)

    def remove_now(self, rt, ns, name):
        """Remove without finalizer checks (namespace controller, kubelet, GC)."""
        with self.lock:
            return self._remove(rt, ("" if not rt.namespaced else ns, name))

    def remove_finalizer(self, rt, ns, name, finalizer):
        with self.lock:
            obj = self.find(rt, ns, name)
            if obj is None or finalizer not in (obj["metadata"].get("finalizers") or []):
                return
            new = clone(obj)
            new["metadata"]["finalizers"] = [f for f in new["metadata"]["finalizers"] if f != finalizer]
            if not new["metadata"]["finalizers"]:
                del new["metadata"]["finalizers"]
            key = (ns if rt.namespaced else "", name)
            self._remove_if_done(rt, key, self._commit(rt, key, new, MODIFIED, obj))

    def dependents_of(self, uid):
        with self.lock:
            out = []
            for rk, ns, name in self.dependents.get(uid, ()):
                rt = self.types[rk]
                it = self.bucket(rt).items.get((ns, name))
                if it:
                    out.append((rt, it[0]))
            return out

    def exists_uid(self, uid):
        with self.lock:
            return uid in self.by_uid


def _strip(o):
    o = dict(o)
    o.pop("metadata", None)
    o.pop("status", None)
    return o


def _spec_changed(old, new):
    return _strip(old) != _strip(new)


def _same(old, new):
    a = dict(old)
    b = dict(new)
    am = dict(a.get("metadata") or {})
    bm = dict(b.get("metadata") or {})
    am.pop("resourceVersion", None)
    bm.pop("resourceVersion", None)
    a["metadata"] = am
    b["metadata"] = bm
    return a == b


def deep(obj):
    return copy.deepcopy(obj)
