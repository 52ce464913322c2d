"""The fake's node: a scheduler for its one node, a kubelet that runs each pod's first container
as a container of a private dockerd, and a volume provisioner that backs each PVC with a Docker
volume outliving the pods that mount it. With no dockerd (--kubelet=none) pods only pretend to
run: they get a phase, an IP and conditions, and exec is refused."""
import ipaddress
import itertools
import re
import threading
import time

from .docker import DockerError, connect_in_netns
from .hostpods import HostPods
from .store import ADDED, DELETED
from .util import bad_request, log, now_rfc3339
from .workqueue import Recorder, WorkQueue

NODE = "fake-node"
NODE_LABELS = {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
HOST_IP = "10.0.0.10"
POD_NET = ipaddress.ip_network("10.244.0.0/16")
LABEL_INSTANCE = "io.sbx.k8sfake.instance"
LABEL_NS = "io.sbx.k8sfake.namespace"
LABEL_POD = "io.sbx.k8sfake.pod"
LABEL_UID = "io.sbx.k8sfake.uid"
LABEL_PVC_UID = "io.sbx.k8sfake.pvc-uid"
TTY_WAIT = ('command -v stty >/dev/null || exec "$@"; i=0; while [ $i -lt 100 ]; do s=$(stty size 2>/dev/null); '
            '[ -n "$s" ] && [ "$s" != "0 0" ] && break; sleep 0.01; i=$((i+1)); done; exec "$@"')
PREEMPTION = "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."

_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_MULT = {"": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18,
         "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60, "m": 0.001}


def quantity(q):
    m = _QUANTITY.match(str(q))
    if not m or m.group(2) not in _MULT:
        return None
    return float(m.group(1)) * _MULT[m.group(2)]


def _cond(ctype, status, reason=None, message=None):
    c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def set_pod_condition(status, cond):
    conds = status.setdefault("conditions", [])
    for i, c in enumerate(conds):
        if c["type"] == cond["type"]:
            if c["status"] == cond["status"]:
                cond["lastTransitionTime"] = c.get("lastTransitionTime")
            conds[i] = cond
            return
    conds.append(cond)


class Kubelet:
    def __init__(self, store, types, docker, instance, grace_cap=None, workers=4, host_images=()):
        self.store = store
        self.types = types
        self.pods = types["pods."]
        self.pvcs = types["persistentvolumeclaims."]
        self.docker = docker
        self.instance = instance
        self.grace_cap = grace_cap
        self.recorder = Recorder(store, types)
        self.lock = threading.Lock()
        self.containers = {}  # pod uid -> container id
        self.restarts = {}  # pod uid -> restart count
        self.pull_failures = {}  # pod uid -> count
        self.sched_msgs = {}  # pod uid -> last FailedScheduling message
        self.ips = {}
        self.shells = {}  # container id -> has /bin/sh
        self.ip_counter = itertools.count(10)
        self.queue = WorkQueue("kubelet", self.sync, workers)
        self.stop_events = threading.Event()
        self.host = HostPods(store, types, host_images) if host_images else None
        store.listeners.append(self.on_event)

    # -- plumbing -----------------------------------------------------------------------
    def start(self):
        self.queue.start()
        if self.docker is not None:
            self.docker.events({"label": ["%s=%s" % (LABEL_INSTANCE, self.instance)], "type": ["container"],
                                "event": ["die", "start", "oom"]}, self.on_docker_event, self.stop_events)
            self.reconcile_orphans()

    def stop(self):
        self.stop_events.set()
        self.queue.stop()
        if self.host is not None:
            self.host.stop_all()

    def on_event(self, etype, rt, obj, old):
        md = obj["metadata"]
        if rt is self.pods:
            self.queue.add(("pod", md["namespace"], md["name"]))
            if etype == DELETED:
                for d in (self.restarts, self.pull_failures, self.sched_msgs):
                    d.pop(md["uid"], None)
            for v in (obj.get("spec") or {}).get("volumes") or []:
                claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
                if claim and (etype == DELETED or md.get("deletionTimestamp")):
                    self.queue.add(("pvc", md["namespace"], claim))
        elif rt is self.pvcs:
            self.queue.add(("pvc", md["namespace"], md["name"]))
            if etype == ADDED or etype == DELETED:
                for p in self.store.select(self.pods, md["namespace"], (), [("spec.nodeName", "=", "")]):
                    self.queue.add(("pod", p["metadata"]["namespace"], p["metadata"]["name"]))

    def on_docker_event(self, ev):
        attrs = (ev.get("Actor") or {}).get("Attributes") or {}
        ns, name = attrs.get(LABEL_NS), attrs.get(LABEL_POD)
        if ns and name:
            self.queue.add(("pod", ns, name))

    def sync(self, key):
        if key[0] == "pod":
            self.sync_pod(key[1], key[2])
        elif key[0] == "pvc":
            self.sync_pvc(key[1], key[2])

    def reconcile_orphans(self):
        """Remove containers of this instance whose pod no longer exists (after a restart)."""
        for c in self.docker.json("GET", "/containers/json", query={
                "all": "1", "filters": '{"label":["%s=%s"]}' % (LABEL_INSTANCE, self.instance)}):
            uid = (c.get("Labels") or {}).get(LABEL_UID)
            if not self.store.exists_uid(uid):
                self._remove_container(c["Id"])

    # -- scheduling ---------------------------------------------------------------------
    def _schedule(self, pod):
        spec = pod.get("spec") or {}
        md = pod["metadata"]
        if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
            return
        reasons = []
        sel = spec.get("nodeSelector") or {}
        if any(NODE_LABELS.get(k) != v for k, v in sel.items()):
            reasons.append("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. " + PREEMPTION)
        for v in spec.get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = self.store.find(self.pvcs, md["namespace"], claim)
            if pvc is None:
                reasons.append('0/1 nodes are available: persistentvolumeclaim "%s" not found. %s' % (claim, PREEMPTION))
            elif pvc["metadata"].get("deletionTimestamp"):
                reasons.append('0/1 nodes are available: persistentvolumeclaim "%s" is being deleted. %s' % (claim, PREEMPTION))
        if reasons:
            msg = reasons[0]

            def unsched(p):
                set_pod_condition(p.setdefault("status", {}), _cond("PodScheduled", "False", "Unschedulable", msg))
            self.store.mutate(self.pods, md["namespace"], md["name"], unsched, subresource="status")
            if self.sched_msgs.get(md["uid"]) != msg:
                self.sched_msgs[md["uid"]] = msg
                self.recorder.event(pod, self.pods, "Warning", "FailedScheduling", msg, "default-scheduler")
            return

        def bind(p):
            p["spec"]["nodeName"] = NODE
        out = self.store.mutate(self.pods, md["namespace"], md["name"], bind)

        def scheduled(p):
            set_pod_condition(p.setdefault("status", {}), _cond("PodScheduled", "True"))
        self.store.mutate(self.pods, md["namespace"], md["name"], scheduled, subresource="status")
        if out is not None:
            self.recorder.event(out, self.pods, "Normal", "Scheduled",
                                "Successfully assigned %s/%s to %s" % (md["namespace"], md["name"], NODE),
                                "default-scheduler")

    # -- pods ---------------------------------------------------------------------------
    def pod_ip(self, uid):
        with self.lock:
            if uid not in self.ips:
                self.ips[uid] = str(POD_NET[next(self.ip_counter)])
            return self.ips[uid]

    def sync_pod(self, ns, name):
        pod = self.store.find(self.pods, ns, name)
        self._cleanup_stale(ns, name, pod["metadata"]["uid"] if pod else None)
        if pod is None:
            return
        md = pod["metadata"]
        if md.get("deletionTimestamp"):
            self._terminate(pod)
            return
        spec = pod.get("spec") or {}
        if not spec.get("nodeName"):
            self._schedule(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return
        if self.host is not None and self.host.handles(pod):
            self._host_sync(pod, phase)
            return
        if self.docker is None:
            if phase != "Running":
                self._set_running(pod, None, now_rfc3339())
            return
        with self.lock:
            cid = self.containers.get(md["uid"])
        if cid is None:
            self._start_container(pod)
        else:
            self._check_container(pod, cid)

    def _host_sync(self, pod, phase):
        md = pod["metadata"]
        c = pod["spec"]["containers"][0]
        key = ("pod", md["namespace"], md["name"])
        hp = self.host.get(md["uid"])
        if hp is None:
            try:
                self.host.start(pod, self._env(pod, c))
            except ValueError as e:
                self._status_waiting(pod, "CreateContainerConfigError", str(e),
                                     ("Failed", "Error: " + str(e)))
                self.queue.add_after(key, 1)
                return
            hp = self.host.get(md["uid"])
            self.recorder.event(pod, self.pods, "Normal", "Started", "Started container %s" % c["name"],
                                "kubelet", NODE, "spec.containers{%s}" % c["name"])
        code = hp.proc.poll()
        if code is None:
            if phase != "Running":
                self._set_running(pod, None, hp.started)
            self.queue.add_after(key, 1)  # an exit is seen by polling
            return
        term = {"exitCode": code if code >= 0 else 128 - code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": hp.started, "finishedAt": now_rfc3339(), "containerID": "host://" + md["uid"]}

        def done(p):
            s = p.setdefault("status", {})
            s["phase"] = "Succeeded" if code == 0 else "Failed"
            s["containerStatuses"] = [{"name": c["name"], "state": {"terminated": term}, "lastState": {},
                                       "ready": False, "restartCount": 0, "image": c.get("image", ""),
                                       "imageID": "", "containerID": term["containerID"], "started": False}]
            set_pod_condition(s, _cond("Ready", "False", "PodCompleted"))
            set_pod_condition(s, _cond("ContainersReady", "False", "PodCompleted"))
        self.store.mutate(self.pods, md["namespace"], md["name"], done, subresource="status")

    def _cleanup_stale(self, ns, name, uid):
        with self.lock:
            stale = [(u, c) for u, c in self.containers.items() if u != uid and c[1] == (ns, name)]
        for u, (cid, _) in [(u, c) for u, c in stale]:
            self._remove_container(cid)
            with self.lock:
                self.containers.pop(u, None)

    def _terminate(self, pod):
        md = pod["metadata"]
        if self.host is not None and self.host.get(md["uid"]) is not None:
            self.host.stop(md["uid"])
            self.store.finalize_pod(self.pods, md["namespace"], md["name"], md["uid"])
            return
        with self.lock:
            entry = self.containers.get(md["uid"])
        if entry is not None:
            grace = int(md.get("deletionGracePeriodSeconds") or 0)
            if self.grace_cap is not None:
                grace = min(grace, self.grace_cap)
            c = (pod["spec"]["containers"] or [{}])[0]
            self.recorder.event(pod, self.pods, "Normal", "Killing", "Stopping container %s" % c.get("name"),
                                "kubelet", NODE, "spec.containers{%s}" % c.get("name"))
            try:
                self.docker.json("POST", "/containers/%s/stop" % entry[0], query={"t": str(grace)}, timeout=grace + 60)
            except (DockerError, OSError) as e:
                log("kubelet: stop %s: %s", entry[0], e)
            self._remove_container(entry[0])
            with self.lock:
                self.containers.pop(md["uid"], None)
        self.store.finalize_pod(self.pods, md["namespace"], md["name"], md["uid"])

    def _remove_container(self, cid):
        try:
            self.docker.json("DELETE", "/containers/%s" % cid, query={"force": "1", "v": "1"}, ok=(200, 204, 404))
        except (DockerError, OSError) as e:
            log("kubelet: remove %s: %s", cid, e)

    def _status_waiting(self, pod, reason, message, event=None):
        md = pod["metadata"]
        c = pod["spec"]["containers"][0]

        def upd(p):
            st = p.setdefault("status", {})
            st["phase"] = "Pending"
            st["hostIP"] = HOST_IP
            st["hostIPs"] = [{"ip": HOST_IP}]
            st.setdefault("startTime", now_rfc3339())
            st["containerStatuses"] = [{"name": c["name"], "state": {"waiting": {"reason": reason, "message": message}},
                                        "lastState": {}, "ready": False, "restartCount": self.restarts.get(md["uid"], 0),
                                        "image": c.get("image", ""), "imageID": "", "started": False}]
            set_pod_condition(st, _cond("PodReadyToStartContainers", "True"))
            set_pod_condition(st, _cond("Initialized", "True"))
            set_pod_condition(st, _cond("Ready", "False", "ContainersNotReady", "containers with unready status: [%s]" % c["name"]))
            set_pod_condition(st, _cond("ContainersReady", "False", "ContainersNotReady", "containers with unready status: [%s]" % c["name"]))
        self.store.mutate(self.pods, md["namespace"], md["name"], upd, subresource="status")
        if event:
            self.recorder.event(pod, self.pods, "Warning", event[0], event[1], "kubelet", NODE,
                                "spec.containers{%s}" % c["name"])

    def _volume_mounts(self, pod, c):
        md = pod["metadata"]
        vols = {}
        for v in pod["spec"].get("volumes") or []:
            if v.get("persistentVolumeClaim"):
                pvc = self.store.find(self.pvcs, md["namespace"], v["persistentVolumeClaim"]["claimName"])
                if pvc is None:
                    raise DockerError(0, 'persistentvolumeclaim "%s" not found' % v["persistentVolumeClaim"]["claimName"])
                vols[v["name"]] = {"Type": "volume", "Source": self.ensure_volume(pvc)}
            elif "emptyDir" in v:
                if (v["emptyDir"] or {}).get("medium") == "Memory":
                    vols[v["name"]] = {"Type": "tmpfs"}
                else:
                    vols[v["name"]] = {"Type": "volume"}
        mounts = []
        for vm in c.get("volumeMounts") or []:
            base = vols.get(vm.get("name"))
            if base is None:
                continue
            m = dict(base)
            m["Target"] = vm["mountPath"]
            if vm.get("readOnly"):
                m["ReadOnly"] = True
            mounts.append(m)
        return mounts

    def _env(self, pod, c):
        md = pod["metadata"]
        refs = {"metadata.name": md["name"], "metadata.namespace": md["namespace"], "metadata.uid": md["uid"],
                "spec.nodeName": NODE, "status.podIP": self.pod_ip(md["uid"]), "status.hostIP": HOST_IP,
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default")}
        env = []
        for e in c.get("env") or []:
            if "value" in e:
                env.append("%s=%s" % (e["name"], e.get("value") or ""))
            elif ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") in refs:
                env.append("%s=%s" % (e["name"], refs[e["valueFrom"]["fieldRef"]["fieldPath"]]))
        env.append("HOSTNAME=%s" % md["name"][:63])
        return env

    def _start_container(self, pod):
        md = pod["metadata"]
        c = pod["spec"]["containers"][0]
        image = c.get("image", "")
        if not self.docker.image_exists(image):
            n = self.pull_failures.get(md["uid"], 0)
            self.pull_failures[md["uid"]] = n + 1
            if n == 0:
                self.recorder.event(pod, self.pods, "Normal", "Pulling", 'Pulling image "%s"' % image, "kubelet", NODE,
                                    "spec.containers{%s}" % c["name"])
                msg = ('Failed to pull image "%s": image "%s" is not in the node\'s container engine and this '
                       'node pulls from no registry' % (image, image))
                self.recorder.event(pod, self.pods, "Warning", "Failed", msg, "kubelet", NODE,
                                    "spec.containers{%s}" % c["name"])
                self._status_waiting(pod, "ErrImagePull", msg, ("Failed", "Error: ErrImagePull"))
            else:
                msg = 'Back-off pulling image "%s"' % image
                self._status_waiting(pod, "ImagePullBackOff", msg, ("Failed", "Error: ImagePullBackOff"))
                self.recorder.event(pod, self.pods, "Normal", "BackOff", msg, "kubelet", NODE,
                                    "spec.containers{%s}" % c["name"])
            self.queue.add_after(("pod", md["namespace"], md["name"]), min(2 ** n, 10))
            return
        self.pull_failures.pop(md["uid"], None)
        try:
            mounts = self._volume_mounts(pod, c)
        except DockerError as e:
            self._status_waiting(pod, "ContainerCreating", e.message)
            self.queue.add_after(("pod", md["namespace"], md["name"]), 1)
            return
        hc = {"NetworkMode": "none", "Mounts": mounts, "LogConfig": {"Type": "json-file"}}
        limits = (c.get("resources") or {}).get("limits") or {}
        if "memory" in limits and quantity(limits["memory"]):
            hc["Memory"] = int(quantity(limits["memory"]))
        if "cpu" in limits and quantity(limits["cpu"]):
            hc["NanoCpus"] = int(quantity(limits["cpu"]) * 1e9)
        body = {"Image": image, "Env": self._env(pod, c), "Hostname": md["name"][:63],
                "Tty": bool(c.get("tty")), "OpenStdin": bool(c.get("stdin")), "StdinOnce": bool(c.get("stdinOnce")),
                "AttachStdin": False, "AttachStdout": False, "AttachStderr": False,
                "Labels": {LABEL_INSTANCE: self.instance, LABEL_NS: md["namespace"], LABEL_POD: md["name"],
                           LABEL_UID: md["uid"]},
                "HostConfig": hc}
        if c.get("command"):
            body["Entrypoint"] = c["command"]
            body["Cmd"] = c.get("args") or []
        elif c.get("args"):
            body["Cmd"] = c["args"]
        if c.get("workingDir"):
            body["WorkingDir"] = c["workingDir"]
        cname = "k8sfake_%s_%s_%s_%s" % (self.instance, md["namespace"], md["name"], md["uid"][:8])
        self.recorder.event(pod, self.pods, "Normal", "Pulled",
                            'Container image "%s" already present on machine' % image, "kubelet", NODE,
                            "spec.containers{%s}" % c["name"])
        try:
            created = self.docker.json("POST", "/containers/create", body, query={"name": cname})
        except DockerError as e:
            self._status_waiting(pod, "CreateContainerError", e.message, ("Failed", "Error: " + e.message))
            self.queue.add_after(("pod", md["namespace"], md["name"]), 5)
            return
        cid = created["Id"]
        with self.lock:
            self.containers[md["uid"]] = (cid, (md["namespace"], md["name"]))
        self.recorder.event(pod, self.pods, "Normal", "Created", "Created container: %s" % c["name"], "kubelet",
                            NODE, "spec.containers{%s}" % c["name"])
        try:
            self.docker.json("POST", "/containers/%s/start" % cid)
        except DockerError as e:
            self._status_waiting(pod, "RunContainerError", e.message, ("Failed", "Error: " + e.message))
            return
        self.recorder.event(pod, self.pods, "Normal", "Started", "Started container %s" % c["name"], "kubelet",
                            NODE, "spec.containers{%s}" % c["name"])
        self._check_container(pod, (cid, None))

    def _set_running(self, pod, cid, started, last_state=None):
        md = pod["metadata"]
        c = pod["spec"]["containers"][0]
        ip = self.pod_ip(md["uid"])

        def upd(p):
            st = p.setdefault("status", {})
            st["phase"] = "Running"
            st["hostIP"] = HOST_IP
            st["hostIPs"] = [{"ip": HOST_IP}]
            st["podIP"] = ip
            st["podIPs"] = [{"ip": ip}]
            st.setdefault("startTime", started)
            st["containerStatuses"] = [{
                "name": c["name"], "state": {"running": {"startedAt": started}}, "lastState": last_state or {},
                "ready": True, "restartCount": self.restarts.get(md["uid"], 0), "image": c.get("image", ""),
                "imageID": "docker-pullable://" + c.get("image", ""),
                "containerID": ("docker://" + cid) if cid else "fake://" + md["uid"], "started": True}]
            set_pod_condition(st, _cond("PodReadyToStartContainers", "True"))
            set_pod_condition(st, _cond("Initialized", "True"))
            set_pod_condition(st, _cond("Ready", "True"))
            set_pod_condition(st, _cond("ContainersReady", "True"))
            set_pod_condition(st, _cond("PodScheduled", "True"))
        self.store.mutate(self.pods, md["namespace"], md["name"], upd, subresource="status")

    def _check_container(self, pod, entry):
        md = pod["metadata"]
        cid = entry[0]
        try:
            info = self.docker.json("GET", "/containers/%s/json" % cid)
        except DockerError as e:
            if e.status == 404:
                with self.lock:
                    self.containers.pop(md["uid"], None)
                self.queue.add(("pod", md["namespace"], md["name"]))
            return
        state = info.get("State") or {}
        st = pod.get("status") or {}
        cs = (st.get("containerStatuses") or [{}])[0]
        if state.get("Running"):
            started = state.get("StartedAt", now_rfc3339())[:19] + "Z"
            cur = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            if st.get("phase") != "Running" or cur != started:
                self._set_running(pod, cid, started, cs.get("lastState") if cur else None)
            return
        code = state.get("ExitCode", 0)
        term = {"exitCode": code, "reason": "OOMKilled" if state.get("OOMKilled") else ("Completed" if code == 0 else "Error"),
                "startedAt": (state.get("StartedAt") or now_rfc3339())[:19] + "Z",
                "finishedAt": (state.get("FinishedAt") or now_rfc3339())[:19] + "Z", "containerID": "docker://" + cid}
        policy = pod["spec"].get("restartPolicy", "Always")
        c = pod["spec"]["containers"][0]
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            n = self.restarts.get(md["uid"], 0)
            delay = min(2 ** n, 10)
            self.restarts[md["uid"]] = n + 1
            msg = "back-off %ds restarting failed container=%s pod=%s_%s(%s)" % (delay, c["name"], md["name"], md["namespace"], md["uid"])

            def crash(p):
                s = p.setdefault("status", {})
                s["containerStatuses"] = [{"name": c["name"], "state": {"waiting": {"reason": "CrashLoopBackOff", "message": msg}},
                                           "lastState": {"terminated": term}, "ready": False, "restartCount": n,
                                           "image": c.get("image", ""), "imageID": "docker-pullable://" + c.get("image", ""),
                                           "containerID": "docker://" + cid, "started": False}]
                set_pod_condition(s, _cond("Ready", "False", "ContainersNotReady", "containers with unready status: [%s]" % c["name"]))
                set_pod_condition(s, _cond("ContainersReady", "False", "ContainersNotReady", "containers with unready status: [%s]" % c["name"]))
            self.store.mutate(self.pods, md["namespace"], md["name"], crash, subresource="status")
            self.recorder.event(pod, self.pods, "Warning", "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)"
                                % (c["name"], md["name"], md["namespace"], md["uid"]), "kubelet", NODE,
                                "spec.containers{%s}" % c["name"])
            threading.Timer(delay, self._restart, (md["namespace"], md["name"], md["uid"], cid)).start()
            return

        def done(p):
            s = p.setdefault("status", {})
            s["phase"] = "Succeeded" if code == 0 else "Failed"
            s["containerStatuses"] = [{"name": c["name"], "state": {"terminated": term}, "lastState": {}, "ready": False,
                                       "restartCount": self.restarts.get(md["uid"], 0), "image": c.get("image", ""),
                                       "imageID": "docker-pullable://" + c.get("image", ""), "containerID": "docker://" + cid,
                                       "started": False}]
            set_pod_condition(s, _cond("Ready", "False", "PodCompleted"))
            set_pod_condition(s, _cond("ContainersReady", "False", "PodCompleted"))
            set_pod_condition(s, _cond("PodReadyToStartContainers", "False"))
        self.store.mutate(self.pods, md["namespace"], md["name"], done, subresource="status")

    def _restart(self, ns, name, uid, cid):
        pod = self.store.find(self.pods, ns, name)
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            return
        try:
            self.docker.json("POST", "/containers/%s/start" % cid)
        except (DockerError, OSError) as e:
            log("kubelet: restart %s: %s", cid, e)
        self.queue.add(("pod", ns, name))

    # -- volumes ------------------------------------------------------------------------
    def volume_name(self, pvc):
        md = pvc["metadata"]
        return "k8sfake_%s_%s_%s_%s" % (self.instance, md["namespace"], md["name"], md["uid"][:8])

    def ensure_volume(self, pvc):
        name = self.volume_name(pvc)
        if self.docker is not None:
            self.docker.json("POST", "/volumes/create", {
                "Name": name, "Labels": {LABEL_INSTANCE: self.instance, LABEL_PVC_UID: pvc["metadata"]["uid"]}})
        return name

    def sync_pvc(self, ns, name):
        pvc = self.store.find(self.pvcs, ns, name)
        if pvc is None:
            return
        md = pvc["metadata"]
        if md.get("deletionTimestamp"):
            users = [p for p in self.store.select(self.pods, ns)
                     if any((v.get("persistentVolumeClaim") or {}).get("claimName") == name
                            for v in (p.get("spec") or {}).get("volumes") or [])]
            if users:
                return
            if self.docker is not None:
                try:
                    self.docker.json("DELETE", "/volumes/%s" % self.volume_name(pvc), ok=(200, 204, 404))
                except DockerError as e:
                    log("kubelet: remove volume of %s/%s: %s", ns, name, e.message)
                    self.queue.add_after(("pvc", ns, name), 1)
                    return
            self.store.remove_finalizer(self.pvcs, ns, name, "kubernetes.io/pvc-protection")
            return
        if (pvc.get("status") or {}).get("phase") == "Bound":
            return
        self.ensure_volume(pvc)

        def bind_spec(p):
            p["spec"]["volumeName"] = "pvc-" + md["uid"]
        self.store.mutate(self.pvcs, ns, name, bind_spec)

        def bound(p):
            spec = p.get("spec") or {}
            p["status"] = {"phase": "Bound", "accessModes": spec.get("accessModes") or [],
                           "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")}}
        self.store.mutate(self.pvcs, ns, name, bound, subresource="status")

    # -- what streams.py uses ---------------------------------------------------------------
    def _running_container(self, pod, container):
        md = pod["metadata"]
        names = [c.get("name") for c in pod["spec"].get("containers") or []]
        if container and container not in names:
            raise bad_request("container %s is not valid for pod %s" % (container, md["name"]))
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            raise bad_request("cannot exec into a container in a completed pod; current phase is %s" % phase)
        if not pod["spec"].get("nodeName"):
            raise bad_request("pod %s does not have a host assigned" % md["name"])
        if self.docker is None:
            raise bad_request("this fake API server runs no containers (started with --kubelet=none)")
        if container and container != names[0]:
            raise bad_request("container %s: only the first container of a pod runs in this fake API server" % container)
        with self.lock:
            entry = self.containers.get(md["uid"])
        if entry is None or phase != "Running":
            raise bad_request('unable to upgrade connection: container not found ("%s")' % (container or names[0]))
        return entry[0]

    def pod_gone(self, pod):
        cur = self.store.find(self.pods, pod["metadata"]["namespace"], pod["metadata"]["name"])
        return cur is None or cur["metadata"]["uid"] != pod["metadata"]["uid"]

    def check_exec(self, pod, container):
        if self.host is not None and self.host.handles(pod):
            raise bad_request("pod %s runs on the fake's host (--host-image): exec is not offered there"
                              % pod["metadata"]["name"])
        return self._running_container(pod, container)

    def _has_shell(self, cid):
        with self.lock:
            if cid in self.shells:
                return self.shells[cid]
        status, _ = self.docker.call("HEAD", "/containers/%s/archive" % cid, query={"path": "/bin/sh"})
        with self.lock:
            self.shells[cid] = status == 200
        return status == 200

    def exec_create(self, cid, cmd, tty, stdin, stdout, stderr):
        if tty and self._has_shell(cid):
            # Docker 1.41 starts an exec before its terminal can be sized (ConsoleSize came with
            # 1.42): the command waits, at most a second, until the client's first size lands.
            cmd = ["/bin/sh", "-c", TTY_WAIT, "sh"] + list(cmd)
        out = self.docker.json("POST", "/containers/%s/exec" % cid, {
            "AttachStdin": stdin, "AttachStdout": stdout, "AttachStderr": stderr, "Tty": tty, "Cmd": cmd})
        return out["Id"]

    def exec_start(self, exec_id, tty):
        return self.docker.hijack("/exec/%s/start" % exec_id, {"Detach": False, "Tty": tty})

    def exec_resize(self, exec_id, width, height):
        try:
            self.docker.json("POST", "/exec/%s/resize" % exec_id, query={"h": str(height), "w": str(width)},
                             ok=(200, 201, 204))
        except (DockerError, OSError) as e:
            log("kubelet: resize %s: %s", exec_id, e)

    def exec_exit_code(self, exec_id):
        for _ in range(100):
            info = self.docker.json("GET", "/exec/%s/json" % exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return info["ExitCode"]
            time.sleep(0.05)
        return info.get("ExitCode") or 0

    def check_portforward(self, pod):
        if self.host is not None and self.host.handles(pod):
            phase = (pod.get("status") or {}).get("phase")
            if phase != "Running" or self.host.get(pod["metadata"]["uid"]) is None:
                raise bad_request('unable to upgrade connection: container not found ("%s")'
                                  % pod["spec"]["containers"][0]["name"])
            return
        self.check_exec(pod, None)

    def port_connect(self, pod, port):
        if self.host is not None and self.host.handles(pod):
            return self.host.connect(pod, port)
        cid = self._running_container(pod, None)
        info = self.docker.json("GET", "/containers/%s/json" % cid)
        pid = (info.get("State") or {}).get("Pid")
        try:
            return connect_in_netns(pid, port)
        except OSError as e:
            raise OSError('failed to connect to localhost:%d inside namespace "%s", %s' % (port, cid, e.args[0] if e.args else e))

    def logs(self, pod, container, follow, tail, timestamps):
        cid = self._running_container(pod, container) if (pod.get("status") or {}).get("phase") == "Running" else None
        if cid is None:
            with self.lock:
                entry = self.containers.get(pod["metadata"]["uid"])
            if entry is None:
                raise bad_request('container "%s" in pod "%s" is waiting to start: ContainerCreating'
                                  % (container or pod["spec"]["containers"][0]["name"], pod["metadata"]["name"]))
            cid = entry[0]
        q = {"stdout": "1", "stderr": "1", "follow": "1" if follow else "0", "timestamps": "1" if timestamps else "0"}
        if tail is not None:
            q["tail"] = str(tail)
        return self.docker, cid, q

