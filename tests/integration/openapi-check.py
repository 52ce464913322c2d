"""Request bodies against the schemas of an OpenAPI document (the OpenAI API's openapi.json).

    python3 openapi-check.py SPEC LOG

LOG is the fake model server's request log (one {"path", "body"} per line). Each body is
validated with JSON Schema (draft 2020-12, as OpenAPI 3.1 uses) against the request schema of
its path (CreateResponse for /responses, CreateChatCompletionRequest for /chat/completions),
and every object in it is walked for fields that no matching branch of the schema declares (the
spec leaves additionalProperties open, so a misspelled or misplaced field would pass the
validator alone). Prints one line per body: "ok PATH" or "bad PATH: what", and exits 1 when
any body is bad.
"""
import json
import sys

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SCHEMAS = {"/responses": "CreateResponse", "/chat/completions": "CreateChatCompletionRequest"}


def main():
    spec = json.load(open(sys.argv[1]))
    resource = Resource.from_contents(spec, default_specification=DRAFT202012)
    registry = Registry().with_resource("spec", resource)
    bad = 0
    for line in open(sys.argv[2]):
        req = json.loads(line)
        path = req["path"].split("?")[0]
        name = next((v for k, v in SCHEMAS.items() if path.endswith(k)), None)
        if not name:
            continue
        schema = {"$ref": "spec#/components/schemas/" + name}
        validator = jsonschema.Draft202012Validator(schema, registry=registry)
        errors = ["%s: %s" % ("/".join(map(str, e.absolute_path)) or "$", e.message[:300])
                  for e in validator.iter_errors(req["body"])]
        walker = Walker(spec, registry)
        walker.walk(req["body"], "/components/schemas/" + name, "$")
        problems = errors + ["unknown field " + u for u in walker.unknown]
        if problems:
            bad += 1
            print("bad %s (%s): %s" % (path, name, "; ".join(problems)))
        else:
            print("ok %s (%s)" % (path, name))
    sys.exit(1 if bad else 0)


class Walker:
    """Walks a value along the spec's schemas, each known by its JSON pointer in the spec (so
    that the refs inside resolve against the whole document)."""

    def __init__(self, spec, registry):
        self.spec = spec
        self.registry = registry
        self.unknown = []

    def node(self, ptr):
        node = self.spec
        for part in ptr.strip("/").split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            node = node[int(key)] if isinstance(node, list) else node[key]
        return node

    def resolve(self, ptr):
        node = self.node(ptr)
        while isinstance(node, dict) and "$ref" in node:
            ptr = node["$ref"].split("#", 1)[1]
            node = self.node(ptr)
        return ptr, node

    def valid(self, value, ptr):
        v = jsonschema.Draft202012Validator({"$ref": "spec#" + ptr}, registry=self.registry)
        return v.is_valid(value)

    def branches(self, value, ptr):
        """The object schemas that describe value: ptr's own and its allOf parts, plus the
        anyOf/oneOf branches value validates against; as (pointer, schema) pairs."""
        ptr, schema = self.resolve(ptr)
        if not isinstance(schema, dict):
            return []
        out = [(ptr, schema)]
        for i, _ in enumerate(schema.get("allOf", [])):
            out += self.branches(value, "%s/allOf/%d" % (ptr, i))
        for key in ("anyOf", "oneOf"):
            for i, _ in enumerate(schema.get(key, [])):
                sub = "%s/%s/%d" % (ptr, key, i)
                if self.valid(value, sub):
                    out += self.branches(value, sub)
        return out

    def walk(self, value, ptr, where):
        parts = self.branches(value, ptr)
        if isinstance(value, dict):
            declared = {}
            open_ended = False
            for p, schema in parts:
                for k in schema.get("properties", {}):
                    declared[k] = "%s/properties/%s" % (p, k.replace("~", "~0").replace("/", "~1"))
                if schema.get("additionalProperties") not in (None, False):
                    open_ended = True
            if not declared:
                return  # a map (metadata) or a free-form object
            for k, v in value.items():
                if k in declared:
                    self.walk(v, declared[k], where + "." + k)
                elif not open_ended:
                    self.unknown.append(where + "." + k)
        elif isinstance(value, list):
            for p, schema in parts:
                if "items" in schema:
                    for i, v in enumerate(value):
                        self.walk(v, p + "/items", "%s[%d]" % (where, i))
                    break


if __name__ == "__main__":
    main()
