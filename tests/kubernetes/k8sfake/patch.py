"""The three PATCH flavours: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic
merge patch (merge keys of the core types, $patch / $retainKeys / $deleteFromPrimitiveList
directives; $setElementOrder is accepted and ignored)."""
import copy
import json

from .util import APIError, bad_request

# Lists merged by key in a strategic merge patch, by field name (the core types' patchMergeKey).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "readinessGates": "conditionType",
    "conditions": "type",
    "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
# Primitive lists merged as sets.
MERGE_SETS = {"finalizers"}


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    else:
        target = dict(target)
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge_patch(target.get(k), v)
    return target


def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request('the server rejected our request due to an error in our request: invalid JSON pointer "%s"' % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts):
    cur = doc
    for p in parts:
        if isinstance(cur, list):
            cur = cur[int(p)]
        elif isinstance(cur, dict):
            cur = cur[p]
        else:
            raise KeyError(p)
    return cur


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for op in ops:
        try:
            doc = _apply_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise APIError(422, "Invalid", "the server rejected our request due to an error in our request: %s" %
                           ("doc is missing path: \"%s\": missing value" % op.get("path", "") if isinstance(e, (KeyError, IndexError)) else e))
    return doc


def _apply_op(doc, op):
    kind = op.get("op")
    parts = _ptr(op.get("path", ""))
    if kind == "test":
        if _walk(doc, parts) != op.get("value"):
            raise ValueError("testing value %s failed" % op.get("path"))
        return doc
    if kind in ("move", "copy"):
        src = _ptr(op["from"])
        val = copy.deepcopy(_walk(doc, src))
        if kind == "move":
            doc = _apply_op(doc, {"op": "remove", "path": op["from"]})
        return _apply_op(doc, {"op": "add", "path": op["path"], "value": val})
    if not parts:
        if kind in ("add", "replace"):
            return copy.deepcopy(op["value"])
        raise ValueError("cannot remove the root")
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if kind == "add":
        if isinstance(parent, list):
            if last == "-":
                parent.append(copy.deepcopy(op["value"]))
            else:
                i = int(last)
                if i > len(parent):
                    raise IndexError(last)
                parent.insert(i, copy.deepcopy(op["value"]))
        else:
            parent[last] = copy.deepcopy(op["value"])
    elif kind == "remove":
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    elif kind == "replace":
        if isinstance(parent, list):
            parent[int(last)] = copy.deepcopy(op["value"])
        else:
            if last not in parent:
                raise KeyError(last)
            parent[last] = copy.deepcopy(op["value"])
    else:
        raise ValueError('unexpected operation "%s"' % kind)
    return doc


def strategic_merge(target, patch, field=None):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    out = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            if isinstance(out.get(name), list):
                out[name] = [x for x in out[name] if x not in v]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            merged = strategic_merge(out.get(k), v, k)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = _merge_list(out.get(k), v, k)
        else:
            out[k] = copy.deepcopy(v)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(cur, patch, field):
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and x.get("$patch") == "replace")]
    if field in MERGE_SETS:
        out = list(cur or [])
        for x in patch:
            if x not in out:
                out.append(x)
        return out
    key = MERGE_KEYS.get(field)
    if key is None or not isinstance(cur, list):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and x.get("$patch") == "delete")]
    out = [copy.deepcopy(x) for x in cur]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(copy.deepcopy(item))
            continue
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(strategic_merge({}, item))
        else:
            out[idx] = strategic_merge(out[idx], item)
    return out


PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+cbor": "apply",
}


def apply_patch(kind, current, body, custom):
    """Apply a PATCH body of the given kind ("merge", "json", "strategic") to current."""
    try:
        patch = json.loads(body or b"null")
    except ValueError as e:
        raise bad_request("error decoding patch: %s" % e)
    if kind == "merge":
        if not isinstance(patch, dict):
            raise bad_request("json: cannot unmarshal %s into Go value of type map[string]interface {}" % type(patch).__name__)
        return merge_patch(current, patch)
    if kind == "json":
        return json_patch(current, patch)
    if kind == "strategic":
        if custom:
            raise APIError(415, "UnsupportedMediaType",
                           'the body of the request was in an unknown format - accepted media types include: '
                           'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml')
        if not isinstance(patch, dict):
            raise bad_request("unable to find api field in struct for the patch")
        return strategic_merge(current, patch)
    raise APIError(415, "UnsupportedMediaType", "server-side apply is not supported by this fake API server; "
                   "use a merge, JSON or strategic merge patch")
