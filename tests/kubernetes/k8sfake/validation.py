"""Object metadata validation for every kind, and the built-in kinds' defaulting and validation
(the part of it clients meet; the real rules are far larger)."""
import ipaddress
import itertools
import re
import threading

from .schema import FieldError

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")

LABEL_NAMED = ("namespaces", "services")


def _check_name(rt, name, errs):
    if rt.plural in LABEL_NAMED:
        if len(name) > 63:
            errs.append(FieldError("FieldValueInvalid", "metadata.name", "must be no more than 63 characters", name, True))
        elif not DNS1123_LABEL.match(name):
            errs.append(FieldError("FieldValueInvalid", "metadata.name", LABEL_MSG, name, True))
    else:
        if len(name) > 253:
            errs.append(FieldError("FieldValueInvalid", "metadata.name", "must be no more than 253 characters", name, True))
        elif not DNS1123_SUBDOMAIN.match(name):
            errs.append(FieldError("FieldValueInvalid", "metadata.name", SUBDOMAIN_MSG, name, True))


def _check_key(path, key, errs):
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        errs.append(FieldError("FieldValueInvalid", path, "prefix part " + SUBDOMAIN_MSG, key, True))
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        errs.append(FieldError("FieldValueInvalid", path,
                               "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                               "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                               "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                               key, True))


def validate_meta(rt, obj, old):
    errs = []
    md = obj.get("metadata") or {}
    name = md.get("name")
    if not name:
        errs.append(FieldError("FieldValueRequired", "metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        errs.append(FieldError("FieldValueInvalid", "metadata.name", "must be a string", name, True))
    else:
        _check_name(rt, name, errs)
    labels = md.get("labels") or {}
    if not isinstance(labels, dict):
        errs.append(FieldError("FieldValueInvalid", "metadata.labels", "must be a map of strings", "object", True))
        labels = {}
    for k, v in labels.items():
        _check_key("metadata.labels", k, errs)
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            errs.append(FieldError("FieldValueInvalid", "metadata.labels",
                                   "a valid label must be an empty string or consist of alphanumeric characters, "
                                   "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
                                   "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                                   "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')", v, True))
    ann = md.get("annotations") or {}
    if not isinstance(ann, dict):
        errs.append(FieldError("FieldValueInvalid", "metadata.annotations", "must be a map of strings", "object", True))
        ann = {}
    for k, v in ann.items():
        _check_key("metadata.annotations", k, errs)
        if not isinstance(v, str):
            errs.append(FieldError("FieldValueInvalid", "metadata.annotations", "must be a string", v, True))
    controllers = 0
    for i, ref in enumerate(md.get("ownerReferences") or []):
        for f in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(f):
                errs.append(FieldError("FieldValueInvalid", "metadata.ownerReferences.%s" % f,
                                       "%s must not be empty" % f, "", True))
        if ref.get("controller"):
            controllers += 1
    if controllers > 1:
        errs.append(FieldError("FieldValueInvalid", "metadata.ownerReferences",
                               "Only one reference can have Controller set to true", "object", True))
    if old is not None:
        if md.get("name") != old["metadata"].get("name"):
            errs.append(FieldError("FieldValueInvalid", "metadata.name", "field is immutable", md.get("name"), True))
    return errs


def _validate_pod(obj, old, errs):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errs.append(FieldError("FieldValueRequired", "spec"))
        return
    containers = spec.get("containers")
    if not containers:
        errs.append(FieldError("FieldValueRequired", "spec.containers"))
        return
    seen = set()
    for i, c in enumerate(containers):
        p = "spec.containers[%d]" % i
        if not isinstance(c, dict):
            errs.append(FieldError("FieldValueInvalid", p, "must be an object", "string", True))
            continue
        n = c.get("name")
        if not n:
            errs.append(FieldError("FieldValueRequired", p + ".name"))
        elif not DNS1123_LABEL.match(n):
            errs.append(FieldError("FieldValueInvalid", p + ".name", LABEL_MSG, n, True))
        elif n in seen:
            errs.append(FieldError("FieldValueDuplicate", p + ".name", "", n, True))
        seen.add(n)
        if not c.get("image") and old is None:
            errs.append(FieldError("FieldValueRequired", p + ".image"))
    rp = spec.get("restartPolicy")
    if rp is not None and rp not in ("Always", "OnFailure", "Never"):
        errs.append(FieldError("FieldValueNotSupported", "spec.restartPolicy",
                               'supported values: "Always", "OnFailure", "Never"', rp, True))
    if old is not None:
        a = _pod_mutable_stripped(old.get("spec") or {})
        b = _pod_mutable_stripped(spec)
        if a != b:
            errs.append(FieldError("FieldValueForbidden", "spec",
                                   "pod updates may not change fields other than `spec.containers[*].image`,"
                                   "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                                   "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                                   "(allow it to be set to 1 if it was previously negative)"))


def _pod_mutable_stripped(spec):
    s = dict(spec)
    for k in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "nodeName"):
        s.pop(k, None)
    for key in ("containers", "initContainers"):
        if isinstance(s.get(key), list):
            s[key] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c for c in s[key]]
    return s


def _validate_pvc(obj, old, errs):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errs.append(FieldError("FieldValueRequired", "spec"))
        return
    if not spec.get("accessModes"):
        errs.append(FieldError("FieldValueRequired", "spec.accessModes", "at least 1 access mode is required"))
    if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
        errs.append(FieldError("FieldValueRequired", "spec.resources[storage]"))
    if old is not None and (old.get("spec") or {}).get("accessModes") != spec.get("accessModes"):
        errs.append(FieldError("FieldValueForbidden", "spec",
                               "spec is immutable after creation except resources.requests and "
                               "volumeAttributesClassName for bound claims"))


def _validate_service(obj, old, errs):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errs.append(FieldError("FieldValueRequired", "spec"))
        return
    if not spec.get("ports") and spec.get("clusterIP") != "None" and spec.get("type") != "ExternalName":
        errs.append(FieldError("FieldValueRequired", "spec.ports"))


def validate_core(rt, obj, old):
    errs = []
    if rt.plural == "pods":
        _validate_pod(obj, old, errs)
    elif rt.plural == "persistentvolumeclaims":
        _validate_pvc(obj, old, errs)
    elif rt.plural == "services":
        _validate_service(obj, old, errs)
    return errs


_ip_lock = threading.Lock()
_service_ips = itertools.count(10)
SERVICE_NET = ipaddress.ip_network("10.96.0.0/12")


def _default_pod(obj):
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            img = c.get("image") or ""
            tagged = ":" in img.rsplit("/", 1)[-1] or "@" in img
            c.setdefault("imagePullPolicy", "Always" if not tagged or img.endswith(":latest") else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for p in c.get("ports") or []:
                p.setdefault("protocol", "TCP")
    st = obj.setdefault("status", {})
    st.setdefault("phase", "Pending")
    st.setdefault("qosClass", _qos(spec.get("containers") or []))


def _qos(containers):
    """Guaranteed: every container limits cpu and memory and requests (defaulting to the limits)
    equal them; BestEffort: nothing requested or limited; Burstable otherwise."""
    any_set = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        lim, req = res.get("limits") or {}, res.get("requests") or {}
        any_set = any_set or bool(lim) or bool(req)
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r, lim[r]) != lim[r]:
                guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if any_set else "BestEffort"


def _default_secret(obj):
    """stringData is write-only: merged into data (base64) as the real server does; type
    defaults to Opaque."""
    import base64
    for k, v in (obj.pop("stringData", None) or {}).items():
        obj.setdefault("data", {})[k] = base64.b64encode(str(v).encode("utf-8")).decode("ascii")
    if not obj.get("type"):
        obj["type"] = "Opaque"


def on_create(rt, obj):
    """Server-side defaulting of a new object of a built-in kind."""
    md = obj["metadata"]
    if rt.plural == "secrets":
        _default_secret(obj)
    elif rt.plural == "pods":
        _default_pod(obj)
    elif rt.plural == "persistentvolumeclaims":
        spec = obj.setdefault("spec", {})
        spec.setdefault("volumeMode", "Filesystem")
        obj["status"] = {"phase": "Pending"}
        fins = md.setdefault("finalizers", [])
        if "kubernetes.io/pvc-protection" not in fins:
            fins.append("kubernetes.io/pvc-protection")
    elif rt.plural == "namespaces":
        md.setdefault("labels", {})["kubernetes.io/metadata.name"] = md["name"]
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif rt.plural == "services":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("clusterIP") != "None":
            with _ip_lock:
                ip = str(SERVICE_NET[next(_service_ips)])
            spec["clusterIP"] = ip
        spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
        obj["status"] = {"loadBalancer": {}}


def on_update(rt, new, old):
    if rt.plural == "secrets":
        _default_secret(new)
    elif rt.plural == "namespaces":
        new["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = new["metadata"]["name"]
        new["spec"] = old.get("spec", {}) if "spec" not in new else new["spec"]
    elif rt.plural == "services":
        spec = new.setdefault("spec", {})
        ospec = old.get("spec") or {}
        if "clusterIP" in ospec:
            spec["clusterIP"] = ospec["clusterIP"]
            spec["clusterIPs"] = ospec.get("clusterIPs", [ospec["clusterIP"]])
