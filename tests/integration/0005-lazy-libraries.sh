#!/usr/bin/env bash
# libcurl, libarchive, sqlite, libcrypto, libyaml and libseccomp are opened on first use
# (src/core/dl.h):
# commands that do not need them never map them, and a command that needs one it cannot load
# says which library it is instead of sbx failing to start at all. libm is not linked at all
# (a sanitizer's runtime may still bring it in, so that is checked on the program's own list).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

heavy="libcurl.so.4 libarchive.so.13 libsqlite3.so.0 libcrypto.so.3 libyaml-0.so.2 libseccomp.so.2"

# maps_ok FILE DESC: FILE (an LD_DEBUG=files log or a /proc/PID/maps copy) shows libc (so it is
# a dynamically linked process's list; jansson may be linked into sbx itself, meson.build) and
# none of the heavy libraries.
maps_ok() {
    local lib
    expect_in "$1" libc.so "$2: the file lists sbx's libraries"
    for lib in $heavy; do expect_not_in "$1" "${lib%%.so*}.so" "$2: does not load $lib"; done
}

if command -v readelf >/dev/null; then
    for prog in "$SBX" "${SBX_SUPERVISOR:-$(dirname "$SBX")/sbx-supervisor}"; do
        readelf -d "$prog" | grep NEEDED >"$T/needed"
        expect_in "$T/needed" libc.so "${prog##*/}: the list of needed libraries is read"
        for lib in libm.so libyaml libseccomp; do
            expect_not_in "$T/needed" "$lib" "${prog##*/} does not link $lib"
        done
    done
else
    ok "the libraries sbx links # SKIP readelf is not installed (apt-get install binutils)"
fi

for cmd in "version" "help sandbox" "sandbox ls"; do
    # shellcheck disable=SC2086
    LD_DEBUG=files "$SBX" $cmd >/dev/null 2>"$T/ld"
    maps_ok "$T/ld" "sbx $cmd"
done

mkdir "$T/w"
run "$SBX" sandbox create --workspace "$T/w"
expect_rc 0 "create a sandbox"
id=$(cat "$T/out")

# A client that is running a command: everything it will load is loaded by then.
"$SBX" sandbox exec "$id" -- sh -c ': >started; i=0; while [ ! -e done ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done' \
    >/dev/null 2>&1 &
client=$!
if wait_until test -e "$T/w/started"; then
    cp "/proc/$client/maps" "$T/maps"
    maps_ok "$T/maps" "sbx sandbox exec (running)"
else
    not_ok "the command of sbx sandbox exec started"
fi
: >"$T/w/done"
wait "$client"
rc=$?
expect_rc 0 "sbx sandbox exec ends with its command"

# Libraries that cannot be loaded: a file of each name that is not a library, found first.
mkdir "$T/bad"
for lib in $heavy; do : >"$T/bad/$lib"; done
bad() { LD_LIBRARY_PATH="$T/bad" "$@"; }

run bad "$SBX" version
expect_rc 0 "sbx version starts without them"
expect_in "$T/out" "sbx " "sbx version prints the version"
run bad "$SBX" sandbox exec "$id" -- echo hi
expect_rc 0 "sbx sandbox exec runs without them"
expect_in "$T/out" "hi" "sbx sandbox exec prints the command's output"

# The supervisor starts with an empty environment: a wrapper gives it the bad directory. Only
# an isolated sandbox needs libseccomp (its filter, built by the supervisor on the host).
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$T/bad" \
    "${SBX_SUPERVISOR:-$(dirname "$SBX")/sbx-supervisor}" >"$T/sup-bad"
chmod 755 "$T/sup-bad"
run env SBX_SUPERVISOR="$T/sup-bad" "$SBX" sandbox create
expect_rc 1 "an isolated create fails without libseccomp"
expect_in "$T/err" "cannot load 'libseccomp.so.2' (needed to build a sandbox's seccomp filter)" \
    "and names libseccomp"
others=0
for d in "$RUNBASE"/*; do [ "${d##*/}" = "$id" ] || others=$((others + 1)); done
expect_eq "$others" 0 "and leaves no sandbox behind"
run env SBX_SUPERVISOR="$T/sup-bad" "$SBX" sandbox create --isolation none
expect_rc 0 "a sandbox without isolation starts without libseccomp"
id_none=$(cat "$T/out")
run "$SBX" sandbox exec "$id_none" -- echo none
expect_in "$T/out" "none" "and runs commands"
run "$SBX" sandbox rm "$id_none"
expect_rc 0 "remove the sandbox without isolation"

printf 'version: 1\nentries: {}\n' >"$T/m.yaml"
run bad "$SBX" manifest check --no-host-checks "$T/m.yaml"
expect_rc 1 "manifest check of a yaml file fails without libyaml"
expect_in "$T/err" "cannot load 'libyaml-0.so.2' (needed to read yaml documents)" "and names libyaml"

export SBX_CONVERSATIONS="$T/conv.db"
run bad "$SBX" conversation ls
expect_rc 1 "conversation ls fails without sqlite"
expect_in "$T/err" "cannot load 'libsqlite3.so.0' (needed for conversations)" "and names sqlite"
[ -e "$T/conv.db" ] && not_ok "no database is made" || ok "no database is made"

printf 'not a tar' >"$T/x.tar"
run bad "$SBX" snapshot import "$T/x.tar"
expect_rc 1 "snapshot import fails without libarchive"
expect_in "$T/err" "cannot load 'libarchive.so.13' (needed to read and write tar archives)" \
    "and names libarchive"

run bad "$SBX" sandbox snapshot "$id" "$T/snap.tar"
expect_rc 1 "sandbox snapshot fails without libcrypto"
expect_in "$T/err" "cannot load 'libcrypto.so.3' (needed for sha-256, hmac and certificates)" "and names libcrypto"

run bad "$SBX" sandbox ls --docker-host "unix://$T/none.sock"
expect_rc 0 "sandbox ls with a docker host still lists the local sandboxes"
expect_in "$T/out" "$id" "the local sandbox is listed"
expect_in "$T/err" "cannot load 'libcurl.so.4' (needed to talk HTTP" "and the warning names libcurl"

# The same commands find the real libraries.
run "$SBX" conversation ls
expect_rc 0 "conversation ls works with sqlite"
run "$SBX" sandbox snapshot "$id" "$T/snap.tar"
expect_rc 0 "sandbox snapshot works with libcrypto and libarchive"
LD_DEBUG=files "$SBX" manifest check --no-host-checks "$T/m.yaml" >"$T/out" 2>"$T/ld"
rc=$?
expect_rc 0 "manifest check of a yaml file works with libyaml"
expect_in "$T/ld" "libyaml-0.so.2" "and loads libyaml to read it"

run "$SBX" sandbox rm "$id"
expect_rc 0 "remove the sandbox"
done_testing
