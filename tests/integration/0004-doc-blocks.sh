#!/usr/bin/env bash
# The command blocks of README.md, docs/guide.md and examples/*/README.md run as written.
#
# Convention: every ```sh block in those files has, on the line just before its opening fence,
# either
#   <!-- runnable -->  it runs as written from the top of a fresh checkout, offline (recordings
#                      via -m replay:..., no network, no API key), with `sbx` on PATH; or
#   <!-- template -->  it shows commands with placeholders (ID, FILE, $id, an API key), needs
#                      root, the network or an installed sbx, or is interactive. Its first
#                      line says so where a reader sees it: "# template: WHY".
# A block with neither fails this test, so nothing is skipped silently. Each runnable block runs
# under `bash -e -o pipefail`, bounded in time, in a fresh directory holding a copy of examples/
# (so what it writes never lands in the source tree), with HOME and the sandbox runtime and
# state directories private to this test, OPENAI_API_KEY unset and OPENAI_BASE_URL pointing at
# a closed port. Results name the file and the line of the block's opening fence.
#
# Every examples/* folder must also be a runnable agent: a README.md with at least one runnable
# block, an agent file and an offline recording (examples/c-api is a C program that needs a
# compiler: 0200-install builds and runs it, here it needs only its README). What the examples' recordings claim is checked here against what really ran.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

# remove_sandboxes: what a failed block left, so the next block starts clean.
remove_sandboxes() {
    local id
    for id in $(ls "$RUNBASE" 2>/dev/null); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    for id in $(ls "$SBX_STOPPED" 2>/dev/null); do "$SBX" sandbox rm "${id%.json}" >/dev/null 2>&1; done
    "$SBX" sandbox prune >/dev/null 2>&1
}

BLOCK_TIMEOUT=${SBX_DOC_BLOCK_TIMEOUT:-120}
cd "$SBX_SRCDIR" || exit 1

mkdir -p "$T/bin" "$T/home" "$T/blocks"
ln -s "$SBX" "$T/bin/sbx"
export PATH="$T/bin:$PATH" HOME="$T/home" OPENAI_BASE_URL=http://127.0.0.1:9/v1
unset OPENAI_API_KEY SBX_CONVERSATIONS

docs=(README.md docs/guide.md examples/*/README.md)

# Extract the blocks: one line per ```sh block in $T/blocks/index ("N<TAB>FILE:LINE<TAB>MARK"),
# its text in $T/blocks/N.sh.
python3 - "$T/blocks" "${docs[@]}" <<'PY'
import re, sys
out, files = sys.argv[1], sys.argv[2:]
n = 0
with open(out + "/index", "w") as index:
    for f in files:
        lines = open(f, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            indent, lang, start = m.group(1), m.group(2), i
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            i += 1
            if lang != "sh":
                continue
            prev = lines[start - 1].strip() if start > 0 else ""
            mark = {"<!-- runnable -->": "runnable", "<!-- template -->": "template"}.get(prev, "none")
            n += 1
            with open("%s/%d.sh" % (out, n), "w") as b:
                b.write("\n".join(body) + "\n")
            if mark == "template" and not (body and body[0].startswith("# template: ")):
                mark = "unexplained"
            index.write("%d\t%s:%d\t%s\n" % (n, f, start + 1, mark))
PY

runnable=0
while IFS=$'\t' read -r n where mark; do
    case "$mark" in
    template) continue ;;
    unexplained)
        not_ok "$where: template block says why on its first line"
        diag "start it with '# template: WHY' (placeholders, root, network, a model)"
        continue ;;
    none)
        not_ok "$where: sh block is marked runnable or template"
        diag "put <!-- runnable --> or <!-- template --> on the line before the fence"
        continue ;;
    esac
    runnable=$((runnable + 1))
    d="$T/run$n"
    mkdir "$d"
    cp -a "$SBX_SRCDIR/examples" "$d/examples"
    (cd "$d" && timeout -k 5 "$BLOCK_TIMEOUT" bash -e -o pipefail "$T/blocks/$n.sh") \
        </dev/null >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" = 0 ]; then ok "$where: runnable block runs"; else
        not_ok "$where: runnable block runs"
        diag "exit status $rc$([ "$rc" = 124 ] && echo " (timed out after ${BLOCK_TIMEOUT}s)")" \
            "block:" "$(cat "$T/blocks/$n.sh")" \
            "stdout: $(tail -c 2000 "$T/out")" "stderr: $(tail -c 2000 "$T/err")"
    fi
    # No block leaves a sandbox behind.
    left=$("$SBX" sandbox ps --all --json | tr -d ' \n')
    expect_eq "$left" "[]" "$where: no sandbox left"
    [ "$left" = "[]" ] || remove_sandboxes
done <"$T/blocks/index"
[ "$runnable" -gt 0 ] && ok "runnable blocks found: $runnable" || not_ok "runnable blocks found"

# --- every example is a runnable agent with a README and an offline recording ---
for ex in examples/*/; do
    ex=${ex%/}
    if [ "$ex" = examples/c-api ]; then
        [ -f "$ex/README.md" ] && ok "$ex: README" || not_ok "$ex: README"
        continue
    fi
    if [ -f "$ex/README.md" ] && grep -qx '<!-- runnable -->' "$ex/README.md"; then
        ok "$ex: README with a runnable block"
    else not_ok "$ex: README with a runnable block"; fi
    if ls "$ex"/agent*.yaml >/dev/null 2>&1; then ok "$ex: agent file"; else not_ok "$ex: agent file"; fi
    if ls "$ex"/*.jsonl >/dev/null 2>&1; then ok "$ex: recording"; else not_ok "$ex: recording"; fi
done

# --- the recordings answer their own questions with what really ran ---
# run_json EXAMPLE PROMPT: replay EXAMPLE's run.jsonl with --json; events in $T/ev.
run_json() {
    (cd "$SBX_SRCDIR" && timeout -k 5 "$BLOCK_TIMEOUT" "$SBX" run --json -m "replay:examples/$1/run.jsonl" \
        -a "examples/$1/agent.yaml" "$2") >"$T/ev" 2>"$T/err"
    rc=$?
}
# tool_out PATTERN DESC: some tool output of the last run_json holds PATTERN.
tool_out() {
    if python3 - "$T/ev" "$1" <<'PY'; then ok "$2"; else not_ok "$2"; diag "$(tail -c 3000 "$T/ev")"; fi
import json, sys
# PATTERN may hold \t and \" escapes; tool outputs are compared decoded.
want = sys.argv[2].encode().decode("unicode_escape")
for line in open(sys.argv[1]):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if ev.get("type") != "tool_output":
        continue
    out = ev.get("item", {}).get("output", "")
    if want in (out if isinstance(out, str) else json.dumps(out)):
        sys.exit(0)
sys.exit(1)
PY
}
# final PATTERN DESC: the final answer of the last run_json holds PATTERN.
final() {
    if grep '"final' "$T/ev" | grep -qF -- "$1"; then ok "$2"; else not_ok "$2"; diag "$(tail -c 2000 "$T/ev")"; fi
}

run_json shopping "I bought 3 notebooks at 2.49 and 2 pens at 1.15. What do I pay with 8% tax?"
expect_rc 0 "shopping: replays"
tool_out '9.77' "shopping: the calculator really gives the subtotal"
tool_out '10.5516' "shopping: the calculator really gives the total with tax"
final 'you pay 10.55' "shopping: the answer is the total with tax"

run_json dataroom "What was Q3 2025 revenue, how does it compare with Q3 2024, and can the customer leave after an acquisition?"
expect_rc 0 "dataroom: replays"
tool_out 'Revenue (USD m)   | 41.2    | 36.8' "dataroom: the financials really say so"
tool_out 'terminate within 60 days of an acquisition' "dataroom: the contract really says so"
tool_out '12.0' "dataroom: the growth is really computed"
final 'up 12.0% from USD 36.8m' "dataroom: the answer gives revenue and growth"
final 'terminate the MSA within 60 days' "dataroom: the answer covers change of control"

run_json repo-code-review "Review the code in repo/ as task.md says."
expect_rc 0 "repo-code-review: replays"
tool_out '19\t    subprocess.run(\"convert %s' "repo-code-review: line 19 is the shell command"
tool_out '/srv/files/../../etc/passwd' "repo-code-review: the traversal is really shown"
tool_out '/srv/files/../../etc/passwd -> /etc/passwd' "repo-code-review: it is really /etc/passwd"
tool_out '/srv/files-old/x True' "repo-code-review: the prefix match is really shown"
final 'repo/fileserve.py:19' "repo-code-review: the answer cites file and line"

cd "$T" || exit 1
timeout -k 5 "$BLOCK_TIMEOUT" "$SBX" run --json -m "replay:$SBX_SRCDIR/examples/approval/run.jsonl" --state "$T/rs.json" \
    -a "$SBX_SRCDIR/examples/approval/agent.yaml" "Tidy up the workspace." >"$T/ev" 2>"$T/err"
rc=$?
expect_rc 4 "approval: the replay stops for approval"
tool_out './build:\nstats.o' "approval: ls -R really shows the build output"
timeout -k 5 "$BLOCK_TIMEOUT" "$SBX" run --json --resume "$T/rs.json" --approve call_ap2 \
    -a "$SBX_SRCDIR/examples/approval/agent.yaml" \
    -m "replay:$SBX_SRCDIR/examples/approval/resume.jsonl" >"$T/ev" 2>"$T/err"
rc=$?
expect_rc 0 "approval: the approved run goes on"
tool_out 'Output:\nnotes.txt\n' "approval: the approved rm really ran: only notes.txt is left"
final 'notes.txt is kept' "approval: the answer says so"
"$SBX" state rm "$T/rs.json" >/dev/null 2>&1

export SBX_CONVERSATIONS="$T/conv.db"
for q in "1 What is the capital of France?" "2 How many people live there?"; do
    timeout -k 5 "$BLOCK_TIMEOUT" "$SBX" run --conversation trip -m "replay:$SBX_SRCDIR/examples/conversation/trip${q%% *}.jsonl" \
        -a "$SBX_SRCDIR/examples/conversation/agent.yaml" "${q#* }" >"$T/out" 2>"$T/err"
    rc=$?
    expect_rc 0 "conversation: run ${q%% *} replays"
done
"$SBX" conversation show --json trip >"$T/out" 2>"$T/err"
python3 - "$T/out" <<'PY' && ok "conversation: the second run continued the first" || { not_ok "conversation: the second run continued the first"; diag "$(cat "$T/out")"; }
import json, sys
text = json.dumps(json.load(open(sys.argv[1])))
want = ["What is the capital of France?", "Paris.", "How many people live there?", "2.1 million"]
pos = [text.find(w) for w in want]
sys.exit(0 if -1 not in pos and pos == sorted(pos) else 1)
PY

done_testing
