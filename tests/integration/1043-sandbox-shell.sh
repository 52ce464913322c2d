#!/usr/bin/env bash
# sbx sandbox shell runs the sandbox's best shell (bash when it has one) or --shell PATH, on a
# real pseudo-terminal; without a terminal shell and exec -it refuse as docker does.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
DRIVE="python3 $SBX_SRCDIR/tests/integration/pty-drive.py"

id=$("$SBX" sandbox create)
[ -n "$id" ] && ok "a sandbox" || not_ok "a sandbox"
has_bash=$("$SBX" sandbox exec "$id" -- sh -c 'command -v bash >/dev/null && echo yes || echo no')
$DRIVE "$T/tty" '=>echo "shell=${BASH_VERSION:+bash}${BASH_VERSION:-sh}"; exit 3' -- "$SBX" sandbox shell "$id"
expect_eq "$?" 3 "shell on a terminal: the shell's status"
if [ "$has_bash" = yes ]; then
    expect_in "$T/tty" "shell=bash" "bash when the sandbox has it"
else
    expect_in "$T/tty" "shell=sh" "sh when the sandbox has no bash"
fi
$DRIVE "$T/tty" '=>echo "shell=${BASH_VERSION:-sh}"; exit 5' -- "$SBX" sandbox shell --shell /bin/sh "$id"
expect_eq "$?" 5 "--shell PATH"
expect_in "$T/tty" "shell=sh" "runs that shell"
$DRIVE "$T/tty" -- "$SBX" sandbox shell --shell /no/such/shell "$id"
expect_eq "$?" 127 "--shell of a missing program: 127"
run "$SBX" sandbox shell "$id" </dev/null
expect_rc 125 "shell without a terminal: 125"
expect_in "$T/err" "the input device is not a TTY" "saying why"
run "$SBX" sandbox exec -it "$id" -- true </dev/null
expect_rc 125 "exec -it without a terminal: 125"
expect_in "$T/err" "the input device is not a TTY" "as docker says"
run "$SBX" sandbox exec -t "$id" -- sh -c 'tty >/dev/null && echo term' </dev/null
expect_eq "$(tr -d '\r' <"$T/out")" term "-t alone needs no terminal to read"
run "$SBX" sandbox shell
expect_rc 125 "shell without an id: 125"
"$SBX" sandbox rm "$id" >/dev/null
done_testing
