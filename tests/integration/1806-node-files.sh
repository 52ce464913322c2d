#!/usr/bin/env bash
# The sbx-node daemon's file and workspace requests against hostile input, across a network:
# the daemon in a network namespace made here, the harness (tests/node/client.py, written from
# docs/internals/node.md) in another. Checked: a file written and read back byte for byte, its
# stat and its directory's listing; paths that leave the workspace (.., absolute, a NUL, too
# long) refused; a symlink planted in the sandbox that points out of it neither read, written
# through nor followed by a removal; bodies over the bounds refused before they are read; the
# workspace as a tar and a hostile tar refused whole; no token, no files; GET of a sandbox
# answers its whole state; a TLS session offered again is not resumed. Everything made is removed on exit: the daemon, the sandboxes, the
# namespaces.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
NODE=${SBX_NODE:-$(dirname "$SBX")/sbx-node}
CLIENT="$SBX_SRCDIR/tests/node/client.py"
. "$SBX_SRCDIR/tests/node/lib.sh"
command -v python3 >/dev/null || skip_all "no 'python3' here"
trap 'node_cleanup; sandbox_cleanup' EXIT
node_setup || skip_all "$NODE_WHY"
node_add node-a || skip_all "$NODE_WHY"
cd "$T" || exit 1
node_start node-a || { not_ok "the daemon listens"; diag "$(cat nodes/node-a/node.log)"; done_testing; exit; }
URL=$(node_url node-a)
h() { nsenter --net="/run/netns/$NS_HARN" python3 "$CLIENT" "$URL" ca/ca.pem h1.pem h1.key "$@"; }
json() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read().split(" ", 1)[1])[sys.argv[1]])' "$1"; }
status() { cut -d' ' -f1 "$1"; }

# A client offering an earlier TLS session gets a full handshake (the daemon issues no
# tickets: every connection shows its certificate again), not an alert.
h resume >out 2>err
grep -qx 'fresh 200' out && ok "a second connection makes a full handshake, no session resumed" ||
    { not_ok "tls session resumption"; diag "$(cat out err)"; }

h request POST /v1/sandboxes >c1 2>err
ID=$(json id <c1) TOK=$(json token <c1)
F="/v1/sandboxes/$ID/files"

# Contents, stat, listing.
head -c 300000 /dev/urandom >blob
h send PUT "$F?path=a/b/blob&parents=1&mode=640" "$TOK" --body-file blob >out 2>err
h send GET "$F?path=a/b/blob" "$TOK" --out back >out2 2>>err
if [ "$(status out)" = 200 ] && [ "$(status out2)" = 200 ] && cmp -s blob back; then
    ok "a file written with its parents and read back byte for byte"
else not_ok "write and read"; diag "$(cat out out2 err nodes/node-a/node.log)"; fi
h send GET "$F/stat?path=a/b/blob" "$TOK" >out 2>err
if grep -q '^200 .*"type":"file"' out && grep -q '"size":300000' out && grep -q '"mode":416' out; then
    ok "stat: a file of 300000 bytes, mode 0640"
else not_ok "stat"; diag "$(cat out err)"; fi
h send GET "$F/list?path=a/b" "$TOK" >out 2>err
grep -q '^200 {"entries":\[{"name":"blob"' out && ok "list: the directory's one entry" ||
    { not_ok "list"; diag "$(cat out err)"; }
h send POST "$F/mkdir?path=d/e&parents=1" "$TOK" >out 2>err
h send POST "$F/chmod?path=d/e&mode=700" "$TOK" >>out 2>>err
h send GET "$F/stat?path=d/e" "$TOK" >>out 2>>err
grep -q '"type":"dir"' out && grep -q '"mode":448' out && ok "mkdir with parents, chmod" ||
    { not_ok "mkdir, chmod"; diag "$(cat out err)"; }
h send PUT "$F?path=a/b/blob&excl=1" "$TOK" --body x >out 2>err
[ "$(status out)" = 409 ] && ok "excl: an existing file is refused with 409" ||
    { not_ok "excl"; diag "$(cat out err)"; }

# Paths that leave the workspace.
bad=0
for p in ../../../etc/passwd /etc/passwd a/../../x %2e%2e/%2e%2e/etc/hostname; do
    h send GET "$F?path=$p" "$TOK" >out 2>err
    case "$(status out)" in 400|403|404) ;; *) bad=1; diag "GET $p: $(cat out err)";; esac
    h send PUT "$F?path=$p" "$TOK" --body pwned >out 2>err
    case "$(status out)" in 400|403|404) ;; *) bad=1; diag "PUT $p: $(cat out err)";; esac
done
[ $bad = 0 ] && ! grep -rq pwned /etc/passwd "$T/ws" 2>/dev/null &&
    ok "paths out of the workspace are refused, read and written" || not_ok "paths out of the workspace"
h send GET "$F?path=a%00b" "$TOK" >out 2>err
h send GET "$F?path=$(head -c 5000 /dev/zero | tr '\0' a)" "$TOK" >>out 2>>err
[ "$(grep -c '^400 ' out)" = 2 ] && ok "a NUL in a path and a path over 4096 bytes: 400" ||
    { not_ok "NUL and long paths"; diag "$(cat out err)"; }

# A symlink planted inside, pointing out.
mkdir -p "$T/outside" && echo the-secret-content >"$T/outside/secret"
h exec "$ID" "$TOK" ln -s "$T/outside" esc >out 2>err
bad=0
h send GET "$F?path=esc/secret" "$TOK" >out 2>err
grep -q the-secret-content out && { bad=1; diag "read through: $(cat out)"; }
[ "$(status out)" = 403 ] || { bad=1; diag "GET esc/secret: $(cat out err)"; }
h send PUT "$F?path=esc/new" "$TOK" --body pwned >out 2>err
[ "$(status out)" = 403 ] && [ ! -e "$T/outside/new" ] || { bad=1; diag "PUT esc/new: $(cat out err)"; }
# Its body was not read, so the connection ends after the answer, which says so (a client that
# keeps connections must not send its next request into it).
grep -q '^connection: close' err || { bad=1; diag "PUT esc/new's answer: no Connection: close"; }
h send GET "$F/list?path=esc" "$TOK" >out 2>err
! grep -q '^connection: close' err || { bad=1; diag "a whole request's answer closes: $(cat err)"; }
grep -q '"name":"secret"' out && { bad=1; diag "listed through: $(cat out)"; }
h send DELETE "$F?path=esc&recursive=1" "$TOK" >out 2>err
[ "$(status out)" = 200 ] && [ -f "$T/outside/secret" ] || { bad=1; diag "DELETE esc: $(cat out err)"; }
[ $bad = 0 ] && ok "a planted symlink out: not read, written, listed through; its removal leaves the target" ||
    not_ok "a planted symlink out"

# Bodies over the bounds are refused before they are read.
h send PUT "$F?path=huge" "$TOK" --declare $((2 << 30)) --body abc >out 2>err
[ "$(status out)" = 413 ] && ok "a file body over 1 GiB: 413 before it is read" ||
    { not_ok "huge file body"; diag "$(cat out err)"; }
h send PUT "/v1/sandboxes/$ID/workspace" "$TOK" --declare $((9 << 30)) --body abc >out 2>err
[ "$(status out)" = 413 ] && ok "a workspace tar over 8 GiB: 413" ||
    { not_ok "huge tar"; diag "$(cat out err)"; }
h send GET "$F?path=a/b/blob" "" >out 2>err
[ "$(status out)" = 403 ] && ok "no token: 403" || { not_ok "no token"; diag "$(cat out err)"; }

# The workspace as a tar; a hostile tar refused whole.
h send GET "/v1/sandboxes/$ID/workspace" "$TOK" --out ws.tar >out 2>err
if [ "$(status out)" = 200 ] && tar -tf ws.tar | grep -qx './a/b/blob' && ! tar -tf ws.tar | grep -q esc; then
    ok "the workspace as a tar"
else not_ok "workspace tar"; diag "$(cat out err; tar -tf ws.tar 2>&1 | head)"; fi
h request POST /v1/sandboxes >c2 2>err
ID2=$(json id <c2) TOK2=$(json token <c2)
python3 - <<'EOF'
import io, tarfile
def add(t, name, data=b"x", kind=tarfile.REGTYPE, link=""):
    i = tarfile.TarInfo(name); i.type = kind; i.linkname = link; i.size = len(data) if kind == tarfile.REGTYPE else 0
    t.addfile(i, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
with tarfile.open("evil.tar", "w", format=tarfile.PAX_FORMAT) as t:
    add(t, "./ok")
    add(t, "../../../../pwned-by-tar")
with tarfile.open("link.tar", "w", format=tarfile.PAX_FORMAT) as t:
    add(t, "./up", kind=tarfile.SYMTYPE, link="../../..")
    add(t, "./abs", kind=tarfile.SYMTYPE, link="/etc")
EOF
h send PUT "/v1/sandboxes/$ID2/workspace" "$TOK2" --body-file evil.tar >out 2>err
h send GET "/v1/sandboxes/$ID2/files/list?path=" "$TOK2" >list 2>>err
if [ "$(status out)" = 403 ] && grep -q '^200 {"entries":\[\]}' list &&
    [ -z "$(find / "$(dirname "$T")" -maxdepth 6 -xdev -name pwned-by-tar 2>/dev/null | head -n1)" ]; then
    ok "a tar with a member out of the workspace is refused whole, nothing of it unpacked"
else not_ok "hostile tar"; diag "$(cat out list err)"; fi
h request POST /v1/sandboxes >c3 2>err
ID3=$(json id <c3) TOK3=$(json token <c3)
h send PUT "/v1/sandboxes/$ID3/workspace" "$TOK3" --body-file link.tar >out 2>err
h send GET "/v1/sandboxes/$ID3/files/list?path=" "$TOK3" >list 2>>err
if [ "$(status out)" = 200 ] && grep -q '^200 {"entries":\[\]}' list; then
    ok "a tar's symlinks out of the workspace are left out"
else not_ok "symlinks out in a tar"; diag "$(cat out list err)"; fi
h send PUT "/v1/sandboxes/$ID2/workspace" "$TOK2" --body-file ws.tar >out 2>err
h send GET "/v1/sandboxes/$ID2/files?path=a/b/blob" "$TOK2" --out back2 >>out 2>>err
[ "$(grep -c '^200' out)" = 2 ] && cmp -s blob back2 && ok "the tar put into a fresh sandbox" ||
    { not_ok "tar import"; diag "$(cat out err)"; }

h send GET "/v1/sandboxes/$ID" "$TOK" >out 2>err
grep -q '^200 .*"state":{.*"provider":"local"' out && ok "GET of a sandbox answers its whole state" ||
    { not_ok "whole state"; diag "$(cat out err)"; }

h request DELETE "/v1/sandboxes/$ID" "$TOK" >/dev/null 2>&1
h request DELETE "/v1/sandboxes/$ID2" "$TOK2" >/dev/null 2>&1
h request DELETE "/v1/sandboxes/$ID3" "$TOK3" >/dev/null 2>&1
done_testing
