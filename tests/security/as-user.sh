#!/usr/bin/env bash
# Run an escape-suite script again as an unprivileged user ($SBX_TEST_USER, which scripts/check
# sets to its dedicated sbx-ci; default: nobody), so that the
# suite covers both runner modes when the tests run as root.
set -u
user=${SBX_TEST_USER:-nobody}
# Exit 0: meson reads "1..0 # SKIP" as a skip only with status 0 (77 is an error for TAP).
skip() { echo "1..0 # SKIP $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "not root: the plain run of the suite is already unprivileged"
id "$user" >/dev/null 2>&1 || skip "no user '$user'"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
run_as() {
    setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/ TMPDIR=/tmp SBX="$SBX" \
        SBX_SRCDIR="${SBX_SRCDIR:-}" "$@"
}
run_as test -x "$SBX" -a -r "$1" || skip "user '$user' cannot reach '$SBX' or '$1'"
exec setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/ TMPDIR=/tmp SBX="$SBX" \
    SBX_SRCDIR="${SBX_SRCDIR:-}" bash "$1"
