"""The resource types the fake serves and their discovery documents."""
import hashlib

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
BASE_FIELDS = ("metadata.name", "metadata.namespace")


class ResourceType:
    def __init__(self, group, version, plural, singular, kind, namespaced, short_names=(), categories=(),
                 subresources=None, verbs=ALL_VERBS, crd=None, fields=()):
        self.group = group
        self.version = version
        self.plural = plural
        self.singular = singular
        self.kind = kind
        self.namespaced = namespaced
        self.short_names = list(short_names)
        self.categories = list(categories)
        # name -> (kind, group, version, verbs)
        self.subresources = subresources or {}
        self.verbs = list(verbs)
        self.crd = crd
        self.fields = set(BASE_FIELDS) | set(fields)

    @property
    def api_version(self):
        return self.version if not self.group else self.group + "/" + self.version

    @property
    def core(self):
        return self.group == ""

    @property
    def has_status(self):
        return "status" in self.subresources

    @property
    def list_kind(self):
        return self.kind + "List"

    def base_path(self):
        return "/api/" + self.version if self.core else "/apis/%s/%s" % (self.group, self.version)

    def storage_hash(self):
        return hashlib.sha256(("%s/%s/%s" % (self.group, self.version, self.kind)).encode()).digest()[:8].hex()


def core_types():
    sub_status = lambda kind: ("status", (kind, "", "v1", ["get", "patch", "update"]))  # noqa: E731
    return [
        ResourceType("", "v1", "namespaces", "namespace", "Namespace", False, ["ns"],
                     subresources=dict([sub_status("Namespace"), ("finalize", ("Namespace", "", "v1", ["update"]))]),
                     verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
                     fields=("status.phase",)),
        ResourceType("", "v1", "pods", "pod", "Pod", True, ["po"], ["all"],
                     subresources=dict([
                         sub_status("Pod"),
                         ("exec", ("PodExecOptions", "", "v1", ["create", "get"])),
                         ("portforward", ("PodPortForwardOptions", "", "v1", ["create", "get"])),
                         ("log", ("Pod", "", "v1", ["get"])),
                         ("attach", ("PodAttachOptions", "", "v1", ["create", "get"])),
                     ]),
                     fields=("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")),
        ResourceType("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", True,
                     ["pvc"], subresources=dict([sub_status("PersistentVolumeClaim")])),
        ResourceType("", "v1", "secrets", "secret", "Secret", True, [],
                     fields=("type",)),
        ResourceType("", "v1", "services", "service", "Service", True, ["svc"], ["all"],
                     subresources=dict([sub_status("Service")]),
                     verbs=["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]),
        ResourceType("", "v1", "events", "event", "Event", True, ["ev"],
                     fields=("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                             "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                             "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")),
    ]


def crd_type(crd):
    subs = {}
    if "status" in crd.subresources:
        subs["status"] = (crd.kind, crd.group, crd.version, ["get", "patch", "update"])
    if "scale" in crd.subresources:
        subs["scale"] = ("Scale", "autoscaling", "v1", ["get", "patch", "update"])
    n = crd.names
    return ResourceType(crd.group, crd.version, n["plural"], n["singular"], crd.kind, crd.namespaced,
                        n.get("shortNames") or [], n.get("categories") or [], subresources=subs, crd=crd)


def api_resource_list(group_version, types):
    res = []
    for rt in types:
        r = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced, "kind": rt.kind,
             "verbs": rt.verbs, "storageVersionHash": rt.storage_hash()}
        if rt.short_names:
            r["shortNames"] = rt.short_names
        if rt.categories:
            r["categories"] = rt.categories
        res.append(r)
        for name, (kind, g, v, verbs) in sorted(rt.subresources.items()):
            s = {"name": rt.plural + "/" + name, "singularName": "", "namespaced": rt.namespaced, "kind": kind,
                 "verbs": verbs}
            if g != rt.group or v != rt.version:
                s["group"] = g
                s["version"] = v
            res.append(s)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": res}


def discovery_v2_group(name, version, types):
    """One item of an aggregated discovery document (apidiscovery.k8s.io/v2)."""
    resources = []
    for rt in types:
        r = {"resource": rt.plural,
             "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
             "scope": "Namespaced" if rt.namespaced else "Cluster",
             "singularResource": rt.singular, "verbs": rt.verbs}
        if rt.short_names:
            r["shortNames"] = rt.short_names
        if rt.categories:
            r["categories"] = rt.categories
        subs = []
        for sname, (kind, g, v, verbs) in sorted(rt.subresources.items()):
            subs.append({"subresource": sname, "responseKind": {"group": g, "version": v, "kind": kind},
                         "verbs": verbs})
        if subs:
            r["subresources"] = subs
        resources.append(r)
    meta = {"creationTimestamp": None}
    if name:
        meta["name"] = name
    return {"metadata": meta, "versions": [{"version": version, "resources": resources, "freshness": "Current"}]}
