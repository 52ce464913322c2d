# Shared set-up of the run state tests (41xx: sbx run --state / --resume, sbx state). Source
# after lib.sh, model-lib.sh and sandbox-lib.sh.
#   mk OUT 'TURNS'      a fake-model script (model-lib.sh, tests/fake-model/turns.py) whose
#                       Responses turns report a fixed usage
#   outputs N           the output of the last tool call the model saw in request N (0-based)
#   sfield FILE EXPR    a field of a JSON file (Python expression over s)
#   live                how many sandboxes of this test are live
#   the_id              the id of the (first) live sandbox
#   reseal FILE STMTS   edit a run state (Python statements over s) and recompute its digest
cat >"$T/mk-extra.py" <<'EOF'
USAGE = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}
EOF
MK_EXTRA="$T/mk-extra.py"
outputs() { fake_query "(lambda i: i[-1].get('output') if 'input' in reqs[$1]['body'] else reqs[$1]['body']['messages'][-1].get('content'))(reqs[$1]['body'].get('input'))"; }
sfield() {
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
live() { ls "$RUNBASE" 2>/dev/null | wc -l; }
the_id() { ls "$RUNBASE" 2>/dev/null | head -n1; }
# reseal FILE 'PYTHON STATEMENTS over s': edit a run state file the way anyone who can write it
# could, and recompute its digest (the documented canonical form: keys sorted, compact, UTF-8).
reseal() {
    python3 - "$1" "$2" <<'PY'
import hashlib, json, sys
p = sys.argv[1]
s = json.load(open(p))
exec(sys.argv[2])
s.pop("digest", None)
canon = json.dumps(s, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
s["digest"] = "sha256:" + hashlib.sha256(canon.encode()).hexdigest()
json.dump(s, open(p, "w"), indent=2, sort_keys=True, ensure_ascii=False)
PY
}
