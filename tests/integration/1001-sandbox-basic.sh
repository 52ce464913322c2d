#!/usr/bin/env bash
# sbx sandbox: create, exec, cp, ps, port, rm against live local sandboxes.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

run "$SBX" sandbox create
expect_rc 0 "create succeeds"
id=$(cat "$T/out")
expect_eq "$(printf %s "$id" | grep -cE '^[0-9a-f]{16}$')" 1 "create prints a 16-hex id"

run "$SBX" sandbox create --json
expect_rc 0 "create --json succeeds"
id2=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["id"])' "$T/out")
expect_eq "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["version"], d["provider"], d["root"], d["isolation"], d["network"], sorted(d))' "$T/out")" \
    "1 local /workspace namespaces none ['created', 'disk', 'exposed_ports', 'id', 'isolation', 'limits', 'manifest', 'manifest_digest', 'network', 'options', 'provider', 'root', 'snapshot', 'unenforced', 'version', 'workspace', 'workspace_owned']" \
    "the session state is versioned, isolated with no network by default, and holds only what it should"
# Only the workspace size limit may be reported (unenforceable without root: 0006-disk.sh).
expect_eq "$(grep -v "^sbx: warning: sandbox '[0-9a-f]*': disk limit .* is not enforced: " "$T/err")" "" \
    "an isolated create warns about nothing"

# Unconfined only when asked, with a warning every time.
run "$SBX" sandbox create --isolation none --json
expect_rc 0 "create --isolation none succeeds"
expect_in "$T/err" "UNCONFINED" "--isolation none warns"
idn=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["id"])' "$T/out")
expect_eq "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["workspace"] == d["root"], d["isolation"], d["network"])' "$T/out")" \
    "True none full" "without isolation commands see the host path and network"
run "$SBX" sandbox exec "$idn" -- pwd
expect_eq "$(cat "$T/out")" "$SBX_WORKSPACES/$idn" "an unconfined command starts in the host workspace"
run "$SBX" sandbox exec --user sandbox "$idn" -- true
expect_rc 125 "--user is refused without isolation (an sbx failure: 125)"
expect_in "$T/err" "isolation 'none'" "the refusal says why"
"$SBX" sandbox rm "$idn" >/dev/null
run "$SBX" sandbox create --isolation none --memory 64M
expect_rc 1 "limits without isolation fail"
expect_in "$T/err" "need isolation" "the error says limits need isolation"
run "$SBX" sandbox create --isolation maybe
expect_rc 2 "an unknown isolation mode is a usage error"
run "$SBX" sandbox create --network some
expect_rc 2 "an unknown network mode is a usage error"
run "$SBX" sandbox create --ro /
expect_rc 1 "a grant of / is refused"
expect_in "$T/err" "'/'" "the refusal names the path"
printf 'users: [alice, bob]\n' > "$T/users.yaml"
run "$SBX" sandbox create --manifest "$T/users.yaml"
expect_rc 0 "create with manifest users succeeds"
idu=$(cat "$T/out")
run "$SBX" sandbox exec "$idu" -- id -un
expect_eq "$(cat "$T/out")" "sandbox" "commands run as the provider's default user, not a manifest user (the SDK's rule)"
run "$SBX" sandbox exec --user mallory "$idu" -- id -un
expect_rc 125 "--user of an unknown user fails with 125"
expect_in "$T/err" "mallory" "the error names the user"
if [ "$(id -u)" = 0 ]; then
    run "$SBX" sandbox exec --user bob "$idu" -- id -un
    expect_eq "$(cat "$T/out")" "bob" "--user picks a manifest user"
    run "$SBX" sandbox exec --user alice "$idu" -- id -un
    expect_eq "$(cat "$T/out")" "alice" "--user picks the first manifest user too"
else
    run "$SBX" sandbox exec --user alice "$idu" -- id -un
    expect_rc 125 "an unprivileged sandbox maps only its default user"
    expect_in "$T/err" "maps only its default user 'sandbox'" "and says so"
fi
"$SBX" sandbox rm "$idu" >/dev/null
run "$SBX" sandbox create --ro relative
expect_rc 2 "a relative grant is a usage error"

run "$SBX" sandbox ps
expect_rc 0 "ps succeeds"
expect_in "$T/out" "$id" "ps lists the first sandbox"
expect_in "$T/out" "$id2" "ps lists the second sandbox"

# A sandbox survives the process that created it: each call here is a new process.
run "$SBX" sandbox exec "$id" -- sh -c 'echo hello > note; pwd'
expect_rc 0 "exec succeeds"
expect_eq "$(cat "$T/out")" "/workspace" "commands start in the workspace, at the manifest root"
expect_eq "$(cat "$SBX_WORKSPACES/$id/note")" "hello" "the workspace is the host directory"
run "$SBX" sandbox exec "$id" -- cat note
expect_eq "$(cat "$T/out")" "hello" "a later exec sees the same live workspace"

run "$SBX" sandbox exec "$id" -- sh -c 'echo out; echo err >&2; exit 3'
expect_rc 3 "exec exits with the command's status"
expect_eq "$(cat "$T/out")" "out" "stdout goes to stdout"
expect_eq "$(cat "$T/err")" "err" "stderr goes to stderr"
run "$SBX" sandbox exec "$id" -- sh -c 'kill -TERM $$'
expect_rc 143 "a command killed by a signal exits 128+N"

run "$SBX" sandbox exec --env A=1 -e B='x y' "$id" -- sh -c 'echo "$A-$B"'
expect_eq "$(cat "$T/out")" "1-x y" "--env adds variables"
OPENAI_API_KEY=sk-secret run "$SBX" sandbox exec "$id" -- sh -c 'echo "[$OPENAI_API_KEY]"'
expect_eq "$(cat "$T/out")" "[]" "the harness environment never reaches the sandbox"

run "$SBX" sandbox exec "$id" -- mkdir -p a/b
run "$SBX" sandbox exec --cwd a/b "$id" -- pwd
expect_eq "$(cat "$T/out")" "/workspace/a/b" "--cwd is relative to the workspace"

run "$SBX" sandbox exec --timeout 0.3 "$id" -- sleep 30
expect_rc 124 "a timeout exits 124"
expect_in "$T/err" "timed out" "a timeout says so"

echo piped > "$T/stdin"
run "$SBX" sandbox exec -i "$id" -- cat < "$T/stdin"
expect_eq "$(cat "$T/out")" "piped" "-i forwards stdin"
run "$SBX" sandbox exec "$id" -- cat
expect_rc 0 "without -i stdin is empty"

TERM=vt100 run "$SBX" sandbox exec -t "$id" -- sh -c 'tty; echo $TERM'
expect_rc 0 "exec -t succeeds"
expect_in "$T/out" "/dev/pts/" "exec -t runs on a terminal"
expect_in "$T/out" "vt100" "exec -t passes the caller's TERM"
TERM= run "$SBX" sandbox exec -t "$id" -- sh -c 'echo $TERM'
expect_in "$T/out" "xterm-256color" "exec -t has a TERM even when the caller has none"
python3 "$SBX_SRCDIR/tests/integration/pty-drive.py" "$T/tty" '=>echo $((40+2)); exit 4' -- "$SBX" sandbox shell "$id"
rc=$?
expect_rc 4 "shell exits with the shell's status"
expect_in "$T/tty" "42" "shell runs what it reads on its terminal"
printf 'echo $((40+2))\nexit 4\n' > "$T/stdin"
run "$SBX" sandbox shell "$id" < "$T/stdin"
expect_rc 125 "shell without a terminal is refused"
expect_in "$T/err" "the input device is not a TTY" "as docker says it"

# cp, both ways
printf 'data\n' > "$T/in.txt"
chmod 0640 "$T/in.txt"
run "$SBX" sandbox cp "$T/in.txt" "$id:copied.txt"
expect_rc 0 "cp host -> sandbox"
run "$SBX" sandbox exec "$id" -- stat -c %a copied.txt
expect_eq "$(cat "$T/out")" "640" "cp keeps the mode"
run "$SBX" sandbox cp "$T/in.txt" "$id:a/"
run "$SBX" sandbox exec "$id" -- cat a/in.txt
expect_eq "$(cat "$T/out")" "data" "cp into a directory keeps the name"
run "$SBX" sandbox cp "$id:copied.txt" "$T/back.txt"
expect_rc 0 "cp sandbox -> host"
expect_eq "$(cat "$T/back.txt")" "data" "cp brings the content back"
run "$SBX" sandbox cp "$id:note" -
expect_eq "$(cat "$T/out")" "hello" "cp to - writes stdout"
run "$SBX" sandbox cp "$T/in.txt" "$T/x"
expect_rc 2 "cp between two host paths is a usage error"
run "$SBX" sandbox cp "$id:missing" "$T/x"
expect_rc 1 "cp of a missing file fails"

# ports
run "$SBX" sandbox port "$id" 1
expect_rc 1 "port without a listener fails"
expect_in "$T/err" "nothing listens on port 1" "port says nothing listens"
run "$SBX" sandbox port "$id" 70000
expect_rc 2 "a port out of range is a usage error"
# The host reaches a service inside only in network mode full until the port forwarder lands.
run "$SBX" sandbox create --network full
expect_rc 0 "create --network full succeeds"
expect_in "$T/err" "DANGEROUS" "network full is reported as dangerous"
idf=$(cat "$T/out")
if command -v python3 >/dev/null; then
    "$SBX" sandbox exec "$idf" -- python3 -c '
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open("port", "w").write(str(s.getsockname()[1]))
c, _ = s.accept(); c.sendall(b"pong\n"); time.sleep(30)' >/dev/null 2>&1 &
    wait_until "$SBX" sandbox exec "$idf" -- test -s port
    port=$("$SBX" sandbox exec "$idf" -- cat port)
    run "$SBX" sandbox port "$idf" "$port"
    expect_rc 0 "port of a listening service succeeds"
    # The sandbox has a network namespace of its own: the URL is a host-side forward.
    url=$(cat "$T/out")
    case "$url" in
    http://127.0.0.1:[0-9]*) ok "port prints the host URL" ;;
    *) not_ok "port prints the host URL"; diag "got '$url'" ;;
    esac
    reply=$(python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1", int(sys.argv[1]))); print(s.recv(10).decode().strip())' "${url##*:}")
    expect_eq "$reply" "pong" "the URL reaches the service"
fi
"$SBX" sandbox rm "$idf" >/dev/null

run "$SBX" sandbox ps --json
expect_rc 0 "ps --json succeeds"
expect_eq "$(python3 -c 'import json,sys; print(sorted(d["id"] for d in json.load(open(sys.argv[1]))) == sorted(sys.argv[2:]))' "$T/out" "$id" "$id2")" \
    "True" "ps --json lists exactly the live sandboxes"
run "$SBX" sandbox --help
expect_rc 0 "sandbox --help succeeds"
expect_in "$T/out" "exec [-t] [-i]" "sandbox --help shows the commands"
run "$SBX" help
expect_in "$T/out" "sandbox" "the top-level help lists sandbox"

# exposed ports: only those resolve
run "$SBX" sandbox create --port 8080
idp=$(cat "$T/out")
run "$SBX" sandbox port "$idp" 9999
expect_rc 1 "a port that is not exposed fails"
expect_in "$T/err" "port 9999 is not exposed" "the refusal names the port"
"$SBX" sandbox rm "$idp" >/dev/null
run "$SBX" sandbox create --port 0
expect_rc 2 "an exposed port out of range is a usage error"

# a runtime base that others could write is refused; one they could only enter is closed
mkdir -p "$T/badrun/sbx"
chmod 0777 "$T/badrun/sbx"
XDG_RUNTIME_DIR="$T/badrun" run "$SBX" sandbox ps
expect_rc 1 "a runtime directory open to others is refused"
expect_in "$T/err" "writable by others" "the refusal says what is wrong"
chmod 0755 "$T/badrun/sbx"
XDG_RUNTIME_DIR="$T/badrun" run "$SBX" sandbox ps
expect_rc 0 "a runtime directory others can only enter is accepted"
expect_eq "$(stat -c %a "$T/badrun/sbx")" 700 "and made 0700"

# errors
run "$SBX" sandbox exec ffffffffffffffff -- true
expect_rc 125 "exec in an unknown sandbox fails with 125, not a status the command could give"
expect_in "$T/err" "sbx: no sandbox 'ffffffffffffffff'" "the unknown id is named"
run "$SBX" sandbox exec ../etc -- true
expect_rc 125 "a malformed id fails with 125"
expect_in "$T/err" "not a sandbox id" "a malformed id is called so"
run "$SBX" sandbox exec "$id"
expect_rc 125 "exec without a command is a usage error (125)"
run "$SBX" sandbox exec
expect_rc 125 "exec without an id is a usage error (125)"
run "$SBX" sandbox exec --timeout soon "$id" -- true
expect_rc 125 "a bad timeout is a usage error (125)"
run "$SBX" sandbox exec --frob "$id" -- true
expect_rc 125 "an unknown option is a usage error (125)"
run "$SBX" sandbox frob
expect_rc 2 "an unknown sandbox command is a usage error"
run "$SBX" sandbox exec "$id" -- no-such-command-sbx
expect_rc 127 "a missing command fails with 127"
expect_in "$T/err" "command 'no-such-command-sbx' not found" "a missing command is named"
run "$SBX" sandbox exec -i "$id" -- no-such-command-sbx </dev/null
expect_rc 127 "a missing command fails with 127 when streamed too"
run "$SBX" sandbox exec "$id" -- sh -c 'printf "#!/bin/sh\n" > noexec; chmod 644 noexec'
run "$SBX" sandbox exec "$id" -- ./noexec
expect_rc 126 "a command that cannot be run (not executable) fails with 126"
expect_in "$T/err" "cannot run './noexec': permission denied" "and says why"
run "$SBX" sandbox exec "$id" -- /
expect_rc 126 "a directory as the command fails with 126"
# The command's PATH, searched as execvp searches it (exec_search in the supervisor): EACCES and
# ENOENT/ENOTDIR go on to the next directory, EACCES wins over ENOENT at the end, ELOOP stops,
# a script without #! runs under /bin/sh, an empty entry is the working directory.
run "$SBX" sandbox exec "$id" -- sh -c 'mkdir -p p/ro p/ok p/sh p/dir/tool p/shut &&
    printf "#!/bin/sh\necho ro\n" >p/ro/tool && chmod 644 p/ro/tool &&
    printf "#!/bin/sh\necho ok \$0\n" >p/ok/tool && chmod 755 p/ok/tool &&
    printf "echo sh \$0\n" >p/sh/tool && chmod 755 p/sh/tool && cp p/ok/tool p/shut/ &&
    chmod 000 p/shut && : >p/file && ln -s loop2 p/loop1 && ln -s loop1 p/loop2'
expect_rc 0 "make the PATH directories"
w=/workspace/p
pathrun() { run "$SBX" sandbox exec -e "PATH=$1" "$id" -- tool; }
pathrun "$w/ro:$w/none:$w/file:$w/shut:$w/dir:$w/ok"
expect_rc 0 "a command behind a non-executable file, a missing and a refused directory runs"
expect_eq "$(cat "$T/out")" "ok $w/ok/tool" "from the first directory that can run it"
pathrun "$w/none:$w/ro:$w/none"
expect_rc 126 "a command found only not executable fails with 126"
expect_in "$T/err" "cannot run 'tool': permission denied" "and says permission denied"
pathrun "$w/shut:$w/none"
expect_rc 126 "a directory that cannot be searched is permission denied too"
pathrun "$w/file:$w/none"
expect_rc 127 "a command in no directory fails with 127"
expect_in "$T/err" "command 'tool' not found" "and is not found"
pathrun "$w/none:$w/sh"
expect_rc 0 "a script without #! runs"
expect_eq "$(cat "$T/out")" "sh $w/sh/tool" "under /bin/sh, with its path"
pathrun "$w/loop1:$w/ok"
expect_rc 126 "a loop of symbolic links stops the search"
expect_in "$T/err" "too many levels of symbolic links" "and is named"
run "$SBX" sandbox exec -w "$w/ok" -e "PATH=$w/none:" "$id" -- tool
expect_eq "$(cat "$T/out")" "ok tool" "an empty PATH entry is the working directory"
run "$SBX" sandbox exec -e "PATH=$w/ok" "$id" -- p/sh/tool
expect_eq "$(cat "$T/out")" "sh p/sh/tool" "a name with a slash is not searched"
run "$SBX" sandbox exec "$id" -- sh -c 'chmod 755 p/shut && rm -rf p'
for code in 1 2 124 125 126 127; do
    run "$SBX" sandbox exec "$id" -- sh -c "exit $code"
    expect_rc "$code" "the command's own status $code passes through"
done
run "$SBX" sandbox exec "$id" -- sh -c 'kill -TERM $$'
expect_rc 143 "a command killed by SIGTERM gives 128+15"

# rm
ws2=$(python3 -c 'import json; print(json.load(open("'"$RUNBASE/$id2/state.json"'"))["workspace"])')
run "$SBX" sandbox rm --keep-workspace "$id2"
expect_rc 0 "rm --keep-workspace succeeds"
[ -d "$ws2" ] && ok "--keep-workspace keeps the workspace" || not_ok "--keep-workspace keeps the workspace"
rm -rf "$ws2"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm succeeds"
[ ! -e "$SBX_WORKSPACES/$id" ] && ok "rm removes the workspace" || not_ok "rm removes the workspace"
[ ! -e "$RUNBASE/$id" ] && ok "rm removes the runtime directory" || not_ok "rm removes the runtime directory"
run "$SBX" sandbox ps
expect_not_in "$T/out" "$id" "ps no longer lists it"
run "$SBX" sandbox rm "$id"
expect_rc 1 "rm of a removed sandbox fails"
expect_in "$T/err" "no sandbox" "rm says there is no such sandbox"

# --workspace uses a directory as is and never deletes it
mkdir "$T/mine"
echo keep > "$T/mine/file"
run "$SBX" sandbox create --workspace "$T/mine" --workspace-existing keep
id3=$(cat "$T/out")
run "$SBX" sandbox exec "$id3" -- cat file
expect_eq "$(cat "$T/out")" "keep" "--workspace uses the directory"
run "$SBX" sandbox rm "$id3"
[ -f "$T/mine/file" ] && ok "rm never deletes a given workspace" || not_ok "rm never deletes a given workspace"
run "$SBX" sandbox create --workspace "$T/nope"
expect_rc 1 "a missing --workspace fails"
expect_in "$T/err" "not an existing directory" "a missing --workspace is named"

done_testing
