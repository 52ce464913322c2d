#!/usr/bin/env bash
# sbx sandbox cp copies directories both ways (with or without -r, as docker cp): the tree,
# permission bits, holes and symlinks that stay inside it; setuid and setgid bits never survive
# a copy, and no symlink is followed or made pointing out of the copied tree.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

id=$("$SBX" sandbox create --name cpt)
[ -n "$id" ] && ok "a sandbox" || not_ok "a sandbox"
src="$T/src"
mkdir -p "$src/a/b" "$src/ro"
echo one >"$src/a/b/f"
echo run >"$src/tool" && chmod 4755 "$src/tool"
chmod 750 "$src/a" && echo x >"$src/ro/x" && chmod 555 "$src/ro"
ln -s a/b/f "$src/inside"
ln -s /etc/passwd "$src/outside"
truncate -s 8M "$src/sparse"

run "$SBX" sandbox cp -r "$src" cpt:
expect_rc 0 "cp -r HOSTDIR NAME: copies the directory in"
expect_in "$T/err" "'src/outside' skipped: a symlink out of the copied directory" "a link out is left out, said so"
run "$SBX" sandbox exec cpt -- sh -c 'cd src && stat -c "%n %a %F" a a/b/f tool ro inside sparse && readlink inside && cat a/b/f ro/x && test ! -e outside && test ! -L outside && echo none-out'
cat >"$T/want" <<'W'
a 750 directory
a/b/f 644 regular file
tool 755 regular file
ro 555 directory
inside 777 symbolic link
sparse 644 regular file
a/b/f
one
x
none-out
W
diff -u "$T/want" "$T/out" >"$T/d" && ok "tree, modes (setuid dropped) and the inside link" || { not_ok "tree, modes (setuid dropped) and the inside link"; diag "$(cat "$T/d" "$T/err")"; }
run "$SBX" sandbox exec cpt -- sh -c 'du -k src/sparse | cut -f1'
[ "$(cat "$T/out")" -lt 1024 ] && ok "holes stay holes" || not_ok "holes stay holes ($(cat "$T/out") KiB)"

# Out again, into an existing directory (keeps the name) and to a new path.
"$SBX" sandbox exec cpt -- sh -c 'ln -s ../../../etc/passwd src/a/b/up && ln -s /etc src/abs && mkdir src/sub && chmod 700 src/sub'
mkdir "$T/back"
run "$SBX" sandbox cp "$id:src" "$T/back"
expect_rc 0 "cp ID:DIR HOSTDIR: into the directory, under the source's name"
[ -f "$T/back/src/a/b/f" ] && [ "$(cat "$T/back/src/a/b/f")" = one ] && ok "the files came back" || not_ok "the files came back"
expect_eq "$(stat -c %a "$T/back/src/a" "$T/back/src/ro" "$T/back/src/sub" "$T/back/src/tool" | tr '\n' ' ')" "750 555 700 755 " "with their modes"
expect_eq "$(readlink "$T/back/src/inside")" "a/b/f" "an inside link is a link again"
[ ! -e "$T/back/src/a/b/up" ] && [ ! -L "$T/back/src/a/b/up" ] && [ ! -L "$T/back/src/abs" ] && ok "links out of the tree are not made on the host" || not_ok "links out of the tree are not made on the host"
expect_in "$T/err" "'src/abs' skipped" "and said so"
run "$SBX" sandbox cp -r cpt:src/a "$T/fresh"
expect_rc 0 "cp ID:DIR NEWPATH: the directory becomes NEWPATH"
expect_eq "$(cat "$T/fresh/b/f")" one "with its content"
# A setuid file already at the destination loses the bit when overwritten.
chmod 755 "$T/fresh/b/f" && chmod u+s "$T/fresh/b/f"
run "$SBX" sandbox cp "$id:src/a/b" "$T/fresh"
expect_eq "$(stat -c %a "$T/fresh/b/f")" 644 "an overwritten setuid file is no longer setuid"
# A symlink planted on the host where a directory goes is never followed.
mkdir "$T/victim"
mkdir -p "$T/t3/src" && ln -s "$T/victim" "$T/t3/src/a"
run "$SBX" sandbox cp "$id:src" "$T/t3"
expect_rc 1 "a host symlink where a directory goes fails the copy"
expect_eq "$(ls -A "$T/victim")" "" "and nothing was written through it"
run "$SBX" sandbox cp "$id:src" -
expect_rc 1 "a directory to standard output is refused"
expect_in "$T/err" "is a directory" "saying why"
run "$SBX" sandbox cp --bogus "$src" cpt:
expect_rc 2 "an unknown cp option is a usage error"
"$SBX" sandbox rm "$id" >/dev/null
done_testing
