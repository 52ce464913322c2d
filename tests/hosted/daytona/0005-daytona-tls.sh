#!/usr/bin/env bash
# sbx's daytona provider over HTTPS (fake.sh start DIR --tls: a certificate made at test time):
# refused while the certificate is not trusted, then trusted with -o ca_file=, and through it a
# create, a command whose output streams over the logs WebSocket (TLS), a terminal, a file in
# and out, a snapshot restored locally, rm; the CA file is kept in sbx's record, so by-id
# commands reach the sandbox again.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$DAYTONA_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
daytona_fake_start "$fake" --tls
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"

case $DAYTONA_API_URL in https://*) ok "the fake serves HTTPS" ;; *) not_ok "the fake serves HTTPS ($DAYTONA_API_URL)" ;; esac
run "$SBX" sandbox create --provider daytona
expect_rc 1 "a certificate sbx does not trust is refused"
expect_in "$T/err" "not trusted" "saying so"
run "$SBX" sandbox create --provider daytona -o "ca_file=$fake/cert.pem"
expect_rc 0 "with ca_file the sandbox is made"
id=$(tail -1 "$T/out")
run "$SBX" sandbox exec "$id" -- sh -c 'echo out; echo err >&2; exit 4'
expect_rc 4 "a command's exit status over TLS"
expect_eq "$(cat "$T/out")/$(cat "$T/err")" "out/err" "its stdout and stderr apart"
script -qec "$SBX sandbox exec -t $id -- sh -c 'stty size; exit 6'; echo rc=\$?" /dev/null >"$T/tty" 2>&1
expect_in "$T/tty" "rc=6" "a terminal over TLS, with its exit status"
daytona_knob '{"pty_exit_control": false}'
script -qec "$SBX sandbox exec -t $id -- sh -c 'exit 9'; echo rc=\$?" /dev/null >"$T/tty" 2>&1
expect_in "$T/tty" "rc=9" "from a daemon without the exit-control message too (the close reason)"
daytona_knob '{"pty_exit_control": true}'
head -c 100000 /dev/urandom >"$T/in.bin"
run "$SBX" sandbox cp "$T/in.bin" "$id:in.bin"
expect_rc 0 "a file goes in"
run "$SBX" sandbox cp "$id:in.bin" "$T/back.bin"
same "$T/in.bin" "$T/back.bin" "and comes back the same"
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "a snapshot"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores locally"
lid=$(tail -1 "$T/out")
run "$SBX" sandbox exec "$lid" -- sha256sum in.bin
expect_eq "$(cut -d' ' -f1 "$T/out")" "$(sha256sum "$T/in.bin" | cut -d' ' -f1)" "with the file"
"$SBX" sandbox rm "$lid" >/dev/null 2>&1
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm deletes it"
expect_eq "$(daytona_stat sandboxes)" 0 "nothing is left at the service"
done_testing
