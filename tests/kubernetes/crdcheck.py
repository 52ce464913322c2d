#!/usr/bin/env python3
"""Check an object against agent-sandbox's v1beta1 CRD schemas (vendored in crds/), as an API
server with those CRDs installed would: defaulting, unknown fields, types, required fields,
enums, patterns.

usage: crdcheck.py [--allow-unknown] [--old OLDFILE] [--print] KIND FILE
  KIND  Sandbox, SandboxTemplate, SandboxWarmPool or SandboxClaim
  FILE  a JSON object ("-" for standard input)
Exit status 0 when the object is valid; 1 with the server's message on standard error when not
(unknown fields count as errors unless --allow-unknown, as fieldValidation=Strict); 2 on usage
errors. --print writes the defaulted object to standard output.
"""
import argparse
import json
import os
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from k8sfake import schema  # noqa: E402


def load(path):
    if path == "-":
        return json.load(sys.stdin)
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description="validate an object against agent-sandbox's CRD schemas")
    ap.add_argument("--allow-unknown", action="store_true", help="drop unknown fields instead of failing")
    ap.add_argument("--old", help="the object before an update (for transition rules)")
    ap.add_argument("--print", action="store_true", help="print the defaulted object")
    ap.add_argument("kind")
    ap.add_argument("file")
    a = ap.parse_args()
    crds = schema.load_crds()
    crd = crds.get(a.kind)
    if crd is None:
        print("crdcheck: unknown kind '%s' (one of: %s)" % (a.kind, ", ".join(sorted(crds))), file=sys.stderr)
        return 2
    try:
        obj = load(a.file)
        old = load(a.old) if a.old else None
    except (OSError, ValueError) as e:
        print("crdcheck: cannot read '%s': %s" % (a.file, e), file=sys.stderr)
        return 2
    if not isinstance(obj, dict):
        print("crdcheck: '%s' is not a JSON object" % a.file, file=sys.stderr)
        return 1
    errs, unknown = schema.check_custom_object(crd, obj, old)
    name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName") or ""
    bad = False
    if unknown and not a.allow_unknown:
        print('%s in version "%s" cannot be handled as a %s: strict decoding error: %s'
              % (crd.kind, crd.version, crd.kind, ", ".join('unknown field "%s"' % u for u in unknown)),
              file=sys.stderr)
        bad = True
    if errs:
        print('%s.%s "%s" is invalid: %s' % (crd.kind, crd.group, name, schema.aggregate(errs)), file=sys.stderr)
        bad = True
    if a.print:
        json.dump(obj, sys.stdout, indent=2, sort_keys=True)
        print()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
