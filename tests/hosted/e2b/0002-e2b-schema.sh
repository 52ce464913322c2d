#!/usr/bin/env bash
# The fake's field tables against E2B's own schemas as its npm SDK ships them: every envd
# message field (JSON name and kind) against the SDK's embedded process.proto and
# filesystem.proto descriptors, every REST field against the SDK's OpenAPI types. A table with
# a wrong name must fail the check (so the check can fail).
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

e2b_sdk
python3 "$E2B_HERE/fake-e2b.py" --schema >"$T/schema.json"
node "$E2B_HERE/schema-check.mjs" <"$T/schema.json" >"$T/results" 2>"$T/node.err"
expect_eq "$?" 0 "the schema check runs"
e2b_tap "$T/results"
[ "$e2b_results" -ge 60 ] && ok "it checked every table ($e2b_results)" ||
    { not_ok "it checked every table"; diag "only $e2b_results" "$(tail -5 "$T/node.err")"; }

# The same check on tables with one proto name, one proto kind and one REST name wrong.
python3 - "$T/schema.json" >"$T/bad.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
end = s["proto"]["process.ProcessEvent.EndEvent"]
end["exit_code"] = end.pop("exitCode")
s["proto"]["filesystem.EntryInfo"]["size"] = "uint32"
s["rest"]["api"]["Sandbox"].append("sandboxId")
json.dump(s, sys.stdout)
PY
node "$E2B_HERE/schema-check.mjs" <"$T/bad.json" >"$T/bad" 2>&1
for what in process.ProcessEvent.EndEvent filesystem.EntryInfo "api Sandbox:"; do
    if grep -F "\"$what" "$T/bad" | grep -q '"ok":false'; then ok "a wrong table for $what fails the check"
    else not_ok "a wrong table for $what fails the check"; diag "$(grep -F "$what" "$T/bad")"; fi
done
done_testing
