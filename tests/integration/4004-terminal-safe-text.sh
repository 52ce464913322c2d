#!/usr/bin/env bash
# Text that a sandbox, an archive or a file controls never drives the operator's terminal
# (issue 26, finding 8): a refused archive member's name in `sbx snapshot import`'s error, an
# imported snapshot's label in `sbx snapshot ls`, and memory files a sandbox wrote, shown by
# `sbx memory show`. Messages and listings are escaped wherever they go; file contents are
# escaped on a terminal and exact in a pipe (as from cat).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
command -v python3 >/dev/null || skip_all "python3 is needed for the archives and the terminal"

# no_raw FILE DESC: FILE holds no ESC, BEL or C1 CSI byte.
no_raw() {
    if python3 -c 'import sys; d = open(sys.argv[1], "rb").read(); sys.exit(1 if b"\x1b" in d or b"\x07" in d or b"\xc2\x9b" in d else 0)' "$1"; then
        ok "$2"
    else
        not_ok "$2"; diag "$(od -c "$1" | head -12)"
    fi
}

# --- an import refused for a member whose name holds control characters -----------------------
python3 - "$T/ctrl.tar" <<'PY'
import io, sys, tarfile
t = tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT)
i = tarfile.TarInfo("a\x1b]0;t\x07b")
i.size = 1
t.addfile(i, io.BytesIO(b"x"))
t.close()
PY
run "$SBX" snapshot import "$T/ctrl.tar"
expect_rc 1 "an archive member with control characters in its name is refused"
no_raw "$T/err" "the error in a pipe carries no escape sequence"
expect_in "$T/err" 'a\x1b]0;t\x07b' "it shows the name escaped"

# --- a label with an escape sequence, listed ------------------------------------------------------
python3 - "$T/label.tar" <<'PY'
import io, json, sys, tarfile
t = tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT)
head = json.dumps({"format": 1, "label": "\x1b[2Jevil\u009b31m"}).encode()
i = tarfile.TarInfo(".sbx-snapshot.json")
i.size = len(head)
t.addfile(i, io.BytesIO(head))
d = tarfile.TarInfo("./")
d.type = tarfile.DIRTYPE
d.mode = 0o755
t.addfile(d)
f = tarfile.TarInfo("./a.txt")
f.size = 2
f.mode = 0o644
t.addfile(f, io.BytesIO(b"a\n"))
t.close()
PY
run "$SBX" snapshot import "$T/label.tar"
expect_rc 0 "an archive with a hostile label imports"
run "$SBX" snapshot ls
expect_rc 0 "snapshot ls"
no_raw "$T/out" "the listing in a pipe carries no escape sequence"
expect_in "$T/out" 'evil' "and shows the label"
on_tty "$T/tty" "$SBX" snapshot ls
no_raw "$T/tty" "nor on a terminal"
run "$SBX" snapshot ls --json
no_raw "$T/out" "nor its JSON"

# --- memory files a sandbox wrote ------------------------------------------------------------------
mkdir -p "$T/ws/memories"
printf 'mem \033]0;MEMTITLE\007 \033[2J end\n' >"$T/ws/memories/memory_summary.md"
printf 'notes \033[31m red\n' >"$T/ws/memories/MEMORY.md"
on_tty "$T/tty" "$SBX" memory show "$T/ws"
no_raw "$T/tty" "memory show on a terminal shows the escapes, does not send them"
expect_in "$T/tty" 'MEMTITLE' "with the text"
run "$SBX" memory show "$T/ws"
expect_in "$T/out" "$(printf '\033[31m')" "in a pipe the file's bytes are exact (as from cat)"
done_testing
