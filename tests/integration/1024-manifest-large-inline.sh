#!/usr/bin/env bash
# A manifest of 2000 inline files whose bytes add up to more than the session state's 8 MiB:
# create writes every file, the state records them by digest only (the workspace and its
# snapshots hold the bytes), and stop / start and resume from the state bring the same files
# back, with the ephemeral file written again from the bytes the state keeps of it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
state_field() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

python3 - "$T" <<'PY'
import json, os, sys
t = sys.argv[1]
line = '    printf("%d\\t%s\\n", x, "abc"); /* a comment */ \\\n'
entries = {}
for i in range(2000):
    body = ("marker-%d\n" % i) + (line * 200)[: 4300 + i % 7]
    path = "src/dir%d/file%d.c" % (i // 100, i)
    entries[path] = {"type": "file", "content": body}
    if i % 397 == 0:
        os.makedirs(os.path.dirname(os.path.join(t, "expect", path)), exist_ok=True)
        open(os.path.join(t, "expect", path), "w").write(body)
entries["src/dir0/file0.c"]["description"] = "the first file"
entries["run/note.txt"] = {"type": "file", "ephemeral": True, "content": "rebuilt on start\n"}
json.dump({"entries": entries}, open(os.path.join(t, "big.json"), "w"))
PY
total=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(len(e["content"]) for e in d["entries"].values()))' "$T/big.json")
[ "$total" -gt $((8 << 20)) ] && ok "the files add up to more than 8 MiB ($total bytes)" ||
    not_ok "the files add up to more than 8 MiB ($total bytes)"

check_files() { # DESC ID: the sampled files and the ephemeral one have their content
    local desc=$1 id=$2 bad="" f
    for f in $(cd "$T/expect" && find . -type f | sort); do
        "$SBX" sandbox exec "$id" -- cat "${f#./}" >"$T/got" 2>"$T/got.err"
        cmp -s "$T/got" "$T/expect/$f" || bad="$bad ${f#./}"
    done
    [ -z "$bad" ] && ok "$desc: sampled files have their content" ||
        { not_ok "$desc: sampled files have their content"; diag "differ:$bad" "$(cat "$T/got.err")"; }
    run "$SBX" sandbox exec "$id" -- sh -c 'cat run/note.txt; find src -type f | wc -l'
    expect_eq "$(cat "$T/out")" "rebuilt on start
2000" "$desc: the ephemeral file and all 2000 files are there"
}

run "$SBX" sandbox create --manifest "$T/big.json"
expect_rc 0 "create from the manifest"
id=$(cat "$T/out")
check_files "create" "$id"

st=$RUNBASE/$id/state.json
size=$(stat -c %s "$st")
[ "$size" -lt $((1 << 20)) ] && ok "state.json is small ($size bytes)" ||
    not_ok "state.json is small ($size bytes)"
expect_not_in "$st" "marker-1234" "no file body is in the state"
expect_in "$st" "rebuilt on start" "the ephemeral file's bytes are"
rec=$(python3 -c '
import hashlib, json, sys
s = json.load(open(sys.argv[1]))
e = s["manifest"]["entries"]["src/dir3/file345.c"]["content"]
m = json.load(open(sys.argv[2]))["entries"]["src/dir3/file345.c"]["content"].encode()
print(e["type"], e["digest"] == hashlib.sha256(m).hexdigest(), e["size"] == len(m))' "$st" "$T/big.json" 2>&1)
expect_eq "$rec" "sha256 True True" "a file is recorded by its sha256 and size"
digest=$(state_field "$st" 's["manifest_digest"]')

run "$SBX" sandbox state "$id"
expect_rc 0 "sandbox state"
cp "$T/out" "$T/state.json"
"$SBX" sandbox exec "$id" -- sh -c 'echo later > later.txt && rm run/note.txt'

run "$SBX" sandbox stop "$id"
expect_rc 0 "stop"
run "$SBX" sandbox start "$id"
expect_rc 0 "start after stop"
check_files "start" "$id"
run "$SBX" sandbox exec "$id" -- cat later.txt
expect_eq "$(cat "$T/out")" "later" "start: what was written after create is kept"
expect_eq "$(state_field "$RUNBASE/$id/state.json" 's["manifest_digest"]')" "$digest" \
    "start: the manifest digest is the one of the original manifest"
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "a snapshot of the started sandbox"
"$SBX" snapshot rm "$(cat "$T/out")" >/dev/null 2>&1

"$SBX" sandbox rm "$id" >/dev/null
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "resume of the removed sandbox from its state"
expect_eq "$(cat "$T/out")" "$id" "with the same id"
check_files "resume" "$id"
"$SBX" sandbox rm "$id" >/dev/null

# A manifest given by a user never names content by digest: the bytes must be there.
printf '{"entries": {"a.txt": {"type": "file", "content": {"type": "sha256", "digest": "%064d", "size": 1}}}}\n' 0 >"$T/digest.json"
run "$SBX" sandbox create --manifest "$T/digest.json"
expect_rc 1 "a manifest with content by digest is refused"
expect_in "$T/err" "unknown encoding 'sha256'" "saying why"
nothing_left "and nothing is created"

# The document itself has an explicit bound, 64 MiB, checked before it is read and named.
truncate -s $(((64 << 20) + 1)) "$T/huge.json"
run "$SBX" sandbox create --manifest "$T/huge.json"
expect_rc 1 "a manifest document over 64 MiB is refused"
expect_in "$T/err" "more than the manifest limit of 67108864 bytes (64 MiB)" "naming the limit"
nothing_left "and nothing is created"
python3 -c 'import sys; d = b"{\"entries\": {}}"; open(sys.argv[1], "wb").write(d + b" " * ((64 << 20) - len(d)))' "$T/huge.json"
run "$SBX" manifest check "$T/huge.json"
expect_rc 0 "a document of exactly 64 MiB is read"
rm -f "$T/huge.json"

done_testing
