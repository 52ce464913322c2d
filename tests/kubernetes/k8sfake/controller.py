"""Controllers inside the fake: the garbage collector and namespace lifecycle every cluster has,
and a small emulation of agent-sandbox v0.5.x (Sandbox -> Pod, PVCs, headless Service and
status; SandboxWarmPool keeps ready Sandboxes of its template; SandboxClaim adopts a warm one or
starts one cold). Behaviour, labels, annotations, condition types, reasons and messages follow
kubernetes-sigs/agent-sandbox at v0.5.6 (controllers/, extensions/controllers/)."""
import json

from .selectors import Requirement
from .store import DELETED, clone
from .util import APIError, log, name_hash, now_rfc3339
from .workqueue import Recorder, WorkQueue

SANDBOX_LABEL = "agents.x-k8s.io/sandbox-name-hash"
POD_NAME_ANN = "agents.x-k8s.io/pod-name"
TEMPLATE_REF_ANN = "agents.x-k8s.io/sandbox-template-ref"
LAUNCH_TYPE = "agents.x-k8s.io/launch-type"
CREATED_BY = "agents.x-k8s.io/created-by"
POD_TEMPLATE_HASH = "agents.x-k8s.io/sandbox-pod-template-hash"
TEMPLATE_HASH = "agents.x-k8s.io/sandbox-template-hash"
PROPAGATED_LABELS = "agents.x-k8s.io/propagated-labels"
PROPAGATED_ANNOTATIONS = "agents.x-k8s.io/propagated-annotations"
WARM_POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"
TEMPLATE_REF_HASH = "agents.x-k8s.io/sandbox-template-ref-hash"
CLAIM_UID_LABEL = "agents.x-k8s.io/claim-uid"
ASSIGNED_ANN = "agents.x-k8s.io/sandbox-name"
CLUSTER_DOMAIN = "cluster.local"


def owner_ref(obj, rt):
    return {"apiVersion": rt.api_version, "kind": rt.kind, "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def controller_of(obj):
    for r in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if r.get("controller"):
            return r
    return None


def owned_by(obj, owner):
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == owner["metadata"]["uid"]


def set_condition(conds, cond):
    """meta.SetStatusCondition: keep lastTransitionTime unless the status changes."""
    for i, c in enumerate(conds):
        if c["type"] == cond["type"]:
            if c.get("status") == cond["status"] and c.get("lastTransitionTime"):
                cond["lastTransitionTime"] = c["lastTransitionTime"]
            else:
                cond["lastTransitionTime"] = now_rfc3339()
            conds[i] = cond
            return
    cond.setdefault("lastTransitionTime", now_rfc3339())
    conds.append(cond)


def remove_condition(conds, ctype):
    conds[:] = [c for c in conds if c["type"] != ctype]


def find_condition(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def is_system_key(k):
    return k.startswith("agents.x-k8s.io/") or k.startswith("extensions.agents.x-k8s.io/")


def blueprint_hash(spec):
    bp = {k: spec.get(k) for k in ("podTemplate", "volumeClaimTemplates", "service") if k in spec}
    return name_hash(json.dumps(bp, sort_keys=True))


def secure_defaults(template, podspec):
    """ApplySandboxSecureDefaults."""
    if "automountServiceAccountToken" not in podspec:
        podspec["automountServiceAccountToken"] = False
    tspec = template.get("spec") or {}
    managed = tspec.get("networkPolicyManagement", "Managed") in ("", "Managed")
    if managed and tspec.get("networkPolicy") is None and not podspec.get("dnsPolicy"):
        podspec["dnsPolicy"] = "None"
        podspec["dnsConfig"] = {"nameservers": ["8.8.8.8", "1.1.1.1"]}


class Controllers:
    def __init__(self, store, types, crds_enabled=True, agent_sandbox=True, workers=2):
        self.store = store
        self.t = types
        self.pods = types["pods."]
        self.pvcs = types["persistentvolumeclaims."]
        self.services = types["services."]
        self.namespaces = types["namespaces."]
        self.sandboxes = types.get("sandboxes.agents.x-k8s.io") if crds_enabled else None
        self.templates = types.get("sandboxtemplates.extensions.agents.x-k8s.io") if crds_enabled else None
        self.pools = types.get("sandboxwarmpools.extensions.agents.x-k8s.io") if crds_enabled else None
        self.claims = types.get("sandboxclaims.extensions.agents.x-k8s.io") if crds_enabled else None
        self.agent_sandbox = agent_sandbox and crds_enabled
        self.recorder = Recorder(store, types)
        self.queue = WorkQueue("controllers", self.sync, workers)
        store.listeners.append(self.on_event)

    def start(self):
        self.queue.start()

    def stop(self):
        self.queue.stop()

    # -- wiring -------------------------------------------------------------------------
    def on_event(self, etype, rt, obj, old):
        md = obj["metadata"]
        ns = md.get("namespace", "")
        if etype == DELETED:
            self.queue.add(("gc", md["uid"]))
            for ref in md.get("ownerReferences") or []:
                self.queue.add(("gc-owner", ref.get("uid")))
        elif md.get("deletionTimestamp"):
            fins = md.get("finalizers") or []
            if "foregroundDeletion" in fins or "orphan" in fins:
                self.queue.add(("gc-owner", md["uid"]))
        if rt is self.namespaces and md.get("deletionTimestamp"):
            self.queue.add(("ns", md["name"]))
        elif rt.namespaced:
            nsobj = self.store.find(self.namespaces, "", ns)
            if nsobj is not None and nsobj["metadata"].get("deletionTimestamp") and etype == DELETED:
                self.queue.add(("ns", ns))
        if not self.agent_sandbox:
            return
        ref = controller_of(obj)
        if rt is self.sandboxes:
            self.queue.add(("sandbox", ns, md["name"]))
        elif rt in (self.pods, self.services, self.pvcs) and ref and ref.get("kind") == "Sandbox":
            self.queue.add(("sandbox", ns, ref["name"]))
        if rt is self.pools:
            self.queue.add(("pool", ns, md["name"]))
        if rt is self.claims:
            self.queue.add(("claim", ns, md["name"]))
        if rt is self.sandboxes:
            for r in (ref, controller_of(old) if old else None):
                if r and r.get("kind") == "SandboxWarmPool":
                    self.queue.add(("pool", ns, r["name"]))
                    self._wake_claims(ns, r["name"])
                if r and r.get("kind") == "SandboxClaim":
                    self.queue.add(("claim", ns, r["name"]))
        if rt is self.templates:
            for p in self.store.select(self.pools, ns):
                if (p.get("spec") or {}).get("sandboxTemplateRef", {}).get("name") == md["name"]:
                    self.queue.add(("pool", ns, p["metadata"]["name"]))
                    self._wake_claims(ns, p["metadata"]["name"])
        if rt is self.pools:
            self._wake_claims(ns, md["name"])

    def _wake_claims(self, ns, pool):
        for c in self.store.select(self.claims, ns):
            if ((c.get("spec") or {}).get("warmPoolRef") or {}).get("name") == pool and \
                    not ((c.get("status") or {}).get("sandbox") or {}).get("name"):
                self.queue.add(("claim", ns, c["metadata"]["name"]))

    def sync(self, key):
        kind = key[0]
        if kind == "gc":
            self.gc_dependents(key[1])
        elif kind == "gc-owner":
            self.gc_owner(key[1])
        elif kind == "ns":
            self.sync_namespace(key[1])
        elif kind == "sandbox":
            self.sync_sandbox(key[1], key[2])
        elif kind == "pool":
            self.sync_pool(key[1], key[2])
        elif kind == "claim":
            self.sync_claim(key[1], key[2])

    def _create(self, rt, ns, obj):
        try:
            return self.store.create(rt, ns, obj)[0]
        except APIError as e:
            if e.code == 409:
                return None
            if e.code in (400, 422):
                self.store.record_violation(rt, obj["metadata"].get("name") or obj["metadata"].get("generateName"), e)
            raise

    # -- garbage collection ---------------------------------------------------------------
    def gc_dependents(self, uid):
        """uid is gone: dependents left without a live owner go too (background propagation)."""
        for rt, dep in self.store.dependents_of(uid):
            md = dep["metadata"]
            live = [r for r in md.get("ownerReferences") or [] if r.get("uid") != uid and self.store.exists_uid(r.get("uid"))]
            if live:
                def drop(o):
                    o["metadata"]["ownerReferences"] = [r for r in o["metadata"]["ownerReferences"] if r.get("uid") != uid]
                self.store.mutate(rt, md.get("namespace", ""), md["name"], drop)
            elif not md.get("deletionTimestamp"):
                try:
                    self.store.delete(rt, md.get("namespace", ""), md["name"])
                except APIError as e:
                    if e.code != 404:
                        raise

    def gc_owner(self, uid):
        rt, owner = self.store.by_uid_get(uid)
        if owner is None:
            return
        md = owner["metadata"]
        fins = md.get("finalizers") or []
        if not md.get("deletionTimestamp"):
            return
        deps = self.store.dependents_of(uid)
        if "orphan" in fins:
            for drt, dep in deps:
                def drop(o):
                    o["metadata"]["ownerReferences"] = [r for r in o["metadata"]["ownerReferences"] if r.get("uid") != uid]
                self.store.mutate(drt, dep["metadata"].get("namespace", ""), dep["metadata"]["name"], drop)
            self.store.remove_finalizer(rt, md.get("namespace", ""), md["name"], "orphan")
        elif "foregroundDeletion" in fins:
            if not deps:
                self.store.remove_finalizer(rt, md.get("namespace", ""), md["name"], "foregroundDeletion")
                return
            for drt, dep in deps:
                if not dep["metadata"].get("deletionTimestamp"):
                    try:
                        self.store.delete(drt, dep["metadata"].get("namespace", ""), dep["metadata"]["name"],
                                          propagation="Foreground")
                    except APIError as e:
                        if e.code != 404:
                            raise

    def sync_namespace(self, name):
        ns = self.store.find(self.namespaces, "", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        left = 0
        for rt in list(self.store.types.values()):
            if not rt.namespaced:
                continue
            for obj in self.store.select(rt, name):
                left += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    try:
                        self.store.delete(rt, name, obj["metadata"]["name"])
                    except APIError:
                        pass
        if left == 0:
            self.store.remove_now(self.namespaces, "", name)
        else:
            self.queue.add_after(("ns", name), 0.5)

    # -- Sandbox --------------------------------------------------------------------------
    def sync_sandbox(self, ns, name):
        sb = self.store.find(self.sandboxes, ns, name)
        if sb is None or sb["metadata"].get("deletionTimestamp"):
            return
        nh = name_hash(name)
        err = None
        try:
            self._sandbox_pvcs(sb, nh)
        except APIError as e:
            err = e
        pod, pod_err = None, None
        try:
            pod = self._sandbox_pod(sb, nh)
        except APIError as e:
            pod_err = e
            err = err or e
        svc = None
        try:
            svc = self._sandbox_service(sb, nh)
        except APIError as e:
            err = err or e
        sb = self.store.find(self.sandboxes, ns, name) or sb

        def status(o):
            st = o.setdefault("status", {})
            if pod is None:
                st.pop("podIPs", None)
                st.pop("nodeName", None)
            else:
                st["selector"] = SANDBOX_LABEL + "=" + nh
                if owned_by(pod, sb):
                    ips = [x["ip"] for x in (pod.get("status") or {}).get("podIPs") or []]
                    if ips:
                        st["podIPs"] = ips
                    else:
                        st.pop("podIPs", None)
                    if (pod.get("spec") or {}).get("nodeName"):
                        st["nodeName"] = pod["spec"]["nodeName"]
                    else:
                        st.pop("nodeName", None)
            if svc is not None:
                st["service"] = svc["metadata"]["name"]
                st["serviceFQDN"] = "%s.%s.svc.%s" % (svc["metadata"]["name"], ns, CLUSTER_DOMAIN)
            else:
                st.pop("service", None)
                st.pop("serviceFQDN", None)
            conds = st.setdefault("conditions", [])
            gen = o["metadata"].get("generation", 1)
            present = set()
            for c in self._sandbox_conditions(o, pod, pod_err, svc, err):
                c["observedGeneration"] = gen
                set_condition(conds, c)
                present.add(c["type"])
            for t in ("Finished", "PodScheduled"):
                if t not in present:
                    remove_condition(conds, t)
            if not conds:
                st.pop("conditions")
            if not st:
                o.pop("status")
        self.store.mutate(self.sandboxes, ns, name, status, subresource="status")

    def _sandbox_pvcs(self, sb, nh):
        md = sb["metadata"]
        for t in (sb.get("spec") or {}).get("volumeClaimTemplates") or []:
            tmd = t.get("metadata") or {}
            pname = "%s-%s" % (tmd.get("name", ""), md["name"])
            cur = self.store.find(self.pvcs, md["namespace"], pname)
            if cur is not None:
                if not owned_by(cur, sb) and controller_of(cur) is not None:
                    ref = controller_of(cur)
                    raise APIError(409, "Conflict", 'PVC "%s" is owned by %s/%s (UID: %s), not by sandbox "%s"'
                                   % (pname, ref["kind"], ref["name"], ref["uid"], md["name"]))
                continue
            labels = dict(tmd.get("labels") or {})
            labels[SANDBOX_LABEL] = nh
            pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": {"name": pname, "namespace": md["namespace"], "labels": labels,
                                "ownerReferences": [owner_ref(sb, self.sandboxes)]},
                   "spec": clone(t.get("spec") or {})}
            if tmd.get("annotations"):
                pvc["metadata"]["annotations"] = dict(tmd["annotations"])
            self._create(self.pvcs, md["namespace"], pvc)

    def _pod_labels(self, sb, nh):
        tmpl_md = ((sb.get("spec") or {}).get("podTemplate") or {}).get("metadata") or {}
        labels = {k: v for k, v in (tmpl_md.get("labels") or {}).items() if not is_system_key(k)}
        managed_labels = sorted(labels)
        labels[SANDBOX_LABEL] = nh
        ref = controller_of(sb)
        sbl = sb["metadata"].get("labels") or {}
        if ref and ref.get("apiVersion", "").startswith("extensions.agents.x-k8s.io/"):
            if ref.get("kind") == "SandboxWarmPool" and sbl.get(WARM_POOL_LABEL):
                labels[WARM_POOL_LABEL] = sbl[WARM_POOL_LABEL]
            if sbl.get(TEMPLATE_REF_HASH):
                labels[TEMPLATE_REF_HASH] = sbl[TEMPLATE_REF_HASH]
        if sbl.get(CREATED_BY):
            labels[CREATED_BY] = sbl[CREATED_BY]
        annotations = {k: v for k, v in (tmpl_md.get("annotations") or {}).items() if not is_system_key(k)}
        managed_ann = sorted(annotations)
        annotations[PROPAGATED_LABELS] = ",".join(managed_labels)
        annotations[PROPAGATED_ANNOTATIONS] = ",".join(managed_ann)
        return labels, annotations

    def _set_pod_name_annotation(self, sb, value):
        def fn(o):
            ann = o["metadata"].setdefault("annotations", {})
            if value is None:
                if POD_NAME_ANN not in ann:
                    return False
                del ann[POD_NAME_ANN]
                if not ann:
                    del o["metadata"]["annotations"]
            else:
                if ann.get(POD_NAME_ANN):
                    return False
                ann[POD_NAME_ANN] = value
        self.store.mutate(self.sandboxes, sb["metadata"]["namespace"], sb["metadata"]["name"], fn)

    def _sandbox_pod(self, sb, nh):
        md = sb["metadata"]
        spec = sb.get("spec") or {}
        pod_name = (md.get("annotations") or {}).get(POD_NAME_ANN) or md["name"]
        pod = self.store.find(self.pods, md["namespace"], pod_name)
        if pod is None and pod_name != md["name"]:
            self._set_pod_name_annotation(sb, None)
            pod = self.store.find(self.pods, md["namespace"], md["name"])
        if pod is not None and controller_of(pod) is not None and not owned_by(pod, sb):
            ref = controller_of(pod)
            raise APIError(409, "Conflict", 'pod "%s" is owned by %s/%s (UID: %s), not by sandbox "%s"'
                           % (pod["metadata"]["name"], ref["kind"], ref["name"], ref["uid"], md["name"]))
        if spec.get("operatingMode") == "Suspended":
            if pod is not None and owned_by(pod, sb):
                if not pod["metadata"].get("deletionTimestamp"):
                    self.store.delete(self.pods, md["namespace"], pod["metadata"]["name"])
                return pod
            self._set_pod_name_annotation(sb, None)
            return None
        labels, annotations = self._pod_labels(sb, nh)
        if pod is not None:
            want_l = dict(pod["metadata"].get("labels") or {})
            for k in (WARM_POOL_LABEL, TEMPLATE_REF_HASH, CREATED_BY):
                want_l.pop(k, None)
            want_l.update(labels)
            want_a = dict(pod["metadata"].get("annotations") or {})
            want_a.update(annotations)
            if want_l != (pod["metadata"].get("labels") or {}) or want_a != (pod["metadata"].get("annotations") or {}):
                def meta(o):
                    o["metadata"]["labels"] = want_l
                    o["metadata"]["annotations"] = want_a
                pod = self.store.mutate(self.pods, md["namespace"], pod["metadata"]["name"], meta) or pod
            if not pod["metadata"].get("deletionTimestamp"):
                self._set_pod_name_annotation(sb, pod["metadata"]["name"])
            return pod
        podspec = clone((spec.get("podTemplate") or {}).get("spec") or {})
        pvc_vols = [{"name": (t.get("metadata") or {}).get("name"),
                     "persistentVolumeClaim": {"claimName": "%s-%s" % ((t.get("metadata") or {}).get("name"), md["name"])}}
                    for t in spec.get("volumeClaimTemplates") or []]
        if pvc_vols:
            names = set(v["name"] for v in pvc_vols)
            podspec["volumes"] = [v for v in podspec.get("volumes") or [] if v.get("name") not in names] + pvc_vols
        new = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": md["name"], "namespace": md["namespace"], "labels": labels,
                            "annotations": annotations, "ownerReferences": [owner_ref(sb, self.sandboxes)]},
               "spec": podspec}
        pod = self._create(self.pods, md["namespace"], new)
        if pod is None:
            pod = self.store.find(self.pods, md["namespace"], md["name"])
        if pod is not None:
            self._set_pod_name_annotation(sb, pod["metadata"]["name"])
        return pod

    def _sandbox_service(self, sb, nh):
        md = sb["metadata"]
        want = (sb.get("spec") or {}).get("service")
        svc = self.store.find(self.services, md["namespace"], md["name"])
        if svc is None:
            if want:
                ports = []
                for c in ((sb["spec"].get("podTemplate") or {}).get("spec") or {}).get("containers") or []:
                    for p in c.get("ports") or []:
                        proto = p.get("protocol", "TCP")
                        ports.append({"name": p.get("name") or "p-%d-%s" % (p["containerPort"], proto.lower()),
                                      "protocol": proto, "port": p["containerPort"], "targetPort": p["containerPort"]})
                new = {"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": md["name"], "namespace": md["namespace"], "labels": {SANDBOX_LABEL: nh},
                                    "ownerReferences": [owner_ref(sb, self.sandboxes)]},
                       "spec": {"clusterIP": "None", "selector": {SANDBOX_LABEL: nh}}}
                if ports:
                    new["spec"]["ports"] = sorted(ports, key=lambda p: (p["port"], p["protocol"]))
                return self._create(self.services, md["namespace"], new)
            return None
        if want is False and owned_by(svc, sb):
            self.store.delete(self.services, md["namespace"], md["name"])
            return None
        if want is None and controller_of(svc) is None:
            return None
        return svc

    def _sandbox_conditions(self, sb, pod, pod_err, svc, err):
        spec = sb.get("spec") or {}
        suspended = spec.get("operatingMode") == "Suspended"
        out = []
        s = {"type": "Suspended", "status": "False", "reason": "NotSuspended", "message": "Sandbox is not suspended"}
        if suspended:
            if pod is None and pod_err is not None:
                s.update(status="Unknown", reason="PodStateUnknown",
                         message="Pod state is unknown. Sandbox suspension cannot be confirmed")
            elif pod is None:
                s.update(status="True", reason="PodTerminated", message="Pod has been terminated. Sandbox is suspended")
            elif not owned_by(pod, sb):
                s.update(reason="PodNotOwned", message="Refused to delete pod because it is not owned by this sandbox")
            else:
                s.update(reason="PodTerminating", message="Pod is terminating. Sandbox is suspending")
        out.append(s)
        phase = (pod.get("status") or {}).get("phase") if pod else None
        if pod is not None and owned_by(pod, sb) and phase in ("Succeeded", "Failed"):
            out.append({"type": "Finished", "status": "True",
                        "reason": "PodSucceeded" if phase == "Succeeded" else "PodFailed",
                        "message": "Pod completed successfully" if phase == "Succeeded" else "Pod failed"})
        if pod is None and pod_err is not None:
            out.append({"type": "PodScheduled", "status": "Unknown", "reason": "PodSchedulingUnknown",
                        "message": "Pod state is unknown. Pod scheduling cannot be determined"})
        elif pod is not None and owned_by(pod, sb):
            pc = None
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled":
                    pc = c
            if pc is None:
                out.append({"type": "PodScheduled", "status": "Unknown", "reason": "PodSchedulingUnknown",
                            "message": "Pod has not reported a PodScheduled condition yet"})
            else:
                reason = pc.get("reason") or ("PodScheduled" if pc["status"] == "True" else "PodSchedulingUnknown")
                out.append({"type": "PodScheduled", "status": pc["status"], "reason": reason,
                            "message": pc.get("message", "")})
        out.append(self._ready_condition(sb, pod, svc, err, suspended, phase))
        return out

    def _ready_condition(self, sb, pod, svc, err, suspended, phase):
        r = {"type": "Ready", "status": "False", "reason": "DependenciesNotReady", "message": ""}
        if err is not None:
            r.update(reason="ReconcilerError", message="Error seen: " + err.message)
            return r
        if suspended:
            r.update(reason="SandboxSuspended", message="Sandbox is suspending" if pod else "Sandbox is suspended")
            return r
        if phase == "Succeeded":
            r.update(reason="PodSucceeded", message="Pod completed successfully")
            return r
        if phase == "Failed":
            r.update(reason="PodFailed", message="Pod failed")
            return r
        ready = False
        if pod is not None:
            msg = "Pod exists with phase: " + (phase or "")
            if phase == "Running":
                msg = "Pod is Running but not Ready"
                for c in (pod.get("status") or {}).get("conditions") or []:
                    if c.get("type") == "Ready":
                        if c.get("status") == "True":
                            if (pod.get("status") or {}).get("podIPs"):
                                msg, ready = "Pod is Ready", True
                            else:
                                msg = "Pod is Ready but has no podIPs yet"
                        break
        else:
            msg = "Pod does not exist"
        want = (sb.get("spec") or {}).get("service")
        svc_required = want if want is not None else svc is not None
        svc_ready = True
        if svc_required:
            svc_ready = svc is not None
            msg += "; Service Exists" if svc is not None else "; Service does not exist"
        r["message"] = msg
        if ready and svc_ready:
            r.update(status="True", reason="DependenciesReady")
        return r

    # -- SandboxWarmPool ----------------------------------------------------------------
    def sync_pool(self, ns, name):
        pool = self.store.find(self.pools, ns, name)
        if pool is None or pool["metadata"].get("deletionTimestamp"):
            return
        spec = pool.get("spec") or {}
        tname = (spec.get("sandboxTemplateRef") or {}).get("name", "")
        tmpl = self.store.find(self.templates, ns, tname)
        ph = name_hash(name)
        members = [s for s in self.store.select(self.sandboxes, ns, [Requirement(WARM_POOL_LABEL, "=", {ph})])
                   if owned_by(s, pool)]
        active = [s for s in members if not s["metadata"].get("deletionTimestamp")]
        desired = spec.get("replicas", 1)
        ready = sum(1 for s in active if (find_condition(s, "Ready") or {}).get("status") == "True")
        if tmpl is not None and len(members) < desired:
            for _ in range(desired - len(members)):
                self._create(self.sandboxes, ns, self._pool_sandbox(pool, tmpl, ph))
        elif len(active) > desired:
            excess = sorted(active, key=lambda s: ((find_condition(s, "Ready") or {}).get("status") == "True",
                                                   s["metadata"]["creationTimestamp"]))
            for s in excess[:len(active) - desired]:
                self.store.delete(self.sandboxes, ns, s["metadata"]["name"])
        elif tmpl is None:
            log("controllers: warm pool %s/%s: SandboxTemplate %s not found", ns, name, tname)

        def status(o):
            st = o.setdefault("status", {})
            st["replicas"] = len(active)
            st["readyReplicas"] = ready
            st["selector"] = WARM_POOL_LABEL + "=" + ph
            st["observedGeneration"] = o["metadata"].get("generation", 1)
        self.store.mutate(self.pools, ns, name, status, subresource="status")

    def _pool_sandbox(self, pool, tmpl, ph):
        tspec = tmpl.get("spec") or {}
        bp = {k: clone(tspec[k]) for k in ("podTemplate", "volumeClaimTemplates", "service") if k in tspec}
        tname = tmpl["metadata"]["name"]
        bh = blueprint_hash(bp)
        ph_tmpl = name_hash(json.dumps(bp.get("podTemplate"), sort_keys=True))
        labels = {WARM_POOL_LABEL: ph, TEMPLATE_REF_HASH: name_hash(tname), LAUNCH_TYPE: "warm",
                  POD_TEMPLATE_HASH: ph_tmpl, TEMPLATE_HASH: bh, CREATED_BY: "controller"}
        pt = bp.setdefault("podTemplate", {})
        pmd = pt.setdefault("metadata", {})
        pl = pmd.setdefault("labels", {})
        pl[WARM_POOL_LABEL] = ph
        pl[TEMPLATE_REF_HASH] = name_hash(tname)
        pl[POD_TEMPLATE_HASH] = ph_tmpl
        pl[TEMPLATE_HASH] = bh
        secure_defaults(tmpl, pt.setdefault("spec", {}))
        return {"apiVersion": self.sandboxes.api_version, "kind": "Sandbox",
                "metadata": {"generateName": pool["metadata"]["name"] + "-", "namespace": pool["metadata"]["namespace"],
                             "labels": labels, "annotations": {TEMPLATE_REF_ANN: tname},
                             "ownerReferences": [owner_ref(pool, self.pools)]},
                "spec": bp}

    # -- SandboxClaim -------------------------------------------------------------------
    def sync_claim(self, ns, name):
        claim = self.store.find(self.claims, ns, name)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return
        sb, err = None, None
        assigned = (claim["metadata"].get("annotations") or {}).get(ASSIGNED_ANN)
        for cand in (assigned, name):
            if cand:
                s = self.store.find(self.sandboxes, ns, cand)
                if s is not None and owned_by(s, claim):
                    sb = s
                    break
        if sb is None:
            try:
                sb = self._claim_sandbox(claim)
            except APIError as e:
                err = e
        self._claim_status(claim, sb, err)

    def _claim_sandbox(self, claim):
        md = claim["metadata"]
        ns = md["namespace"]
        pool_name = ((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name", "")
        pool = self.store.find(self.pools, ns, pool_name)
        if pool is None:
            raise APIError(404, "WarmPoolNotFound", 'SandboxWarmPool "%s" not found' % pool_name)
        tname = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name", "")
        tmpl = self.store.find(self.templates, ns, tname)
        if tmpl is None:
            raise APIError(404, "TemplateNotFound", 'SandboxTemplate "%s" not found' % tname)
        cspec = claim.get("spec") or {}
        cold_only = bool(cspec.get("env") or cspec.get("volumeClaimTemplates"))
        if not cold_only:
            cands = [s for s in self.store.select(self.sandboxes, ns, [Requirement(WARM_POOL_LABEL, "=", {name_hash(pool_name)})])
                     if owned_by(s, pool) and not s["metadata"].get("deletionTimestamp")
                     and (s.get("status") or {}).get("podIPs")
                     and (find_condition(s, "Ready") or {}).get("status") == "True"]
            cands.sort(key=lambda s: s["metadata"]["creationTimestamp"])
            for s in cands:
                adopted = self._adopt(claim, s, tmpl)
                if adopted is not None:
                    return adopted
        return self._cold_start(claim, tmpl)

    def _adopt(self, claim, sb, tmpl):
        md = claim["metadata"]
        ns = md["namespace"]

        def annotate(o):
            o["metadata"].setdefault("annotations", {})[ASSIGNED_ANN] = sb["metadata"]["name"]
        self.store.mutate(self.claims, ns, md["name"], annotate)
        tname = tmpl["metadata"]["name"]

        def take(o):
            if not owned_by(o, {"metadata": {"uid": controller_of(sb)["uid"]}}):
                return False
            labels = o["metadata"].setdefault("labels", {})
            for k in (WARM_POOL_LABEL, POD_TEMPLATE_HASH, TEMPLATE_HASH):
                labels.pop(k, None)
            labels[LAUNCH_TYPE] = "warm"
            labels[CLAIM_UID_LABEL] = md["uid"]
            labels[TEMPLATE_REF_HASH] = labels.get(TEMPLATE_REF_HASH) or name_hash(tname)
            if (md.get("labels") or {}).get(CREATED_BY):
                labels[CREATED_BY] = md["labels"][CREATED_BY]
            else:
                labels.pop(CREATED_BY, None)
            o["metadata"]["ownerReferences"] = [owner_ref(claim, self.claims)]
            o["metadata"].setdefault("annotations", {})[POD_NAME_ANN] = o["metadata"]["name"]
            pmd = clone(((tmpl.get("spec") or {}).get("podTemplate") or {}).get("metadata") or {})
            pl = pmd.setdefault("labels", {})
            pl[CLAIM_UID_LABEL] = md["uid"]
            pl[TEMPLATE_REF_HASH] = labels[TEMPLATE_REF_HASH]
            self._merge_pod_metadata(pmd, (claim.get("spec") or {}).get("additionalPodMetadata") or {})
            o["spec"].setdefault("podTemplate", {})["metadata"] = pmd
        out = self.store.mutate(self.sandboxes, ns, sb["metadata"]["name"], take)
        if out is None or not owned_by(out, claim):
            return None
        self.recorder.event(claim, self.claims, "Normal", "SandboxAdopted",
                            'Adopted warm pool Sandbox "%s"' % sb["metadata"]["name"], "sandbox-claim-controller")
        return out

    @staticmethod
    def _merge_pod_metadata(pmd, extra):
        for k, v in (extra.get("labels") or {}).items():
            pmd.setdefault("labels", {})[k] = v
        for k, v in (extra.get("annotations") or {}).items():
            pmd.setdefault("annotations", {})[k] = v

    def _cold_start(self, claim, tmpl):
        md = claim["metadata"]
        ns = md["namespace"]
        tspec = tmpl.get("spec") or {}
        bp = {k: clone(tspec[k]) for k in ("podTemplate", "volumeClaimTemplates", "service") if k in tspec}
        cspec = claim.get("spec") or {}
        if cspec.get("volumeClaimTemplates"):
            if tspec.get("volumeClaimTemplatesPolicy", "Disallowed") == "Disallowed":
                raise APIError(422, "VolumeClaimTemplatesError",
                               "failed to merge volume claim templates: volumeClaimTemplates are not allowed by the template policy")
            bp["volumeClaimTemplates"] = clone(cspec["volumeClaimTemplates"])
        th = name_hash(tmpl["metadata"]["name"])
        labels = {CLAIM_UID_LABEL: md["uid"], LAUNCH_TYPE: "cold", TEMPLATE_REF_HASH: th}
        if (md.get("labels") or {}).get(CREATED_BY):
            labels[CREATED_BY] = md["labels"][CREATED_BY]
        pt = bp.setdefault("podTemplate", {})
        pmd = pt.setdefault("metadata", {})
        pl = pmd.setdefault("labels", {})
        pl[CLAIM_UID_LABEL] = md["uid"]
        pl[TEMPLATE_REF_HASH] = th
        self._merge_pod_metadata(pmd, cspec.get("additionalPodMetadata") or {})
        if cspec.get("env"):
            policy = tspec.get("envVarsInjectionPolicy", "Disallowed")
            if policy not in ("Allowed", "Overrides"):
                raise APIError(422, "EnvVarsInjectionRejected", "environment variable injection rejected: "
                               "environment variable injection is not allowed by the template policy")
            containers = (pt.get("spec") or {}).get("containers") or []
            for e in cspec["env"]:
                target = [c for c in containers if c.get("name") == e.get("containerName")] if e.get("containerName") else containers[:1]
                for c in target:
                    env = c.setdefault("env", [])
                    cur = [x for x in env if x.get("name") == e["name"]]
                    if cur and policy != "Overrides":
                        raise APIError(422, "EnvVarsInjectionRejected",
                                       'environment variable override is not allowed by the template policy for variable "%s"' % e["name"])
                    for x in cur:
                        env.remove(x)
                    env.append({"name": e["name"], "value": e.get("value", "")})
        secure_defaults(tmpl, pt.setdefault("spec", {}))
        sb = {"apiVersion": self.sandboxes.api_version, "kind": "Sandbox",
              "metadata": {"name": md["name"], "namespace": ns, "labels": labels,
                           "annotations": {TEMPLATE_REF_ANN: tmpl["metadata"]["name"]},
                           "ownerReferences": [owner_ref(claim, self.claims)]},
              "spec": bp}
        out = self._create(self.sandboxes, ns, sb)
        return out if out is not None else self.store.find(self.sandboxes, ns, md["name"])

    def _claim_status(self, claim, sb, err):
        md = claim["metadata"]

        def status(o):
            st = o.setdefault("status", {})
            conds = st.setdefault("conditions", [])
            gen = o["metadata"].get("generation", 1)
            if err is not None:
                reason = err.reason if err.reason in ("WarmPoolNotFound", "TemplateNotFound", "EnvVarsInjectionRejected",
                                                      "VolumeClaimTemplatesError") else "ReconcilerError"
                msg = err.message if reason != "ReconcilerError" else "Error seen: " + err.message
                c = {"type": "Ready", "status": "False", "reason": reason, "message": msg}
            elif sb is None:
                c = {"type": "Ready", "status": "False", "reason": "SandboxMissing", "message": "Sandbox does not exist"}
            else:
                ready = find_condition(sb, "Ready")
                if ready is not None:
                    c = {k: ready[k] for k in ("type", "status", "reason", "message") if k in ready}
                else:
                    c = {"type": "Ready", "status": "False", "reason": "SandboxNotReady", "message": "Sandbox is not ready"}
            c["observedGeneration"] = gen
            set_condition(conds, c)
            fin = find_condition(sb, "Finished") if sb is not None else None
            if fin is not None:
                set_condition(conds, {k: fin[k] for k in ("type", "status", "reason", "message") if k in fin})
            else:
                remove_condition(conds, "Finished")
            if sb is not None:
                s = {"name": sb["metadata"]["name"]}
                if (sb.get("status") or {}).get("podIPs"):
                    s["podIPs"] = sb["status"]["podIPs"]
                st["sandbox"] = s
            elif err is None:
                st.pop("sandbox", None)
        self.store.mutate(self.claims, md["namespace"], md["name"], status, subresource="status")
