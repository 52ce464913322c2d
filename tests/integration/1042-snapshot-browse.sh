#!/usr/bin/env bash
# Browsing snapshots in the store without restoring them: sbx snapshot ls-files REF [PATH],
# cat REF PATH and diff REF REF (added, removed and changed paths with their modes); paths that
# climb out are refused, and a file's escape sequences reach a terminal escaped.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

id=$("$SBX" sandbox create --isolation none 2>/dev/null)
"$SBX" sandbox exec "$id" -- sh -c 'mkdir -p d/e && echo one > d/e/f && echo two > g &&
    chmod 755 g && ln -s g link && printf "\033[31mred\n" > esc' || not_ok "files made"
r1=$("$SBX" sandbox snapshot "$id")
"$SBX" sandbox exec "$id" -- sh -c 'echo three > d/e/f && rm g && echo new > h &&
    chmod 700 d && ln -s d link2'
r2=$("$SBX" sandbox snapshot "$id")
[ -n "$r1" ] && [ -n "$r2" ] && ok "two snapshots" || not_ok "two snapshots"

run "$SBX" snapshot ls-files "$r1"
expect_rc 0 "ls-files"
cat >"$T/want" <<EOF
drwxr-xr-x             -  d/
drwxr-xr-x             -  d/e/
-rw-r--r--             4  d/e/f
-rw-r--r--             9  esc
-rwxr-xr-x             4  g
lrwxrwxrwx             -  link -> g
EOF
diff -u "$T/want" "$T/out" >"$T/d" && ok "every entry with its mode, size and target" || { not_ok "every entry with its mode, size and target"; diag "$(cat "$T/d")"; }
run "$SBX" snapshot ls-files "${r1:7:12}" d/e
expect_eq "$(awk '{print $3}' "$T/out" | tr '\n' ' ')" "d/e/ d/e/f " "ls-files under a PATH, by a 12-digit prefix"
run "$SBX" snapshot ls-files --json "$r1" d/e/f
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d==[{"path":"d/e/f","type":"file","mode":420,"size":4,"sha256":d[0]["sha256"]}] and len(d[0]["sha256"])==64' "$T/out" &&
    ok "ls-files --json" || { not_ok "ls-files --json"; diag "$(cat "$T/out")"; }
run "$SBX" snapshot ls-files "$r1" nope
expect_rc 1 "ls-files of a path the snapshot lacks fails"

run "$SBX" snapshot cat "$r1" d/e/f
expect_eq "$(cat "$T/out")" one "cat prints a file of the first snapshot"
run "$SBX" snapshot cat "$r2" d/e/f
expect_eq "$(cat "$T/out")" three "and of the second"
run "$SBX" snapshot cat "$r1" ../etc/passwd
expect_rc 1 "cat refuses a path with .."
expect_in "$T/err" "must not contain '..'" "saying why"
run "$SBX" snapshot cat "$r1" /etc/passwd
expect_rc 1 "cat refuses an absolute path"
run "$SBX" snapshot cat "$r1" d
expect_in "$T/err" "'d' is a directory" "cat of a directory says so"
run "$SBX" snapshot cat "$r1" link
expect_in "$T/err" "'link' is a symlink (to 'g')" "cat of a symlink names its target, never follows it"
run "$SBX" snapshot cat "$r1" esc
expect_eq "$(od -An -c "$T/out" | tr -s ' ')" " 033 [ 3 1 m r e d \n" "cat into a pipe: the bytes as they are"
on_tty "$T/tty" "$SBX" snapshot cat "$r1" esc
if grep -q $'\033\[31m' "$T/tty"; then not_ok "cat on a terminal escapes control characters"; else
    expect_in "$T/tty" '\x1b[31mred' "cat on a terminal escapes control characters"; fi
run "$SBX" snapshot cat "$r1"
expect_rc 2 "cat without a PATH is a usage error"
expect_in "$T/err" "Try 'sbx snapshot cat --help'." "pointing at cat's own help"

run "$SBX" snapshot diff "$r1" "$r2"
expect_rc 0 "diff"
cat >"$T/want" <<EOF
M  drwx------  d/  (mode drwxr-xr-x -> drwx------)
M  -rw-r--r--  d/e/f  (content)
D  -rwxr-xr-x  g
A  -rw-r--r--  h
A  lrwxrwxrwx  link2 -> d
EOF
diff -u "$T/want" "$T/out" >"$T/d" && ok "added, removed and changed paths with their modes" || { not_ok "added, removed and changed paths with their modes"; diag "$(cat "$T/d")"; }
run "$SBX" snapshot diff "$r2" "$r2"
expect_eq "$(cat "$T/out")" "" "a snapshot against itself: nothing"
run "$SBX" snapshot diff --json "$r1" "$r2"
python3 -c '
import json, sys
d = {x["path"]: x for x in json.load(open(sys.argv[1]))}
assert d["g"]["change"] == "removed" and d["h"]["change"] == "added"
assert d["d"]["old"]["mode"] == 0o755 and d["d"]["new"]["mode"] == 0o700
assert d["link2"]["new"]["target"] == "d"' "$T/out" && ok "diff --json" || { not_ok "diff --json"; diag "$(head -c 1500 "$T/out")"; }
run "$SBX" snapshot diff "$r1" sha256:0000000000000000
expect_rc 1 "diff against an unknown reference fails"
"$SBX" sandbox rm "$id" >/dev/null
done_testing
