"""A keyed work queue with client-go's semantics (a key is processed by one worker at a time; a
key added while it is processed runs again afterwards) and delayed adds; plus event recording."""
import collections
import heapq
import threading
import time
import traceback

from .util import APIError, log, now_rfc3339, now_micro


class WorkQueue:
    def __init__(self, name, handler, workers=2):
        self.name = name
        self.handler = handler
        self.cv = threading.Condition()
        self.queue = collections.OrderedDict()
        self.processing = set()
        self.dirty = set()
        self.delayed = []
        self.stopped = False
        self.threads = []
        self.busy = 0
        for i in range(workers):
            t = threading.Thread(target=self._run, name="%s-%d" % (name, i), daemon=True)
            self.threads.append(t)
        self.timer = threading.Thread(target=self._timer, name=name + "-timer", daemon=True)

    def start(self):
        for t in self.threads:
            t.start()
        self.timer.start()

    def add(self, key):
        with self.cv:
            if key in self.processing:
                self.dirty.add(key)
            else:
                self.queue[key] = True
            self.cv.notify_all()

    def add_after(self, key, seconds):
        with self.cv:
            heapq.heappush(self.delayed, (time.monotonic() + seconds, repr(key), key))
            self.cv.notify_all()

    def stop(self):
        with self.cv:
            self.stopped = True
            self.cv.notify_all()

    def idle(self):
        with self.cv:
            return not self.queue and not self.processing and not self.dirty

    def _timer(self):
        while True:
            with self.cv:
                if self.stopped:
                    return
                now = time.monotonic()
                due = []
                while self.delayed and self.delayed[0][0] <= now:
                    due.append(heapq.heappop(self.delayed)[2])
                wait = (self.delayed[0][0] - now) if self.delayed else 1.0
            for k in due:
                self.add(k)
            with self.cv:
                if not self.stopped:
                    self.cv.wait(min(max(wait, 0.01), 1.0))

    def _run(self):
        while True:
            with self.cv:
                while not self.queue and not self.stopped:
                    self.cv.wait()
                if self.stopped:
                    return
                key, _ = self.queue.popitem(last=False)
                self.processing.add(key)
            try:
                self.handler(key)
            except APIError as e:
                log("%s: %r: %s", self.name, key, e.message)
                self.add_after(key, 1.0)
            except Exception:  # a controller bug must not kill the worker
                log("%s: %r failed:\n%s", self.name, key, traceback.format_exc())
                self.add_after(key, 2.0)
            finally:
                with self.cv:
                    self.processing.discard(key)
                    if key in self.dirty:
                        self.dirty.discard(key)
                        self.queue[key] = True
                        self.cv.notify_all()


class Recorder:
    """Writes core/v1 Events, folding repeats into a count as the event broadcaster does."""

    def __init__(self, store, types):
        self.store = store
        self.rt = types["events."]
        self.lock = threading.Lock()
        self.seen = {}

    def event(self, obj, rt, etype, reason, message, component, host=None, field_path=None):
        md = obj["metadata"]
        ns = md.get("namespace") or "default"
        key = (md.get("uid"), reason, message)
        ts = now_rfc3339()
        with self.lock:
            name = self.seen.get(key)
        if name is not None:
            def bump(e):
                e["count"] = e.get("count", 1) + 1
                e["lastTimestamp"] = ts
            if self.store.mutate(self.rt, ns, name, bump) is not None:
                return
        involved = {"kind": rt.kind, "namespace": md.get("namespace", ""), "name": md["name"], "uid": md.get("uid"),
                    "apiVersion": rt.api_version, "resourceVersion": md.get("resourceVersion")}
        if field_path:
            involved["fieldPath"] = field_path
        if not involved["namespace"]:
            del involved["namespace"]
        ev = {"apiVersion": "v1", "kind": "Event",
              "metadata": {"name": "%s.%x" % (md["name"], int(time.time() * 1e9)), "namespace": ns},
              "involvedObject": involved, "reason": reason, "message": message,
              "source": {"component": component}, "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
              "type": etype, "eventTime": None, "reportingComponent": component, "reportingInstance": host or ""}
        if host:
            ev["source"]["host"] = host
        try:
            out, _ = self.store.create(self.rt, ns, ev)
        except APIError as e:
            log("event for %s/%s not recorded: %s", ns, md["name"], e.message)
            return
        with self.lock:
            self.seen[key] = out["metadata"]["name"]

    def now_micro(self):
        return now_micro()
