"""Server-side printing (meta.k8s.io/v1 Table), what `kubectl get` asks for."""
import re

from .util import age

NAME_COL = {"name": "Name", "type": "string", "format": "name", "priority": 0,
            "description": "Name must be unique within a namespace."}
AGE_COL = {"name": "Age", "type": "string", "format": "", "priority": 0,
           "description": "CreationTimestamp is a timestamp representing the server time when this object was created."}


def _col(name, typ="string", priority=0, fmt="", desc=""):
    return {"name": name, "type": typ, "format": fmt, "priority": priority, "description": desc}


def jsonpath(obj, expr):
    """The small JSONPath subset of CRD printer columns: .a.b, [n], [?(@.k=='v')]."""
    cur = [obj]
    for tok in re.findall(r"\.[A-Za-z0-9_-]+|\[\?\(@\.[A-Za-z0-9_.]+==['\"][^'\"]*['\"]\)\]|\[\d+\]", expr):
        nxt = []
        for c in cur:
            if tok.startswith("."):
                if isinstance(c, dict) and tok[1:] in c:
                    nxt.append(c[tok[1:]])
            elif tok.startswith("[?"):
                m = re.match(r"\[\?\(@\.([A-Za-z0-9_.]+)==['\"]([^'\"]*)['\"]\)\]", tok)
                if isinstance(c, list):
                    for item in c:
                        v = item
                        for p in m.group(1).split("."):
                            v = v.get(p) if isinstance(v, dict) else None
                        if v == m.group(2):
                            nxt.append(item)
            else:
                i = int(tok[1:-1])
                if isinstance(c, list) and i < len(c):
                    nxt.append(c[i])
        cur = nxt
    return cur


def _pod_status(pod):
    st = pod.get("status") or {}
    reason = st.get("reason") or st.get("phase") or "Unknown"
    for cs in st.get("containerStatuses") or []:
        w = (cs.get("state") or {}).get("waiting")
        t = (cs.get("state") or {}).get("terminated")
        if w and w.get("reason"):
            reason = w["reason"]
        elif t:
            reason = t.get("reason") or ("Signal:%d" % t["signal"] if t.get("signal") else "ExitCode:%d" % t.get("exitCode", 0))
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_row(pod):
    st = pod.get("status") or {}
    cs = st.get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(c.get("restartCount", 0) for c in cs)
    return ["%d/%d" % (ready, total), _pod_status(pod), restarts, age(pod["metadata"].get("creationTimestamp")),
            st.get("podIP") or "<none>", (pod.get("spec") or {}).get("nodeName") or "<none>", "<none>", "<none>"]


def columns_and_cells(rt):
    """(column definitions without Name, function obj -> cells without the name)."""
    p = rt.plural
    if p == "pods":
        cols = [_col("Ready"), _col("Status"), _col("Restarts", "string"), dict(AGE_COL),
                _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1),
                _col("Readiness Gates", priority=1)]
        return cols, _pod_row
    if p == "namespaces":
        return [_col("Status"), dict(AGE_COL)], lambda o: [(o.get("status") or {}).get("phase", ""),
                                                             age(o["metadata"].get("creationTimestamp"))]
    if p == "persistentvolumeclaims":
        def pvc(o):
            st = o.get("status") or {}
            spec = o.get("spec") or {}
            return [st.get("phase", ""), spec.get("volumeName", ""), (st.get("capacity") or {}).get("storage", ""),
                    ",".join({"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX",
                              "ReadWriteOncePod": "RWOP"}.get(m, m) for m in st.get("accessModes") or []),
                    spec.get("storageClassName") or "<unset>", "<unset>", age(o["metadata"].get("creationTimestamp")),
                    spec.get("volumeMode", "")]
        return [_col("Status"), _col("Volume"), _col("Capacity"), _col("Access Modes"), _col("StorageClass"),
                _col("VolumeAttributesClass"), dict(AGE_COL), _col("VolumeMode", priority=1)], pvc
    if p == "services":
        def svc(o):
            spec = o.get("spec") or {}
            ports = ",".join("%s/%s" % (x.get("port"), x.get("protocol", "TCP")) for x in spec.get("ports") or []) or "<none>"
            sel = ",".join("%s=%s" % kv for kv in sorted((spec.get("selector") or {}).items())) or "<none>"
            return [spec.get("type", ""), spec.get("clusterIP", ""), "<none>", ports,
                    age(o["metadata"].get("creationTimestamp")), sel]
        return [_col("Type"), _col("Cluster-IP"), _col("External-IP"), _col("Port(s)"), dict(AGE_COL),
                _col("Selector", priority=1)], svc
    if p == "events":
        def ev(o):
            io = o.get("involvedObject") or {}
            return [age(o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp")),
                    o.get("type", ""), o.get("reason", ""), "%s/%s" % ((io.get("kind") or "").lower(), io.get("name", "")),
                    o.get("message", "")]
        return [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")], ev
    if rt.crd is not None and rt.crd.printer_columns:
        pcs = rt.crd.printer_columns

        def crcells(o):
            out = []
            for c in pcs:
                vals = jsonpath(o, c["jsonPath"])
                if not vals:
                    out.append(None)
                elif c.get("type") == "date":
                    out.append(age(vals[0]) if isinstance(vals[0], str) else None)
                else:
                    out.append(vals[0])
            return out
        return [_col(c["name"], c.get("type", "string") if c.get("type") != "date" else "date",
                     c.get("priority", 0), c.get("format", "")) for c in pcs], crcells
    return [dict(AGE_COL)], lambda o: [age(o["metadata"].get("creationTimestamp"))]


def partial(obj):
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(rt, objs, rv, include="Metadata", cont=None, remaining=None, with_columns=True):
    cols, cells = columns_and_cells(rt)
    rows = []
    for o in objs:
        row = {"cells": [o["metadata"].get("name")] + cells(o)}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = partial(o)
        rows.append(row)
    md = {"resourceVersion": rv}
    if cont:
        md["continue"] = cont
    if remaining is not None:
        md["remainingItemCount"] = remaining
    t = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md, "rows": rows}
    t["columnDefinitions"] = [dict(NAME_COL)] + cols if with_columns else []
    return t
