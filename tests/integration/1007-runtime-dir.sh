#!/usr/bin/env bash
# Without XDG_RUNTIME_DIR the runtime dir is in a place another user cannot pre-empt: a
# /tmp/sbx-<uid> made by someone else (here root, for the test user) neither locks the user out
# nor gets used; a candidate another user owns is refused with a clear error.
. "$(dirname "$0")/lib.sh"
user=${SBX_TEST_USER:-sbx-ci}
[ "$(id -u)" = 0 ] || skip_all "needs root to squat another user's directory"
id "$user" >/dev/null 2>&1 || skip_all "no user '$user'"
command -v setpriv >/dev/null || skip_all "setpriv (util-linux) is not installed"
uid=$(id -u "$user")
squat=/tmp/sbx-$uid
made_squat=
if [ ! -e "$squat" ]; then
    mkdir -m 0700 "$squat" && made_squat=1
fi
cleanup() {
    local id
    for id in $(ls "$T/home/.local/state/sbx/run" 2>/dev/null); do
        as_user "$SBX" sandbox rm "$id" >/dev/null 2>&1
    done
    [ -n "$made_squat" ] && rmdir "$squat"
    rm -rf "$T"
}
trap cleanup EXIT
chmod 0755 "$T"
mkdir -p "$T/home"
chown "$user" "$T/home"
as_user() {
    setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$T/home" "$@"
}
as_user test -x "$SBX" || skip_all "user '$user' cannot run '$SBX'"
before=$(ls -A "$squat" 2>/dev/null)
owner=$(stat -c %u "$squat")

run as_user "$SBX" sandbox create
expect_rc 0 "create works although /tmp/sbx-$uid belongs to uid $owner"
id=$(cat "$T/out")
expect_eq "$(ls -A "$squat" 2>/dev/null)" "$before" "the squatted directory is not used"
if [ -d "/run/user/$uid" ]; then
    base=/run/user/$uid/sbx
else
    base=$T/home/.local/state/sbx/run
fi
[ -n "$id" ] && [ -d "$base/$id" ] && ok "the runtime dir is under '$base'" ||
    not_ok "the runtime dir is under '$base'"
expect_eq "$(stat -c '%u %a' "$base")" "$uid 700" "it is private to the user"
run as_user "$SBX" sandbox exec "$id" -- echo hello
expect_rc 0 "exec works"
expect_in "$T/out" hello "exec output"
run as_user "$SBX" sandbox rm "$id"
expect_rc 0 "rm works"

# A candidate another user owns is refused, naming it and the way out.
mkdir -m 0700 "$T/xdg" "$T/xdg/sbx"
chown "$user" "$T/xdg"
run as_user env XDG_RUNTIME_DIR="$T/xdg" "$SBX" sandbox ps
expect_rc 1 "a runtime dir owned by another user is refused"
expect_in "$T/err" "'$T/xdg/sbx' is not a directory owned by uid $uid" "the error names it"
# Our own directory that others can enter is closed down; one they can write is refused.
chown "$user" "$T/xdg/sbx"
chmod 0755 "$T/xdg/sbx"
run as_user env XDG_RUNTIME_DIR="$T/xdg" "$SBX" sandbox ps
expect_rc 0 "our own runtime dir with read bits for others is accepted"
expect_eq "$(stat -c %a "$T/xdg/sbx")" 700 "and made 0700"
chmod 0733 "$T/xdg/sbx"
run as_user env XDG_RUNTIME_DIR="$T/xdg" "$SBX" sandbox ps
expect_rc 1 "our own runtime dir writable by others is refused"
expect_in "$T/err" "writable by others" "the error says why"
done_testing
