"""Label and field selectors, parsed as apimachinery parses them."""
import re

from .util import bad_request

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class Requirement:
    def __init__(self, key, op, values):
        self.key = key
        self.op = op  # "=", "!=", "in", "notin", "exists", "!"
        self.values = values

    def matches(self, labels):
        has = self.key in labels
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not has or labels[self.key] not in self.values
        return False


def _split_top(s):
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _check_key(key, sel):
    if not _KEY.match(key) or len(key.split("/")[-1]) > 63:
        raise bad_request('unable to parse requirement: invalid label key "%s": name part must consist of alphanumeric '
                          "characters, '-', '_' or '.', and must start and end with an alphanumeric character" % key)


def _check_value(v):
    if len(v) > 63 or not _VALUE.match(v):
        raise bad_request('unable to parse requirement: values[0]: Invalid value: "%s": a valid label must be an empty '
                          "string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                          "an alphanumeric character" % v)


def parse_label_selector(s):
    """Parse a labelSelector query value into a list of Requirements (all must match)."""
    reqs = []
    if not s:
        return reqs
    for part in _split_top(s):
        m = re.match(r"^([^\s!=()]+)\s+(in|notin)\s+\((.*)\)$", part)
        if m:
            key, op = m.group(1), m.group(2)
            _check_key(key, s)
            vals = set(v.strip() for v in m.group(3).split(",") if v.strip())
            for v in vals:
                _check_value(v)
            reqs.append(Requirement(key, op, vals))
            continue
        m = re.match(r"^([^\s!=]+)\s*(==|=|!=)\s*(.*)$", part)
        if m:
            key, op, val = m.group(1), m.group(2), m.group(3).strip()
            _check_key(key, s)
            _check_value(val)
            reqs.append(Requirement(key, "!=" if op == "!=" else "=", {val}))
            continue
        if part.startswith("!"):
            key = part[1:].strip()
            _check_key(key, s)
            reqs.append(Requirement(key, "!", set()))
            continue
        _check_key(part, s)
        reqs.append(Requirement(part, "exists", set()))
    return reqs


def labels_match(reqs, labels):
    labels = labels or {}
    for r in reqs:
        if not r.matches(labels):
            return False
    return True


def selector_from_match(sel):
    """A metav1.LabelSelector (matchLabels/matchExpressions) as Requirements."""
    reqs = []
    for k, v in ((sel or {}).get("matchLabels") or {}).items():
        reqs.append(Requirement(k, "=", {v}))
    for e in (sel or {}).get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}[e["operator"]]
        reqs.append(Requirement(e["key"], op, set(e.get("values") or [])))
    return reqs


def parse_field_selector(s, allowed, kind_plural, core):
    """Parse fieldSelector into [(path, op, value)]; op is "=" or "!="."""
    out = []
    if not s:
        return out
    for part in _split_top(s):
        m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", part)
        if not m:
            raise bad_request('invalid selector: \'%s\'; can\'t understand \'%s\'' % (s, part))
        path, op, val = m.group(1).strip(), m.group(2), m.group(3).strip()
        if path not in allowed:
            if core:
                raise bad_request('field label not supported: %s' % path)
            raise bad_request('"%s" is not a known field selector: only "metadata.name", "metadata.namespace"' % path)
        out.append((path, "!=" if op == "!=" else "=", val))
    return out


def field_value(obj, path):
    cur = obj
    for p in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(reqs, obj):
    for path, op, val in reqs:
        got = field_value(obj, path)
        if (got == val) != (op == "="):
            return False
    return True
