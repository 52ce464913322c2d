"""Structural-schema handling of custom resources, as an API server with the CRDs installed does it:
defaulting, pruning of unknown fields, validation with field paths and the server's wording.

Supported: type, nullable, properties, additionalProperties, items, required, enum, pattern,
minLength/maxLength, minimum/maximum (and the exclusive forms), minItems/maxItems, format
(int32, int64, date-time), anyOf/allOf/oneOf/not for value checks, x-kubernetes-int-or-string,
x-kubernetes-preserve-unknown-fields, x-kubernetes-embedded-resource, list-type set/map
uniqueness, and the CEL rules listed in KNOWN_RULES (CEL itself is not evaluated).
"""
import copy
import json
import os
import re

CRD_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "crds")

# The one x-kubernetes-validations rule agent-sandbox v0.5.x carries, evaluated as Python. A rule
# not listed here is reported by unsupported_rules() and not enforced.
_VCT_RULE = ("has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && "
             "(!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)")


def _vct_immutable(new, old):
    return new.get("volumeClaimTemplates") == old.get("volumeClaimTemplates")


KNOWN_RULES = {_VCT_RULE: _vct_immutable}


def go_quote(s):
    """Go's %q of a string (close enough for ASCII and UTF-8 text)."""
    return json.dumps(s, ensure_ascii=False)


def render_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return go_quote(v)
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    return go_quote(type_name(v))


def type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


class FieldError:
    """One entry of a field.ErrorList: type is the StatusCause type."""

    def __init__(self, kind, field, detail="", value=None, has_value=False):
        self.kind = kind
        self.field = field
        self.detail = detail
        self.value = value
        self.has_value = has_value

    TITLES = {
        "FieldValueRequired": "Required value",
        "FieldValueInvalid": "Invalid value",
        "FieldValueTypeInvalid": "Invalid value",
        "FieldValueNotSupported": "Unsupported value",
        "FieldValueDuplicate": "Duplicate value",
        "FieldValueForbidden": "Forbidden",
        "FieldValueTooLong": "Too long",
        "FieldValueTooMany": "Too many",
        "FieldValueNotFound": "Not found",
    }

    def body(self):
        title = self.TITLES[self.kind]
        if self.has_value:
            s = "%s: %s" % (title, render_value(self.value))
        else:
            s = title
        if self.detail:
            s += ": " + self.detail
        return s

    def __str__(self):
        return "%s: %s" % (self.field, self.body()) if self.field else self.body()

    def cause(self):
        return {"reason": self.kind, "message": self.body(), "field": self.field}


def aggregate(errors):
    if len(errors) == 1:
        return str(errors[0])
    return "[" + ", ".join(str(e) for e in errors) + "]"


def _join(path, key):
    return key if not path else path + "." + key


_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


class Schema:
    """A structural schema (openAPIV3Schema) and the operations the API server runs with it."""

    def __init__(self, root):
        self.root = root

    # -- defaulting -------------------------------------------------------------------------
    def apply_defaults(self, obj):
        self._default(self.root, obj)
        return obj

    def _default(self, s, v):
        if isinstance(v, dict):
            props = s.get("properties") or {}
            for k, ps in props.items():
                if k not in v and "default" in ps:
                    v[k] = copy.deepcopy(ps["default"])
            for k, sub in list(v.items()):
                if k in props:
                    self._default(props[k], sub)
                elif isinstance(s.get("additionalProperties"), dict):
                    self._default(s["additionalProperties"], sub)
        elif isinstance(v, list) and isinstance(s.get("items"), dict):
            for item in v:
                self._default(s["items"], item)

    # -- pruning ----------------------------------------------------------------------------
    def prune(self, obj):
        """Drop fields the schema does not declare; returns their paths (for fieldValidation)."""
        unknown = []
        self._prune(self.root, obj, "", unknown, top=True)
        return unknown

    def _prune(self, s, v, path, unknown, top=False):
        if s.get("x-kubernetes-preserve-unknown-fields") and not s.get("properties"):
            return
        if isinstance(v, dict):
            props = s.get("properties")
            addl = s.get("additionalProperties")
            embedded = s.get("x-kubernetes-embedded-resource")
            for k in list(v.keys()):
                if top and k in ("apiVersion", "kind", "metadata"):
                    continue
                if embedded and k in ("apiVersion", "kind", "metadata"):
                    continue
                if props is not None and k in props:
                    self._prune(props[k], v[k], _join(path, k), unknown)
                elif isinstance(addl, dict):
                    self._prune(addl, v[k], _join(path, k), unknown)
                elif addl is True or s.get("x-kubernetes-preserve-unknown-fields"):
                    continue
                elif props is not None or addl is False:
                    unknown.append(_join(path, k))
                    del v[k]
        elif isinstance(v, list) and isinstance(s.get("items"), dict):
            for i, item in enumerate(v):
                self._prune(s["items"], item, "%s[%d]" % (path, i), unknown)

    # -- validation -------------------------------------------------------------------------
    def validate(self, obj, old=None):
        errs = []
        self._check(self.root, obj, "", errs, old, top=True)
        return errs

    def _type_ok(self, s, v):
        t = s.get("type")
        if v is None:
            return bool(s.get("nullable")) or not t
        if s.get("x-kubernetes-int-or-string"):
            return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)
        if not t:
            return True
        if t == "object":
            return isinstance(v, dict)
        if t == "array":
            return isinstance(v, list)
        if t == "string":
            return isinstance(v, str)
        if t == "boolean":
            return isinstance(v, bool)
        if t == "integer":
            return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
        if t == "number":
            return isinstance(v, (int, float)) and not isinstance(v, bool)
        return True

    def _check(self, s, v, path, errs, old, top=False):
        shown = path or "<root>"
        if not self._type_ok(s, v):
            if v is None:
                errs.append(FieldError("FieldValueRequired", path, "", None))
                return
            t = "integer or string" if s.get("x-kubernetes-int-or-string") else s.get("type")
            errs.append(FieldError("FieldValueTypeInvalid", path,
                                   "%s in body must be of type %s: %s" % (shown, t, go_quote(type_name(v))),
                                   type_name(v), True))
            return
        if v is None:
            return
        self._check_value(s, v, path, shown, errs)
        for key in ("allOf",):
            for sub in s.get(key) or []:
                self._check_value(sub, v, path, shown, errs)
        if s.get("anyOf") and not s.get("x-kubernetes-int-or-string"):
            if not any(self._value_ok(sub, v) for sub in s["anyOf"]):
                errs.append(FieldError("FieldValueInvalid", path, "%s in body must match at least one schema in anyOf" % shown, v, True))
        if s.get("oneOf"):
            n = sum(1 for sub in s["oneOf"] if self._value_ok(sub, v))
            if n != 1:
                errs.append(FieldError("FieldValueInvalid", path, "%s in body must validate one and only one schema (oneOf)" % shown, v, True))
        if isinstance(s.get("not"), dict) and self._value_ok(s["not"], v):
            errs.append(FieldError("FieldValueInvalid", path, "%s in body must not validate the schema (not)" % shown, v, True))
        if isinstance(v, dict):
            self._check_object(s, v, path, errs, old, top)
        elif isinstance(v, list):
            self._check_array(s, v, path, errs, old)
        for rule in s.get("x-kubernetes-validations") or []:
            fn = KNOWN_RULES.get(rule.get("rule"))
            if fn is not None and isinstance(old, dict) and isinstance(v, dict) and not fn(v, old):
                errs.append(FieldError("FieldValueInvalid", path, rule.get("message") or ("failed rule: " + rule["rule"]),
                                       "object", True))

    def _value_ok(self, s, v):
        if not self._type_ok(s, v):
            return False
        e = []
        self._check_value(s, v, "", "", e)
        if isinstance(v, dict):
            for r in s.get("required") or []:
                if r not in v:
                    return False
        return not e

    def _check_value(self, s, v, path, shown, errs):
        if "enum" in s and v not in s["enum"]:
            errs.append(FieldError("FieldValueNotSupported", path,
                                   "supported values: " + ", ".join(render_value(x) for x in s["enum"]), v, True))
        if isinstance(v, str):
            if "maxLength" in s and len(v) > s["maxLength"]:
                errs.append(FieldError("FieldValueTooLong", path, "may not be more than %d bytes" % s["maxLength"]))
            if "minLength" in s and len(v) < s["minLength"]:
                errs.append(FieldError("FieldValueInvalid", path,
                                       "%s in body should be at least %d chars long" % (shown, s["minLength"]), v, True))
            if "pattern" in s and not re.search(s["pattern"], v):
                errs.append(FieldError("FieldValueInvalid", path,
                                       "%s in body should match '%s'" % (shown, s["pattern"]), v, True))
            if s.get("format") == "date-time" and not _DATE_TIME.match(v):
                errs.append(FieldError("FieldValueInvalid", path,
                                       "%s in body must be of type date-time: %s" % (shown, go_quote(v)), v, True))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not isinstance(v, str):
            if "minimum" in s:
                if s.get("exclusiveMinimum") and v <= s["minimum"]:
                    errs.append(FieldError("FieldValueInvalid", path, "%s in body should be greater than %s" % (shown, s["minimum"]), v, True))
                elif v < s["minimum"]:
                    errs.append(FieldError("FieldValueInvalid", path,
                                           "%s in body should be greater than or equal to %s" % (shown, s["minimum"]), v, True))
            if "maximum" in s:
                if s.get("exclusiveMaximum") and v >= s["maximum"]:
                    errs.append(FieldError("FieldValueInvalid", path, "%s in body should be less than %s" % (shown, s["maximum"]), v, True))
                elif v > s["maximum"]:
                    errs.append(FieldError("FieldValueInvalid", path,
                                           "%s in body should be less than or equal to %s" % (shown, s["maximum"]), v, True))
            fmt = s.get("format")
            if fmt == "int32" and not -2 ** 31 <= v < 2 ** 31:
                errs.append(FieldError("FieldValueInvalid", path, "%s in body must be of type int32" % shown, v, True))
            if fmt == "int64" and not -2 ** 63 <= v < 2 ** 63:
                errs.append(FieldError("FieldValueInvalid", path, "%s in body must be of type int64" % shown, v, True))
        if isinstance(v, list):
            if "maxItems" in s and len(v) > s["maxItems"]:
                errs.append(FieldError("FieldValueTooMany", path, "must have at most %d items" % s["maxItems"]))
            if "minItems" in s and len(v) < s["minItems"]:
                errs.append(FieldError("FieldValueInvalid", path,
                                       "%s in body should have at least %d items" % (shown, s["minItems"]), len(v), True))

    def _check_object(self, s, v, path, errs, old, top):
        for r in s.get("required") or []:
            if r not in v:
                errs.append(FieldError("FieldValueRequired", _join(path, r)))
        props = s.get("properties") or {}
        addl = s.get("additionalProperties")
        for k, sub in v.items():
            if top and k in ("metadata",):
                continue
            oldsub = old.get(k) if isinstance(old, dict) else None
            if k in props:
                self._check(props[k], sub, _join(path, k), errs, oldsub)
            elif isinstance(addl, dict):
                self._check(addl, sub, _join(path, k), errs, oldsub)

    def _check_array(self, s, v, path, errs, old):
        items = s.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(v):
                self._check(items, item, "%s[%d]" % (path, i), errs, None)
        lt = s.get("x-kubernetes-list-type")
        if lt == "set":
            seen = []
            for i, item in enumerate(v):
                if item in seen:
                    errs.append(FieldError("FieldValueDuplicate", "%s[%d]" % (path, i), "", item, True))
                seen.append(item)
        elif lt == "map":
            keys = s.get("x-kubernetes-list-map-keys") or []
            seen = set()
            for i, item in enumerate(v):
                if not isinstance(item, dict):
                    continue
                k = tuple(json.dumps(item.get(x), sort_keys=True) for x in keys)
                if k in seen:
                    shown = {x: item.get(x) for x in keys if x in item}
                    errs.append(FieldError("FieldValueDuplicate", "%s[%d]" % (path, i), "", shown, True))
                seen.add(k)

    def unsupported_rules(self):
        out = []

        def walk(n):
            if isinstance(n, dict):
                for r in n.get("x-kubernetes-validations") or []:
                    if r.get("rule") not in KNOWN_RULES:
                        out.append(r.get("rule"))
                for x in n.values():
                    walk(x)
            elif isinstance(n, list):
                for x in n:
                    walk(x)

        walk(self.root)
        return out


class CRD:
    """One vendored CRD (crds/<plural>.<group>.json)."""

    def __init__(self, data):
        self.data = data
        self.group = data["group"]
        self.version = data["version"]
        self.names = data["names"]
        self.kind = data["names"]["kind"]
        self.plural = data["names"]["plural"]
        self.namespaced = data["scope"] == "Namespaced"
        self.subresources = data.get("subresources") or {}
        self.printer_columns = data.get("additionalPrinterColumns") or []
        self.schema = Schema(data["schema"])
        self.status_schema = (data["schema"].get("properties") or {}).get("status")

    @property
    def api_version(self):
        return self.group + "/" + self.version


def load_crds(directory=CRD_DIR):
    crds = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                crd = CRD(json.load(f))
            crds[crd.kind] = crd
    return crds


def check_custom_object(crd, obj, old=None, strict=False):
    """Default, prune and validate obj (modified in place) as the server would on create/update.

    Returns (field_errors, unknown_field_paths). With strict, unknown fields are not dropped from
    the returned list; the caller answers 400 for them as fieldValidation=Strict does.
    """
    errs = []
    if obj.get("apiVersion") != crd.api_version:
        errs.append(FieldError("FieldValueInvalid", "apiVersion", "must be %s" % crd.api_version,
                               obj.get("apiVersion"), True))
    if obj.get("kind") != crd.kind:
        errs.append(FieldError("FieldValueInvalid", "kind", "must be %s" % crd.kind, obj.get("kind"), True))
    unknown = crd.schema.prune(obj)
    crd.schema.apply_defaults(obj)
    errs.extend(crd.schema.validate(obj, old))
    return errs, unknown
