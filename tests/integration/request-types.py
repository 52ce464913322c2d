"""Request bodies of the fake model server's log as a TypeScript file that types each body with
the OpenAI client library's request type for its path, so that `tsc` holds every field, its
type and its place to the types the library generates from the API's OpenAPI document (an
object literal with a field its type lacks is an error).

    python3 request-types.py LOG > bodies.ts
"""
import json
import sys

TYPES = {
    "/responses": ("ResponseCreateParamsStreaming", "ResponseCreateParamsNonStreaming",
                   "openai/resources/responses/responses"),
    "/chat/completions": ("ChatCompletionCreateParamsStreaming",
                          "ChatCompletionCreateParamsNonStreaming",
                          "openai/resources/chat/completions/completions"),
}

out = []
imports = set()
for n, line in enumerate(open(sys.argv[1])):
    req = json.loads(line)
    path = req["path"].split("?")[0]
    for suffix, (streaming, plain, module) in TYPES.items():
        if path.endswith(suffix):
            t = streaming if req["body"].get("stream") else plain
            imports.add((t, module))
            out.append("// %s\nexport const body%d: %s = %s;" % (path, n, t,
                                                                 json.dumps(req["body"], indent=1)))
for t, module in sorted(imports):
    print("import type { %s } from '%s';" % (t, module))
print("\n".join(out))
